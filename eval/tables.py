"""The report's tables as text, shared by ``report.md`` (:mod:`.report`), ``report.html`` (:mod:`.report_html`)
and the terminal: one table per serving state, its columns, the preamble that defines them, the compact
headline table and the one-line note on a gamma choice."""

from __future__ import annotations

import math
from typing import Any

from .figures import headline_runs, method_label, state_label

SERVING_STATE_KEYS = ("prompt_set", "split", "category", "turn", "temperature", "batch_size")


def serving_state(run: dict[str, Any]) -> tuple:
    """The serving-state key of a run record."""
    return tuple(run.get(k) for k in SERVING_STATE_KEYS)


def fmt(x: Any, scale: float | None, digits: int) -> str:
    """``scale is None``: the value as text; otherwise ``x * scale`` with ``digits`` decimals."""
    if x is None:
        return "-"
    return str(x) if scale is None else f"{x * scale:.{digits}f}"


# (header, cell function): the columns of every serving state's table.
def _ms_spread(r: dict[str, Any]) -> str:
    t = fmt(r.get("time_per_token_s"), 1e3, 3)
    lo, hi = r.get("time_per_token_min_s"), r.get("time_per_token_max_s")
    return t if lo is None or hi is None or (r.get("repeats") or 1) < 2 else f"{t} ({lo * 1e3:.3f}-{hi * 1e3:.3f})"


def _speedup_spread(r: dict[str, Any]) -> str:
    sp = fmt(r.get("speedup"), 1.0, 2)
    lo, hi = r.get("speedup_min"), r.get("speedup_max")
    return sp if lo is None or hi is None or len(r.get("speedup_repeats") or []) < 2 else f"{sp} ({lo:.2f}-{hi:.2f})"


def _col(key: Any, scale: float | None, digits: int):
    if isinstance(key, tuple):
        return lambda r: "/".join(fmt(r.get(k), scale, digits) for k in key)
    return lambda r: fmt(r.get(key), scale, digits)


def _shape(r: dict[str, Any]) -> str:
    """A tree's shape (depth d, topk k, verified nodes n); '-' for a chain."""
    if r.get("tree_tokens") is None:
        return "-"
    return f"d{r['tree_depth']} k{r['tree_topk']} n{r['tree_tokens']}"


TABLE_COLUMNS = [
    ("method", _col("method", None, 0)),
    ("engine", lambda r: str(r.get("engine") or "torch")),
    ("gamma", _col("gamma", None, 0)),
    ("tree", _shape),
    ("tau", _col("tau", 1.0, 3)),
    ("verified/round", _col("verified_mean", 1.0, 2)),
    ("accept rate", _col("acceptance_rate", 1.0, 3)),
    ("T_d ms", _col("t_draft_mean_s", 1e3, 2)),
    ("T_v ms", _col("t_verify_mean_s", 1e3, 2)),
    ("T_b ms", _col("t_rest_mean_s", 1e3, 2)),
    ("ms/token (min-max)", _ms_spread),
    ("engine ms/token", _col("engine_time_per_token_s", 1e3, 3)),
    ("wall ms/token", _col("wall_time_per_token_s", 1e3, 3)),
    ("speedup (min-max)", _speedup_spread),
    ("vs vanilla", _col("speedup_vs_vanilla", 1.0, 2)),
    ("vs engine plain", _col("speedup_vs_engine", 1.0, 2)),
    ("TTFT ms", _col("ttft_s", 1e3, 1)),
    ("TPOT ms", _col("tpot_s", 1e3, 2)),
    ("ITL p50/p95/p99 ms", _col(("itl_p50_s", "itl_p95_s", "itl_p99_s"), 1e3, 2)),
    ("tok/s", _col("throughput_tok_s", 1.0, 1)),
    ("peak MiB", _col("peak_mem_bytes", 2.0**-20, 0)),
    ("out len", _col("output_len_mean", 1.0, 1)),
]
PREAMBLE = (
    "tau = committed tokens per target round including the correction/bonus token (trees: 1 + accepted "
    "depth; llama.cpp, vLLM: 1 + accepted / rounds that drafted, from the engine's counters); gamma = draft "
    "length (trees: verified draft nodes n; tree = depth d, topk k, n); verified/round = draft tokens the "
    "target verified per round (accept rate = accepted / verified); ms/token = "
    "total round time / total committed tokens (not a mean of ratios), the median over interleaved "
    "repeats with their min-max; engine ms/token = llama.cpp's own predicted_ms / predicted_n; "
    "wall ms/token = wall time / output tokens (prefill included); speedup = ms/token of the state's "
    "fastest exact non-speculative baseline (vanilla or hf-generate, named per table) / the method's, "
    "with the min-max of the per-repeat paired ratios; vs vanilla = against our own vanilla loop; "
    "vs engine plain = against the same engine without speculation (llama.cpp, vLLM); ITL = per-token gaps "
    "(tokens delivered together count 0)."
)


