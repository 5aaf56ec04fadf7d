"""Evaluation report: ``report.json``, ``report.md``, a self-contained ``report.html``, PNG figures
(``figures.py``) and a consistency checker.

Usage::

    from eaglehead.eval.metrics import compute_metrics
    from eaglehead.eval.report import run_record, fill_speedups, write_report, collect_versions
    state = dict(prompt_set="mt_bench", split="test", category="all", temperature=0.0, batch_size=1)
    runs = [run_record("vanilla", compute_metrics(base), gamma=0, **state),
            run_record("eagle3", compute_metrics(spec), gamma=4, peak_mem_bytes=mem, **state)]
    fill_speedups(runs)  # speedup vs the state's fastest baseline (vanilla or hf-generate), and vs vanilla
    write_report("runs/eval1", {"config": cfg, "versions": collect_versions(), "hardware": hw,
                                "runs": runs, "sweeps": sweeps, "itl_samples": {"eagle3": gaps}})

A *serving state* is one combination of ``SERVING_STATE_KEYS``; speedups only compare runs of the
same state. Optional report keys: ``sweeps`` (a list of ``{method, gamma, tau, time_per_token_s}``
dicts, plus any serving-state keys), ``gamma_selection`` and ``itl_samples`` (``{label: [gap
seconds]}`` or a list of ``{method, gamma, temperature, batch_size, gaps}``). Any other key is written
to ``report.json`` unchanged. Runs measured over repeats carry ``repeats``,
``time_per_token_repeats_s`` and their min/max (:func:`repeat_fields`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import platform
from pathlib import Path
from typing import Any

from .figures import write_figures
from .report_html import render_html
from .tables import (IDENTITY_TITLE, PREAMBLE, SERVING_STATE_KEYS, TABLE_COLUMNS, fmt, identity_items, report_tables,
                     selection_text, serving_state)

BASELINE_METHOD = "vanilla"
BASELINE_METHODS = ("vanilla", "hf-generate")  # exact, non-speculative: the candidates for the baseline
REPORT_KEYS = ("config", "versions", "hardware", "runs")
# Metric fields copied into every run record (names as in metrics.DecodeMetrics).
METRIC_KEYS = (
    "tau", "tau_committed", "accepted_mean", "truncated_row_rounds", "gamma_values", "survival",
    "conditional", "acceptance_rate", "committed_tokens", "output_tokens", "rounds", "row_rounds",
    "t_draft_mean_s", "t_verify_mean_s", "t_rest_mean_s", "round_time_total_s", "time_per_token_s",
    "ttft_s", "tpot_s", "latency_s", "itl_p50_s", "itl_p95_s", "itl_p99_s",
    "itl_event_p50_s", "itl_event_p95_s", "itl_event_p99_s", "throughput_tok_s", "output_len_mean",
    "depth_values", "verified_mean", "tau_drafting", "wall_time_per_token_s", "engine_time_per_token_s",
)
# Added with tree and llama.cpp runs: records written before them lack these, and stay readable.
_LATER_KEYS = ("depth_values", "verified_mean", "tau_drafting", "wall_time_per_token_s", "engine_time_per_token_s",
               "engine")
RUN_KEYS = (
    "method", *SERVING_STATE_KEYS, "gamma", *(k for k in METRIC_KEYS if k not in _LATER_KEYS), "speedup_vs_vanilla",
    "peak_mem_bytes"
)
ENGINE_BASELINE = {"llama.cpp": "llamacpp", "vllm": "vllm"}  # an engine's own non-speculative method: speedup_vs_engine
_VERSION_PACKAGES = ("torch", "transformers", "accelerate", "eaglehead", "xllamacpp")


def collect_versions(packages: tuple[str, ...] = _VERSION_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``packages`` (``None`` if absent) and the Python version."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def run_record(
    method: str,
    metrics: Any,
    *,
    prompt_set: str,
    split: str,
    category: str,
    temperature: float,
    batch_size: int,
    gamma: int,
    speedup_vs_vanilla: float | None = None,
    peak_mem_bytes: int | None = None,
    turn: int | str = "all",
    engine: str = "torch",
    **extra: Any,
) -> dict[str, Any]:
    """One ``runs`` entry from a ``DecodeMetrics`` (or its dict). ``gamma`` is the configured draft
    length (0 for vanilla; trees: verified nodes); ``engine`` is what decoded (``torch``, ``llama.cpp``);
    ``extra`` keys (e.g. ``checkpoint``) are added, never overwriting."""
    m = metrics.to_dict() if hasattr(metrics, "to_dict") else dict(metrics)
    missing = [k for k in METRIC_KEYS if k not in m and k not in _LATER_KEYS]
    if missing:
        raise ValueError(f"metrics lack {missing}; expected a DecodeMetrics or its to_dict()")
    rec: dict[str, Any] = {
        "method": method, "engine": engine, "prompt_set": prompt_set, "split": split, "category": category,
        "turn": turn, "temperature": temperature, "batch_size": batch_size, "gamma": gamma,
    }
    rec.update({k: m.get(k) for k in METRIC_KEYS})
    rec["speedup_vs_vanilla"] = speedup_vs_vanilla
    rec["peak_mem_bytes"] = peak_mem_bytes
    clash = sorted(set(extra) & set(rec))
    if clash:
        raise ValueError(f"extra keys {clash} would overwrite run fields")
    rec.update(extra)
    return rec


def fill_speedups(runs: list[dict[str, Any]], baseline_method: str = BASELINE_METHOD) -> None:
    """Set the speedups in place, per serving state.

    ``baseline_method`` of every run = the fastest exact non-speculative baseline of its state (the
    least ``time_per_token_s`` among ``BASELINE_METHODS`` present); ``speedup`` = its time/token over
    the run's; ``speedup_vs_vanilla`` = ``baseline_method``'s (default vanilla) over the run's. With
    repeats (``time_per_token_repeats_s`` on both runs), ``speedup_repeats`` are the paired per-repeat
    ratios (the repeats are interleaved, so repeat i of both ran under the same machine load) and
    ``speedup_min``/``speedup_max`` their range. ``None`` where a time/token is missing."""
    vanilla: dict[tuple, Any] = {}
    fastest: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        t = r.get("time_per_token_s")
        if r["method"] == baseline_method:
            vanilla[serving_state(r)] = t
        if r["method"] in BASELINE_METHODS and t:
            best = fastest.get(serving_state(r))
            if best is None or t < best["time_per_token_s"]:
                fastest[serving_state(r)] = r
    for r in runs:
        state, t = serving_state(r), r.get("time_per_token_s")
        b = vanilla.get(state)
        r["speedup_vs_vanilla"] = b / t if b and t else None
        base = fastest.get(state)
        r["baseline_method"] = base["method"] if base else None
        r["speedup"] = base["time_per_token_s"] / t if base and t else None
        paired = _paired_ratios(base, r) if base else None
        r["speedup_repeats"] = paired
        r["speedup_min"] = min(paired) if paired else None
        r["speedup_max"] = max(paired) if paired else None
    _fill_engine_speedups(runs)


def _engine_baselines(runs: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """``{(engine, serving state): the engine's own non-speculative run}`` (``ENGINE_BASELINE``)."""
    return {(r.get("engine"), serving_state(r)): r for r in runs
            if ENGINE_BASELINE.get(r.get("engine")) == r["method"] and r.get("time_per_token_s")}


def _fill_engine_speedups(runs: list[dict[str, Any]]) -> None:
    """``speedup_vs_engine`` of runs on another engine (llama.cpp): its plain method's time/token over the
    run's, a speedup within one engine (the columns above compare with our torch baselines)."""
    base = _engine_baselines(runs)
    for r in runs:
        if r.get("engine") in ENGINE_BASELINE:
            b, t = base.get((r["engine"], serving_state(r))), r.get("time_per_token_s")
            r["speedup_vs_engine"] = b["time_per_token_s"] / t if b and t else None


def _paired_ratios(base: dict[str, Any], run: dict[str, Any]) -> list[float] | None:
    a, b = base.get("time_per_token_repeats_s"), run.get("time_per_token_repeats_s")
    if not a or not b or len(a) != len(b) or not all(a) or not all(b):
        return None
    return [x / y for x, y in zip(a, b)]


def repeat_fields(tpts: list[float | None]) -> tuple[int, dict[str, Any]]:
    """(index of the median repeat, the spread fields of a run record) from per-repeat times per token.

    The median repeat is the lower median (``statistics.median_low``), so the run's metrics all come
    from one measured repeat and ``time_per_token_s`` stays round time / committed tokens exactly."""
    known = [(t, i) for i, t in enumerate(tpts) if t is not None]
    if not known:
        return 0, {"repeats": len(tpts), "time_per_token_repeats_s": list(tpts), "time_per_token_min_s": None,
                   "time_per_token_max_s": None}
    _, idx = sorted(known)[(len(known) - 1) // 2]
    vals = [t for t, _ in known]
    return idx, {"repeats": len(tpts), "time_per_token_repeats_s": list(tpts), "time_per_token_min_s": min(vals),
                 "time_per_token_max_s": max(vals)}


def _close(a: Any, b: Any, rel_tol: float) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12)


def _single_positive_gamma(run: dict[str, Any]) -> int | None:
    """The one drafted depth of a run (its survival positions: gamma for a chain, the tree depth for a tree)."""
    gv = run.get("depth_values", run.get("gamma_values"))
    positive = [g for g in (gv if gv is not None else [run.get("gamma")]) if g]
    return positive[0] if len(positive) == 1 else None


def _check_acceptance(name: str, r: dict[str, Any], rel_tol: float) -> list[str]:
    out = []
    tau, acc_mean = r["tau"], r["accepted_mean"]
    surv, cond = list(r["survival"] or []), list(r["conditional"] or [])
    if tau is not None and acc_mean is not None and not _close(tau, 1 + acc_mean, rel_tol):
        out.append(f"{name}: tau {tau} != 1 + accepted_mean {acc_mean}")
    untruncated = r["truncated_row_rounds"] == 0
    if untruncated and tau is not None and not _close(tau, r["tau_committed"], rel_tol):
        out.append(f"{name}: nothing truncated but tau {tau} != tau_committed {r['tau_committed']}")
    known = [s for s in surv if s is not None]
    if any(not 0 <= s <= 1 for s in known):
        out.append(f"{name}: survival {surv} has values outside [0, 1]")
    first = cond[0] if cond else None
    if surv and surv[0] is not None and not _close(surv[0], first, rel_tol):
        out.append(f"{name}: Pr(A>=1) {surv[0]} != first-position acceptance {first}")
    verified, acc_mean = r.get("verified_mean"), r["accepted_mean"]
    if verified and acc_mean is not None and not _close(r["acceptance_rate"], acc_mean / verified, rel_tol):
        out.append(f"{name}: acceptance_rate {r['acceptance_rate']} != accepted_mean / verified_mean "
                   f"{acc_mean / verified}")
    g = _single_positive_gamma(r)
    if g is None or not known:
        return out
    if any(b > a * (1 + rel_tol) for a, b in zip(known, known[1:])):
        out.append(f"{name}: survival {surv} increases")
    prod = 1.0
    for k, (s, c) in enumerate(zip(surv, cond)):
        prod *= c if c is not None else 0.0
        if s is not None and not _close(s, prod, rel_tol):
            out.append(f"{name}: survival[{k}] {s} != product of conditionals {prod}")
            break
    chain = r.get("verified_mean") is None or r.get("depth_values") == r.get("gamma_values")
    if chain and len(known) == g and not _close(r["acceptance_rate"], sum(known) / g, rel_tol):
        out.append(
            f"{name}: acceptance_rate {r['acceptance_rate']} != "
            f"sum(survival)/gamma {sum(known) / g}"
        )
    depths = r.get("depth_values", r["gamma_values"])
    if depths == [g] and tau is not None and not _close(tau, 1 + sum(known), rel_tol):
        out.append(f"{name}: tau {tau} != 1 + sum(survival) {1 + sum(known)} (tail-sum identity)")
    return out


def _check_run(i: int, r: dict[str, Any], rel_tol: float) -> list[str]:
    name = f"runs[{i}] ({r.get('method')})"
    missing = [k for k in RUN_KEYS if k not in r]
    if missing:
        return [f"{name}: missing keys {missing}"]
    out = _check_acceptance(name, r, rel_tol)
    tpt, total, com = r["time_per_token_s"], r["round_time_total_s"], r["committed_tokens"]
    if com and not _close(tpt, total / com, rel_tol):
        out.append(
            f"{name}: time_per_token_s {tpt} != round_time_total_s / committed_tokens {total / com}"
        )
    return out


def check_report_consistency(report: dict[str, Any], rel_tol: float = 1e-6) -> list[str]:
    """Violations of the metric identities (an empty list means consistent).

    Per run: tau = 1 + accepted_mean; tau = tau_committed when nothing was truncated; Pr(A>=1) =
    first-position acceptance (conditional[0]); survival in [0, 1]; with a single positive gamma
    also survival non-increasing, survival = running product of the conditionals, acceptance_rate
    = sum(survival) / gamma (chains) and, when no depth-0 step is mixed in, tau = 1 + sum(survival) (tail
    sum; survival positions are depths, so this holds for trees too); acceptance_rate = accepted_mean /
    verified_mean; time_per_token_s = round_time_total_s / committed_tokens. Per serving state: at most one
    vanilla run, every given speedup = vanilla time/token / the run's time/token, and speedup_vs_engine =
    the engine's plain run's time/token / the run's."""
    if not isinstance(report, dict):
        return ["report is not a dict"]
    out = [f"report: missing key {k!r}" for k in REPORT_KEYS if k not in report]
    runs = report.get("runs") or []
    for i, r in enumerate(runs):
        out.extend(_check_run(i, r, rel_tol))
    base: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        if r.get("method") == BASELINE_METHOD:
            if serving_state(r) in base:
                out.append(f"serving state {serving_state(r)}: more than one {BASELINE_METHOD} run")
            base[serving_state(r)] = r
    for i, r in enumerate(runs):
        sp, name = r.get("speedup_vs_vanilla"), f"runs[{i}] ({r.get('method')})"
        if sp is None:
            continue
        b = base.get(serving_state(r))
        if b is None:
            out.append(f"{name}: speedup given but no {BASELINE_METHOD} run in its serving state")
            continue
        tb, tm = b.get("time_per_token_s"), r.get("time_per_token_s")
        if not (tb and tm and _close(sp, tb / tm, rel_tol)):
            out.append(f"{name}: speedup {sp} != {BASELINE_METHOD} time/token {tb} / {tm}")
    out.extend(_check_spread(runs, rel_tol))
    base = _engine_baselines(runs)
    for i, r in enumerate(runs):
        sp, b = r.get("speedup_vs_engine"), base.get((r.get("engine"), serving_state(r)))
        if sp is not None and not (b and _close(sp, b["time_per_token_s"] / r["time_per_token_s"], rel_tol)):
            out.append(f"runs[{i}] ({r.get('method')}): speedup_vs_engine {sp} != its engine's plain "
                       f"time/token / the run's")
    return out


def _check_spread(runs: list[dict[str, Any]], rel_tol: float) -> list[str]:
    """The repeat and fastest-baseline fields, where present: time_per_token_s is the lower median of
    the repeats and min/max their range; baseline_method is the fastest baseline of the state;
    speedup = its time/token / the run's; speedup_repeats are the paired ratios, min/max their range."""
    out = []
    fastest: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        if r.get("method") in BASELINE_METHODS and r.get("time_per_token_s"):
            best = fastest.get(serving_state(r))
            if best is None or r["time_per_token_s"] < best["time_per_token_s"]:
                fastest[serving_state(r)] = r
    for i, r in enumerate(runs):
        name = f"runs[{i}] ({r.get('method')})"
        reps = [t for t in (r.get("time_per_token_repeats_s") or []) if t is not None]
        if reps:
            med = sorted(reps)[(len(reps) - 1) // 2]
            if not _close(r.get("time_per_token_s"), med, rel_tol):
                out.append(f"{name}: time_per_token_s {r.get('time_per_token_s')} != lower median of repeats {med}")
            if not (_close(r.get("time_per_token_min_s"), min(reps), rel_tol)
                    and _close(r.get("time_per_token_max_s"), max(reps), rel_tol)):
                out.append(f"{name}: time_per_token min/max {r.get('time_per_token_min_s')}/"
                           f"{r.get('time_per_token_max_s')} != range of repeats {min(reps)}..{max(reps)}")
        if r.get("speedup") is None:
            continue
        base = fastest.get(serving_state(r))
        if base is None or r.get("baseline_method") != base["method"]:
            out.append(f"{name}: baseline_method {r.get('baseline_method')!r} is not the fastest baseline "
                       f"{base and base['method']!r} of its serving state")
            continue
        tb, tm = base["time_per_token_s"], r.get("time_per_token_s")
        if not (tm and _close(r["speedup"], tb / tm, rel_tol)):
            out.append(f"{name}: speedup {r['speedup']} != {base['method']} time/token {tb} / {tm}")
        paired = _paired_ratios(base, r)
        given = r.get("speedup_repeats")
        if given is not None and (paired is None or len(given) != len(paired)
                                  or not all(_close(a, b, rel_tol) for a, b in zip(given, paired))):
            out.append(f"{name}: speedup_repeats {given} != paired ratios {paired}")
        elif given and not (_close(r.get("speedup_min"), min(given), rel_tol)
                            and _close(r.get("speedup_max"), max(given), rel_tol)):
            out.append(f"{name}: speedup min/max {r.get('speedup_min')}/{r.get('speedup_max')} != range of "
                       f"speedup_repeats")
    return out


def jsonable(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return jsonable(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _selection_lines(report: dict[str, Any]) -> list[str]:
    out = []
    for s in report.get("gamma_selection") or []:
        out.append(f"- {selection_text(s)}")
    return out


def _markdown(report: dict[str, Any], violations: list[str], figures: list[str]) -> str:
    lines = ["# eaglehead evaluation report", "", PREAMBLE, "",
             f"Figures: {', '.join(figures)}; all of it in report.html.", ""]
    for title, base, runs in report_tables(report["runs"]):
        lines += ["## " + title, "", f"Fastest baseline: {base or '-'}.", ""]
        lines.append("| " + " | ".join(c[0] for c in TABLE_COLUMNS) + " |")
        lines.append("|" + "---|" * len(TABLE_COLUMNS))
        for r in runs:
            lines.append("| " + " | ".join(c[1](r) for c in TABLE_COLUMNS) + " |")
        curves = [r for r in runs if r.get("survival")]
        if curves:
            lines += ["", "Survival Pr(A >= i) for i = 1, 2, ..., over the rounds that drafted position i "
                      "(rounds cut short by the token limit draft fewer, so a later position can read higher):", ""]
            for r in curves:
                vals = ", ".join(fmt(s, 1.0, 3) for s in r["survival"])
                lines.append(f"- {r['method']} (gamma {r.get('gamma')}): {vals}")
        lines.append("")
    if report.get("gamma_selection"):
        lines += ["## Gamma choice (tune split)", ""] + _selection_lines(report) + [""]
    for key in ("config", "versions", "hardware"):
        lines += [f"## {key}", "", "```json", json.dumps(report[key], indent=2), "```", ""]
    if items := identity_items(report):
        lines += [f"## {IDENTITY_TITLE}", ""] + [f"- {x}" for x in items] + [""]
    lines += ["## Consistency checks", ""]
    lines += [f"- {v}" for v in violations] if violations else ["All checks passed."]
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, report: dict[str, Any]) -> dict[str, Path]:
    """Write ``report.json``, ``report.md``, ``report.html``, ``headline.png``, ``survival.png``,
    ``round_time.png`` and, when their keys are given, ``gamma_sweep.png`` and ``itl_cdf.png`` into
    ``out_dir`` (created). The
    consistency violations are stored under ``consistency_violations`` and listed in the markdown.
    Returns ``{file name: path}``."""
    if not isinstance(report, dict):
        raise ValueError(f"report must be a dict, got {type(report).__name__}")
    for key in REPORT_KEYS:
        if key not in report:
            raise ValueError(f"report lacks key {key!r}; expected keys {list(REPORT_KEYS)}")
    if not isinstance(report["runs"], list) or not all(isinstance(r, dict) for r in report["runs"]):
        raise ValueError("report['runs'] must be a list of run-record dicts (see run_record)")
    for i, r in enumerate(report["runs"]):
        missing = [k for k in RUN_KEYS if k not in r]
        if missing:
            raise ValueError(f"report['runs'][{i}] lacks keys {missing}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = jsonable(report)
    violations = check_report_consistency(data)
    data["consistency_violations"] = violations
    files = {"report.json": out / "report.json", "report.md": out / "report.md"}
    files["report.json"].write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    files.update(write_figures(data, out))
    files["report.md"].write_text(_markdown(data, violations, [n for n in files if n.endswith(".png")]))
    files["report.html"] = out / "report.html"
    files["report.html"].write_text(render_html(data, files))
    return files
