"""``docs/results.md`` and the README's result tables, written from the ``report.json`` summaries of the runs
they cite (``docs/reports/<run>/report.json``), so no figure is copied by hand.

A summary is what ``eaglehead eval`` writes to ``report.json`` cut to its summary rows (split ``test``,
category ``all``, turn ``all``), plus a ``summary`` block that says where it comes from::

    {"summary": {"title": "...", "command": "eaglehead eval ...", "date": "2026-12-04 13:51-15:42 UTC",
                 "commit": "<40 hex>", "source": "how this file was made",
                 "prompts": "MT-bench: 80 questions, both turns",          # what the prompt set was
                 "prompts_short": "MT-bench, 80 x 2 turns",  # optional: the headline's prompts column
                 "readme": "headline",       # optional: "headline" or "demo", the README block it feeds
                 "headline_engines": ["vllm"],  # optional: only these engines' head rows in the headline
                 "order": 1,                 # optional: position in the results page (then by folder name)
                 "weights": {"llama.cpp": "Q4_1 GGUF"},   # optional: a label per engine (else from config)
                 "notes": ["..."]},          # optional
     "config": {...}, "versions": {...}, "hardware": {...},   # as eval writes them (any subset)
     "runs": [{"method": "eagle3", "engine": "torch", "prompt_set": "mt-bench", "split": "test",
               "category": "all", "turn": "all", "temperature": 0.0, "batch_size": 1, "gamma": 5,
               "tau": 2.573, "time_per_token_s": 0.0395, "speedup": 1.53, "baseline_method": "vanilla",
               "speedup_vs_engine": null, ...}, ...]}

:func:`summarize` makes one from a full ``report.json`` (``python -m eaglehead.docs summarize``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from eaglehead.builtin.jsonio import read_json

from .reference import md_cell, md_code

SUMMARY_KEYS = ("title", "command", "date", "commit", "source", "prompts")
RUN_KEYS = ("method", "engine", "prompt_set", "split", "category", "turn", "temperature", "batch_size", "gamma",
            "tree_depth", "tree_topk", "tree_tokens", "tau", "time_per_token_s", "time_per_token_min_s",
            "time_per_token_max_s", "repeats", "speedup", "baseline_method", "speedup_vs_vanilla",
            "speedup_vs_engine", "identical_to_vanilla")
CONFIG_KEYS = ("target", "prompts", "drafts", "methods", "gamma_mode", "gammas", "temperatures", "batch_sizes",
               "max_new_tokens", "repeats", "tune_fraction", "dtype", "cpu_linear", "llamacpp_dtype", "threads")
HARDWARE_KEYS = ("device", "processor", "cpu_flags", "cpu_count", "torch_threads", "gpu")
STATE_KEYS = ("prompt_set", "temperature", "batch_size")
ENGINE_PLAIN = {"torch": "vanilla", "llama.cpp": "llamacpp", "vllm": "vllm"}
LLAMACPP_WEIGHTS = {"as-is": "GGUF as shipped", "float32": "F32 GGUF", "float16": "F16 GGUF"}
COMMAND = "python -m eaglehead.docs"


def _require(data: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")


def load_reports(reports_dir: Path) -> list[tuple[str, dict]]:
    """``[(folder name, summary report)]`` of every ``<reports_dir>/<run>/report.json``, checked, in page order."""
    out = []
    for path in sorted(Path(reports_dir).glob("*/report.json")):
        report = read_json(path)
        where = str(path)
        _require(report, ("summary", "config", "hardware", "runs"), where)
        _require(report["summary"], SUMMARY_KEYS, f"{where}: summary")
        if not re.fullmatch(r"[0-9a-f]{40}", str(report["summary"]["commit"])):
            raise ValueError(f"{where}: summary.commit: expected 40 hex digits, got {report['summary']['commit']!r}")
        if report["summary"].get("readme") not in (None, "headline", "demo"):
            raise ValueError(f"{where}: summary.readme: expected 'headline', 'demo' or absent, "
                             f"got {report['summary']['readme']!r}")
        engines = report["summary"].get("headline_engines")
        if engines is not None and (not isinstance(engines, list) or not set(engines) <= set(ENGINE_PLAIN)):
            raise ValueError(f"{where}: summary.headline_engines: expected a list of {', '.join(ENGINE_PLAIN)} "
                             f"or absent, got {engines!r}")
        for i, run in enumerate(report["runs"]):
            _require(run, ("method", "engine", *STATE_KEYS), f"{where}: runs[{i}]")
        out.append((path.parent.name, report))
    if not out:
        raise ValueError(f"{reports_dir}: no */report.json summaries")
    return sorted(out, key=lambda item: (item[1]["summary"].get("order", 1_000), item[0]))


def summarize(report: dict, summary: dict) -> dict:
    """A summary report from a full ``report.json``: its summary rows and the config keys the tables read."""
    _require(summary, SUMMARY_KEYS, "summary")
    _require(report, ("config", "hardware", "runs"), "report.json")
    runs = [{k: r[k] for k in RUN_KEYS if k in r} for r in report["runs"]
            if r.get("split", "test") == "test" and r.get("category") == "all" and r.get("turn", "all") == "all"]
    return {"summary": summary,
            "config": {k: report["config"][k] for k in CONFIG_KEYS if k in report["config"]},
            "versions": report.get("versions", {}),
            "hardware": {k: report["hardware"][k] for k in HARDWARE_KEYS if k in report["hardware"]},
            "runs": runs}


# ------------------------------------------------------------------------------------------ table cells


def weights(report: dict, engine: str) -> str:
    """What the engine ran: the summary's label, else the config's dtype (llama.cpp: its GGUF choice)."""
    given = report["summary"].get("weights", {})
    if engine in given:
        return given[engine]
    if engine == "llama.cpp":
        return LLAMACPP_WEIGHTS.get(report["config"].get("llamacpp_dtype", "as-is"), "GGUF")
    return str(report["config"].get("dtype", "-"))


def draft_text(run: dict) -> str:
    """How the round drafted: ``-`` (plain), ``gamma 5``, or a tree's depth, top-k and verified nodes."""
    if run.get("tree_tokens"):
        return f"tree: depth {run['tree_depth']}, top-k {run['tree_topk']}, {run['tree_tokens']} nodes"
    return f"gamma {run['gamma']}" if run.get("gamma") else "-"