def report_tables(runs: list[dict[str, Any]]) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """``[(title, baseline method, runs)]`` per serving state, in order. A state's per-category
    tables are left out when the state has a single category (they would repeat ``category=all``)."""
    states: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        states.setdefault(serving_state(r), []).append(r)
    cats: dict[tuple, set] = {}
    for state in states:
        no_cat = tuple(v for k, v in zip(SERVING_STATE_KEYS, state) if k != "category")
        cats.setdefault(no_cat, set()).add(state[SERVING_STATE_KEYS.index("category")])
    out = []
    for state, rows in states.items():
        no_cat = tuple(v for k, v in zip(SERVING_STATE_KEYS, state) if k != "category")
        category = state[SERVING_STATE_KEYS.index("category")]
        if category != "all" and cats[no_cat] == {"all", category}:
            continue  # one category: its table is the "all" table again
        title = ", ".join(f"{k}={v}" for k, v in zip(SERVING_STATE_KEYS, state))
        base = next((r.get("baseline_method") for r in rows if r.get("baseline_method")), None)
        out.append((title, base, rows))
    return out


def compact_table(report: dict[str, Any]) -> str:
    """A few lines for a terminal: the test split (category all) per serving state, each method at its
    fastest gamma: tau, ms/token with its min-max, speedup against the fastest baseline. A load sweep's report
    (``report["load"]``) prints ``load_report.load_table``."""
    if report.get("load") is not None:
        from .load_report import load_table

        return load_table(report)
    lines = []
    for key, rows in headline_runs(report["runs"]).items():
        base = next((r.get("baseline_method") for r in rows if r.get("baseline_method")), None)
        lines.append(f"{state_label(key)} (test split; speedup vs the fastest baseline, {base})")
        lines.append(f"  {'method':<20}{'tau':>6}  {'ms/token (min-max)':<26}{'speedup (min-max)':<20}{'vs vanilla':>10}")
        for r in sorted(rows, key=lambda r: r.get("time_per_token_s") or math.inf):
            tau = fmt(r.get("tau"), 1.0, 2) if r.get("gamma") else "1"
            lines.append(f"  {method_label(r):<20}{tau:>6}  {_ms_spread(r):<26}{_speedup_spread(r):<20}"
                         f"{fmt(r.get('speedup_vs_vanilla'), 1.0, 2):>10}")
    return "\n".join(lines)


IDENTITY_TITLE = "Greedy identity and notes"


def identity_items(report: dict[str, Any]) -> list[str]:
    """The items of the report's "Greedy identity and notes" section (markdown and HTML alike): the torch
    verdict, other engines' verdicts, and the notes (per-run identity counts, resumed launches)."""
    ident, items = report.get("identity") or {}, []
    if ident:
        bad = ", ".join(f"{m} (gamma {g})" for m, g, *_ in ident.get("mismatched") or [])
        items.append(f"torch: {ident.get('greedy_runs_checked', 0)} greedy runs checked, token-identical to vanilla: "
                     f"{ident.get('all_identical')}" + (f" (not: {bad})" if bad else ""))
        for engine, v in (ident.get("engines") or {}).items():
            items.append(f"{engine}: {v.get('greedy_runs_checked', 0)} greedy runs checked, token-identical to its "
                         f"own plain decoding: {v.get('all_identical')}")
    return items + list(report.get("notes") or [])


def selection_text(s: dict[str, Any]) -> str:
    """One line on a gamma choice: its state and its note (which names the gamma)."""
    axis = f" (gamma = {s['axis']})" if s.get("axis") not in (None, "draft length") else ""
    head = f"{s.get('method')}{axis}, T={s.get('temperature')}, batch {s.get('batch_size')}: "
    return head + (s["note"] if s.get("note") else f"gamma {s.get('chosen')}. {s.get('stop_reason')}")
