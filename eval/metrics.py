"""Decode metrics from per-round records; no model needed.

Usage::

    from eaglehead.eval.metrics import compute_metrics, metrics_by_category, speedup, itl_samples
    m = compute_metrics(results)      # a GenerationResult or a list (one method, one workload)
    m.tau, m.survival, m.time_per_token_s, json.dumps(m.to_dict())
    speedup(vanilla_metrics, m)       # vanilla time/token divided by the method's time/token
    metrics_by_category([("writing", r1), ("code", r2)])  # {"overall": {...}, "categories": {...}}

Inputs are any objects with the attributes of ``decode.generate``'s records:
``RoundRecord(gamma, accepted, committed, active, t_draft, t_verify, t_rest)`` and
``GenerationResult(tokens, rounds, token_times, t_start, t_end, prompt_lengths)``. ``accepted`` and
``committed`` may list every batch row (inactive rows are masked out with ``active``) or only the
active rows, in batch order.

Conventions. A *row-round* is one active
batch row in one target round; ``A`` is its count of consecutively accepted drafts.

Trees (``TreeRoundRecord``: ``gamma`` = verified draft nodes, ``accepted`` = accepted depth, ``depth``):
``A`` is the accepted depth and the survival positions are depths (``depth_values``); ``drafted`` and
``verified_mean`` count verified nodes, so ``acceptance_rate`` = accepted tokens per verified node. For
chains both readings coincide (``depth`` = gamma).

Engine results (``engine_result.EngineResult``, llama.cpp): the engine reports totals, not rounds, so the
round fields come from its counters (``engine_result.engine_round_fields``) and survival is empty; the
per-token fields (TTFT, ITL, latency, throughput) come from the streamed token times as for our loops.

- ``tau`` = 1 + mean A over row-rounds: tokens committed per target round *including the
  correction/bonus token*, as the draft policy produced them before EOS/budget truncation (vanilla
  steps, gamma 0, count as 1). ``tau_committed`` = total committed / row-rounds, i.e. what was
  actually kept; the two agree when ``truncated_row_rounds == 0``.
- ``survival[i-1]`` = Pr(A >= i) and ``conditional[i-1]`` = Pr(A >= i | A >= i-1) for
  i = 1..gamma_max, both over the row-rounds whose gamma >= i only, so mixed draft lengths are not
  counted as rejections. ``None`` where no row-round drafted position i.
- ``acceptance_rate`` = accepted / drafted; it depends on gamma, never compare it across gammas.
- ``time_per_token_s`` = sum over rounds of (T_d + T_v + T_b) / sum of committed tokens
  (cumulative time over cumulative output, never the mean of per-round ratios). It covers
  decode rounds only; prefill shows up in TTFT. ``speedup`` divides two of these.
- Per request (batch row): TTFT = first token time - t_start; latency = last token time - t_start;
  TPOT = (latency - TTFT) / (output_len - 1), averaged over requests with >= 2 tokens.
- ``itl_*`` (what a streaming user sees): per-token gaps between consecutive tokens of a row, where
  tokens delivered together have gap 0. ``itl_event_*``: gaps between consecutive *distinct*
  delivery times of a row (the wait for the next chunk). Percentiles use linear interpolation.
- ``wall_time_per_token_s`` = wall time / output tokens (the inverse of the throughput below).
- ``throughput_tok_s`` = output tokens (all rows, prefill token included) / wall time, where wall
  time is the union of the calls' [t_start, t_end] intervals (sequential calls add up, concurrent
  ones are not double counted).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .engine_result import engine_round_fields


@dataclass
class DecodeMetrics:
    """Metrics of one workload (one method). ``None`` marks a quantity with no data behind it."""

    results: int  # generate calls
    requests: int  # batch rows over all calls
    rounds: int  # target verification rounds (one target forward for the whole batch each)
    row_rounds: int  # (round, active row) pairs
    gamma_max: int
    gamma_values: list[int]  # distinct draft lengths (trees: verified nodes) among row-rounds
    depth_values: list[int]  # distinct drafted depths (chains: = gamma_values; trees: the tree depth)
    verified_mean: float | None  # draft tokens verified per row-round (tree nodes, chain gamma)
    drafted: int
    accepted: int
    committed_tokens: int  # tokens committed by rounds
    output_tokens: int  # sum of len(tokens[row]); also counts a token produced by prefill
    truncated_row_rounds: int | None  # row-rounds with committed < accepted + 1 (EOS, budget); None: unknown
    accepted_mean: float | None  # mean A over row-rounds
    tau: float | None  # 1 + accepted_mean: incl. correction/bonus token, before truncation
    tau_committed: float | None  # committed_tokens / row_rounds: what truncation left
    tau_drafting: float | None  # 1 + accepted / row-rounds that drafted (llama.cpp's "mean len" convention)
    survival: list[float | None]  # Pr(A >= i), i = 1..gamma_max
    conditional: list[float | None]  # Pr(A >= i | A >= i-1), i = 1..gamma_max
    acceptance_rate: float | None  # accepted / drafted
    t_draft_mean_s: float | None
    t_verify_mean_s: float | None
    t_rest_mean_s: float | None
    round_time_mean_s: float | None  # C-bar
    round_time_total_s: float
    committed_per_round: float | None  # K-bar: committed tokens (all rows) per round
    time_per_token_s: float | None
    wall_time_s: float
    throughput_tok_s: float | None
    ttft_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    latency_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    tpot_s: float | None
    itl_mean_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    itl_p99_s: float | None
    itl_event_p50_s: float | None
    itl_event_p95_s: float | None
    itl_event_p99_s: float | None
    output_len_mean: float | None
    output_len_min: int | None
    output_len_max: int | None
    output_len_p50: float | None
    wall_time_per_token_s: float | None = None  # wall time / output tokens (prefill included; 1 / throughput)
    engine_time_per_token_s: float | None = None  # llama.cpp's own predicted_ms / predicted_n; None for torch

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def percentile(xs: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if xs else None


def mean_of(xs: list[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


def _as_results(results: Any) -> list[Any]:
    if hasattr(results, "rounds"):
        return [results]
    results = list(results)
    for i, r in enumerate(results):
        for name in ("tokens", "rounds", "token_times", "t_start", "t_end"):
            if not hasattr(r, name):
                raise ValueError(
                    f"results[{i}] has no attribute {name!r}; expected a GenerationResult"
                )
    return results


def _active_values(values: list[int], active: list[bool], name: str, where: str) -> list[int]:
    """Values of the active rows: ``values`` lists every row or only the active ones."""
    values = list(values)
    if len(values) == len(active):
        return [v for v, a in zip(values, active) if a]
    if len(values) == sum(active):
        return values
    raise ValueError(
        f"{where}: {name} has {len(values)} entries; expected one per row ({len(active)}) "
        f"or one per active row ({sum(active)})"
    )


def _row_rounds(rnd: Any, where: str) -> list[tuple[int, int, int, int]]:
    """``(positions, A, committed, verified)`` for every active row of one round (positions: the drafted
    depth, = gamma for a chain; verified: draft tokens verified, = gamma); validates the record."""
    gamma = 0 if rnd.gamma is None else rnd.gamma  # None: a plain decoding step, nothing drafted
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"{where}: gamma must be an int >= 0 or None (no draft), got {rnd.gamma!r}")
    active = [bool(a) for a in rnd.active]
    acc = _active_values(rnd.accepted, active, "accepted", where)
    com = _active_values(rnd.committed, active, "committed", where)
    for name in ("t_draft", "t_verify", "t_rest"):
        t = getattr(rnd, name)
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"{where}: {name} must be a finite time >= 0 s, got {t!r}")
    depth = getattr(rnd, "depth", gamma)  # a tree round's accepted count is a depth
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"{where}: depth must be an int >= 0, got {depth!r}")
    depth = min(depth, gamma)  # the drafted depth; a tree of gamma nodes is at most gamma deep
    out = []
    for a, c in zip(acc, com):
        if not 0 <= a <= depth:
            raise ValueError(f"{where}: accepted {a} outside 0..{'depth' if hasattr(rnd, 'depth') else 'gamma'}"
                             f"={depth}")
        if not 0 <= c <= a + 1:
            raise ValueError(f"{where}: committed {c} outside 0..accepted+1={a + 1}")
        out.append((depth, int(a), int(c), gamma))
    return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def itl_samples(results: Any, per: str = "token") -> list[float]:
    """Inter-token gaps in seconds over all rows. ``per="token"``: one gap per token after a row's
    first (co-delivered tokens give 0); ``per="event"``: one gap per distinct delivery time."""
    if per not in ("token", "event"):
        raise ValueError(f"per must be 'token' or 'event', got {per!r}")
    gaps: list[float] = []
    for i, res in enumerate(_as_results(results)):
        for row, times in enumerate(res.token_times):
            times = [float(t) for t in times]
            if any(b < a for a, b in zip(times, times[1:])):
                raise ValueError(f"results[{i}].token_times[{row}] must be non-decreasing")
            if per == "event":
                times = sorted(set(times))
            gaps.extend(b - a for a, b in zip(times, times[1:]))
    return gaps


@dataclass
class _Samples:
    """Per-round and per-request samples of a workload, validated."""

    rr: list[tuple[int, int, int, int]] = field(default_factory=list)  # (depth, accepted, committed, verified)
    t_d: list[float] = field(default_factory=list)
    t_v: list[float] = field(default_factory=list)
    t_b: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    out_lens: list[int] = field(default_factory=list)
    intervals: list[tuple[float, float]] = field(default_factory=list)


def _collect(results: list) -> _Samples:
    smp = _Samples()
    rr, t_d, t_v, t_b = smp.rr, smp.t_d, smp.t_v, smp.t_b
    ttft, latency, tpot, out_lens, intervals = smp.ttft, smp.latency, smp.tpot, smp.out_lens, smp.intervals
    for i, res in enumerate(results):
        if res.t_end < res.t_start:
            raise ValueError(f"results[{i}]: t_end {res.t_end} is before t_start {res.t_start}")
        intervals.append((float(res.t_start), float(res.t_end)))
        for j, rnd in enumerate(res.rounds):
            rr.extend(_row_rounds(rnd, f"results[{i}].rounds[{j}]"))
            t_d.append(float(rnd.t_draft))
            t_v.append(float(rnd.t_verify))
            t_b.append(float(rnd.t_rest))
        if len(res.token_times) != len(res.tokens):
            raise ValueError(
                f"results[{i}]: token_times has {len(res.token_times)} rows, "
                f"tokens {len(res.tokens)}"
            )
        for row, (toks, times) in enumerate(zip(res.tokens, res.token_times)):
            if len(times) != len(toks):
                raise ValueError(
                    f"results[{i}] row {row}: {len(times)} token_times for {len(toks)} tokens"
                )
            out_lens.append(len(toks))
            if toks:
                first, last = times[0] - res.t_start, times[-1] - res.t_start
                ttft.append(first)
                latency.append(last)
                if len(toks) >= 2:
                    tpot.append((last - first) / (len(toks) - 1))

    return smp


def _survival(rr: list[tuple[int, int, int, int]]) -> tuple[int, list[float | None], list[float | None]]:
    """(deepest draft, P(accepted >= pos), P(accepted >= pos | accepted >= pos - 1)) for pos = 1..deepest."""
    gamma_max = max((g for g, _, _, _ in rr), default=0)
    survival: list[float | None] = []
    conditional: list[float | None] = []
    for pos in range(1, gamma_max + 1):
        eligible = [a for g, a, _, _ in rr if g >= pos]  # rounds that drafted position (depth) pos
        reached = [a for a in eligible if a >= pos - 1]
        survival.append(_ratio(sum(a >= pos for a in eligible), len(eligible)))
        conditional.append(_ratio(sum(a >= pos for a in reached), len(reached)))
    return gamma_max, survival, conditional


def compute_metrics(results: Any) -> DecodeMetrics:
    """All metrics of one workload: a GenerationResult or an iterable of them (see module doc)."""
    results = _as_results(results)
    smp = _collect(results)
    rr, t_d, t_v, t_b, out_lens = smp.rr, smp.t_d, smp.t_v, smp.t_b, smp.out_lens
    ttft, latency, tpot = smp.ttft, smp.latency, smp.tpot
    depth_max, survival, conditional = _survival(rr)
    n = len(rr)
    accepted = sum(a for _, a, _, _ in rr)
    committed = sum(c for _, _, c, _ in rr)
    drafted = sum(v for _, _, _, v in rr)
    drafting = sum(v > 0 for _, _, _, v in rr)
    round_times = [d + v + b for d, v, b in zip(t_d, t_v, t_b)]
    round_total = math.fsum(round_times)
    wall = _union_length(smp.intervals)
    itl, itl_ev = itl_samples(results, "token"), itl_samples(results, "event")
    acc_mean = _ratio(accepted, n)
    metrics = DecodeMetrics(
        results=len(results),
        requests=len(out_lens),
        rounds=len(round_times),
        row_rounds=n,
        gamma_max=max((v for _, _, _, v in rr), default=0),
        gamma_values=sorted({v for _, _, _, v in rr}),
        depth_values=sorted({g for g, _, _, _ in rr}),
        verified_mean=_ratio(drafted, n),
        drafted=drafted,
        accepted=accepted,
        committed_tokens=committed,
        output_tokens=sum(out_lens),
        truncated_row_rounds=sum(c < a + 1 for _, a, c, _ in rr),
        accepted_mean=acc_mean,
        tau=None if acc_mean is None else 1.0 + acc_mean,
        tau_committed=_ratio(committed, n),
        tau_drafting=None if not drafting else 1.0 + accepted / drafting,
        survival=survival,
        conditional=conditional,
        acceptance_rate=_ratio(accepted, drafted),
        t_draft_mean_s=mean_of(t_d),
        t_verify_mean_s=mean_of(t_v),
        t_rest_mean_s=mean_of(t_b),
        round_time_mean_s=mean_of(round_times),
        round_time_total_s=round_total,
        committed_per_round=_ratio(committed, len(round_times)),
        time_per_token_s=_ratio(round_total, committed),
        wall_time_s=wall,
        throughput_tok_s=_ratio(sum(out_lens), wall),
        ttft_s=mean_of(ttft),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        latency_s=mean_of(latency),
        latency_p50_s=percentile(latency, 50),
        latency_p95_s=percentile(latency, 95),
        tpot_s=mean_of(tpot),
        itl_mean_s=mean_of(itl),
        itl_p50_s=percentile(itl, 50),
        itl_p95_s=percentile(itl, 95),
        itl_p99_s=percentile(itl, 99),
        itl_event_p50_s=percentile(itl_ev, 50),
        itl_event_p95_s=percentile(itl_ev, 95),
        itl_event_p99_s=percentile(itl_ev, 99),
        output_len_mean=mean_of([float(x) for x in out_lens]),
        output_len_min=min(out_lens, default=None),
        output_len_max=max(out_lens, default=None),
        output_len_p50=percentile([float(x) for x in out_lens], 50),
        wall_time_per_token_s=_ratio(wall, sum(out_lens)),
    )
    stats = [getattr(r, "engine_stats", None) for r in results]
    if any(stats):
        if not all(stats):
            raise ValueError("results mix engine totals (llama.cpp) with per-round records; compute them apart")
        metrics = dataclasses.replace(metrics, **engine_round_fields(stats))
    return metrics


def _tpt(m: Any) -> float | None:
    if isinstance(m, DecodeMetrics):
        return m.time_per_token_s
    if isinstance(m, dict):
        return m.get("time_per_token_s")
    return None if m is None else float(m)


def speedup(baseline: Any, method: Any) -> float | None:
    """Baseline time/token over the method's time/token (> 1 means faster). Each argument is a
    DecodeMetrics, a metrics/run dict with ``time_per_token_s``, or a time per token in seconds.
    Both must come from the same target, precision, sampling settings and workload."""
    base, meth = _tpt(baseline), _tpt(method)
    if base is None or meth is None:
        return None
    if base <= 0 or meth <= 0:
        raise ValueError(f"time per token must be > 0 s, got baseline {base}, method {meth}")
    return base / meth


def metrics_by_category(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Metrics over ``(category, GenerationResult)`` pairs.

    Returns ``{"overall": metrics dict, "categories": {category: metrics dict}}`` (categories
    sorted), each a ``DecodeMetrics.to_dict()``."""
    groups: dict[str, list[Any]] = {}
    everything: list[Any] = []
    for k, pair in enumerate(pairs):
        try:
            category, result = pair
        except (TypeError, ValueError):
            raise ValueError(f"pairs[{k}] must be a (category, GenerationResult) pair") from None
        if not isinstance(category, str) or not category:
            raise ValueError(f"pairs[{k}]: category must be a non-empty str, got {category!r}")
        groups.setdefault(category, []).append(result)
        everything.append(result)
    if not everything:
        raise ValueError("pairs is empty; expected at least one (category, GenerationResult)")
    return {
        "overall": compute_metrics(everything).to_dict(),
        "categories": {c: compute_metrics(groups[c]).to_dict() for c in sorted(groups)},
    }