def _ms(run: dict) -> str:
    t = run.get("time_per_token_s")
    if t is None:
        return "-"
    text = f"{t * 1e3:.2f}" if t < 0.01 else f"{t * 1e3:.1f}"
    lo, hi = run.get("time_per_token_min_s"), run.get("time_per_token_max_s")
    if lo is not None and hi is not None and (run.get("repeats") or 1) > 1:
        text += f" ({lo * 1e3:.2f}-{hi * 1e3:.2f})" if t < 0.01 else f" ({lo * 1e3:.1f}-{hi * 1e3:.1f})"
    return text


def _tau(run: dict) -> str:
    return "-" if run.get("tau") is None else f"{run['tau']:.2f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def engine_speedup(run: dict) -> float | None:
    """Against the same engine's plain decoding: torch's fastest exact baseline, or the engine's own plain run."""
    return run.get("speedup") if run["engine"] == "torch" else run.get("speedup_vs_engine")


def _head(report: dict, run: dict) -> str:
    drafts = report["config"].get("drafts") or {}
    path = drafts.get(run["method"], drafts.get("eagle3")) if "eagle" in run["method"] else None
    return md_code(Path(path).name) if path else "-"


# ----------------------------------------------------------------------------------------------- tables


def headline_run(report: dict, run: dict) -> bool:
    """Whether ``run`` of a ``readme: headline`` report is a headline row: an EAGLE head method, greedy, batch 1,
    of an engine in ``summary.headline_engines`` when the summary names some (a run whose other engines' rows
    repeat an earlier headline run's)."""
    engines = report["summary"].get("headline_engines")
    return ("eagle" in run["method"] and run["temperature"] == 0.0 and run["batch_size"] == 1
            and (engines is None or run["engine"] in engines))


def headline_table(reports: list[tuple[str, dict]], link_prefix: str) -> str:
    """One row per :func:`headline_run` of each ``readme: headline`` report: engine, weights, tau and the speedup
    over that engine's plain decoding; ``link_prefix`` + folder name links the run's section."""
    rows = ["| engine | weights | head | drafting | tau | vs the engine's plain decoding | prompts | run |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, report in reports:
        if report["summary"].get("readme") != "headline":
            continue
        for run in report["runs"]:
            if not headline_run(report, run):
                continue
            rows.append(f"| {run['engine']} | {weights(report, run['engine'])} | {_head(report, run)} | "
                        f"{draft_text(run)} | **{_tau(run)}** | **{_x(engine_speedup(run))}** | "
                        f"{md_cell(report['summary'].get('prompts_short', report['summary']['prompts']))} | [{name}]({link_prefix}{name}) |")
    if len(rows) == 2:
        raise ValueError("no report has summary.readme 'headline' with an EAGLE method at temperature 0, batch 1")
    return "\n".join(rows)


def _states(report: dict) -> list[tuple]:
    seen: list[tuple] = []
    for run in report["runs"]:
        state = tuple(run[k] for k in STATE_KEYS)
        if state not in seen:
            seen.append(state)
    return seen


def state_table(report: dict, state: tuple) -> str:
    """Every summary row of one serving state (prompt set, temperature, batch size). The engine columns are shown
    only when an engine other than torch ran in the state (the weights are then per engine)."""
    runs = [r for r in report["runs"] if tuple(r[k] for k in STATE_KEYS) == state]
    engines = any(r["engine"] != "torch" for r in runs)
    head = ["method", *(["engine", "weights"] if engines else []), "drafting", "tau", "ms/token", "speedup (baseline)",
            *(["vs the engine's plain"] if engines else [])]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for run in runs:
        base = f" ({run['baseline_method']})" if run.get("baseline_method") and run.get("speedup") else ""
        cells = [run["method"], *([run["engine"], weights(report, run["engine"])] if engines else []), draft_text(run),
                 _tau(run), _ms(run), f"{_x(run.get('speedup'))}{base}"]
        if engines:
            cells.append(_x(run.get("speedup_vs_engine")) if run["engine"] != "torch" else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _state_title(state: tuple) -> str:
    prompt_set, temperature, batch = state
    return f"{prompt_set}, {'greedy' if temperature == 0 else f'temperature {temperature:g}'}, batch {batch}"


def provenance(report: dict) -> list[str]:
    """The lines beside each run's tables: command, date, commit, CPU, versions, where the file came from."""
    s, hw = report["summary"], report["hardware"]
    flags = ", ".join(hw.get("cpu_flags") or []) or "none recorded"
    cpu = (f"{hw.get('processor', '?')}, {hw.get('cpu_count', '?')} cores, {hw.get('torch_threads', '?')} threads; "
           f"CPU flags: {flags}")
    versions = ", ".join(f"{k} {v}" for k, v in report.get("versions", {}).items() if v)
    lines = ["```bash", s["command"], "```", "", f"- **Date**: {s['date']}", f"- **Commit**: `{s['commit']}`",
             f"- **Machine**: {cpu}" + (f"; GPU {hw['gpu']}" if hw.get("gpu") else "")]
    if versions:
        lines.append(f"- **Versions**: {versions}")
    lines.append(f"- **Prompts**: {s['prompts']}")
    lines.append(f"- **Source**: {s['source']}")
    lines += [f"- {note}" for note in s.get("notes", [])]
    return lines


def results_page(reports: list[tuple[str, dict]]) -> str:
    """The whole of ``docs/results.md``."""
    lines = [f"<!-- generated by `{COMMAND}` from docs/reports/*/report.json; do not edit: rerun the command -->",
             "", "# Results", "",
             "Every table on this page is written by `python -m eaglehead.docs` from the `report.json` summary of "
             "the run it cites (`docs/reports/<run>/`); a test fails when a table differs from what the command "
             "writes. Metrics: tau = committed tokens per target round, *including* the correction/bonus token "
             "(plain decoding = 1); ms/token = total time / committed tokens over the run; speedup = the fastest "
             "exact plain torch baseline's ms/token over the method's (vanilla or hf-generate, named); "
             "\"vs the engine's plain\" compares an engine (llama.cpp, vLLM) with itself without speculation. "
             "Ratios are measured side by side in one run; absolute times move with the machine.", "",
             "## Headline: the shipped SmolLM2 heads in each engine", "",
             headline_table(reports, "#"), ""]
    for name, report in reports:
        lines += ["", f"## {name}", "", f"**{report['summary']['title']}**", ""]
        for state in _states(report):
            dtype = f", target {report['config']['dtype']}" if report["config"].get("dtype") else ""
            lines += [f"### {name}: {_state_title(state)}{dtype}", "", state_table(report, state), ""]
        lines += ["Provenance:", ""] + provenance(report) + ["", f"Summary file: [report.json](reports/{name}/report.json)", ""]
    lines += ["", "History: `BENCHMARKS.md` in the repository is the lab notebook these runs were recorded in "
              "(dated entries, in the order they happened)."]
    return "\n".join(lines) + "\n"


def readme_blocks(reports: list[tuple[str, dict]]) -> dict[str, str]:
    """``{block name: text}`` for the README's generated blocks (``headline``, ``demo``)."""
    demo = [(name, r) for name, r in reports if r["summary"].get("readme") == "demo"]
    if len(demo) != 1:
        raise ValueError(f"expected exactly one report with summary.readme 'demo', got {[n for n, _ in demo]}")
    name, report = demo[0]
    state = _states(report)[0]
    demo_text = (f"{_state_title(state)}: {report['summary']['prompts']}. Run of {report['summary']['date']}; every "
                 f"serving state and its provenance: [docs/results.md](docs/results.md#{name}).\n\n"
                 f"{state_table(report, state)}")
    return {"headline": headline_table(reports, "docs/results.md#"), "demo": demo_text}


def replace_blocks(text: str, blocks: dict[str, str], where: str) -> str:
    """``text`` with each ``<!-- results:NAME -->`` ... ``<!-- /results:NAME -->`` block's body replaced."""
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- results:{name} [^>]*-->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"{where}: no generated block '<!-- results:{name} ... -->' ... "
                             f"'<!-- /results:{name} -->' to fill")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def dump_summary(report: dict) -> str:
    """A summary report as it is checked in (2-space JSON, newline at the end)."""
    return json.dumps(report, indent=2, allow_nan=False) + "\n"

