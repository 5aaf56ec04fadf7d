"""The load sweep's report (``eval/load_sweep.py``): a compact printed table, two figures, an HTML section.

    write_load_report(out, report)   # report.json, report.md, report.html, load_speedup.png, load_itl_p95.png
    print(load_table(report))

- ``load_speedup.png``: speedup (the engine's plain method's time per committed token / the method's, same state)
  against concurrency (top row; one line per method and context bucket) and against context length (bottom row;
  one line per method and concurrency), one column per output budget. Points below 1.0x, where speculation costs
  more than it saves, are drawn as red crosses: the crossover.
- ``load_itl_p95.png``: the same grid of p95 inter-token latency (ms, log scale), the plain engines included; a red
  cross marks a method whose p95 is worse than its plain engine's in that state (the design document's
  falsification test: "acceptance length improves while time/token or p95 deteriorates").

Closed loops only in the figures (the x axis is the concurrency); open loops and saturated states are in the
table. Under ``--gamma auto`` a method's line is its per-state draft length; the fixed alternative is dashed.
"""

from __future__ import annotations

import html
import json
import textwrap
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .figures import method_color
from .report import jsonable
from .report_html import PAGE_STYLE, img_tag, check_html

LOAD_FIGURES = ("load_speedup.png", "load_itl_p95.png")
PLAIN = ("vanilla", "llamacpp", "vllm")
MARKERS = ("o", "s", "^", "D", "v", "P")  # one per context bucket (top row) or concurrency (bottom row)


def _bucket_order(b: str) -> int:
    return 0 if b == "short" else int(b[:-1])


def _gamma_text(r: dict) -> str:
    if r.get("gamma") is None:
        return "-"
    role = "/".join(r.get("gamma_role") or [])
    return f"{r['gamma']}" + (f" ({role})" if role else "")


def _ms(x: Any) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def _load_text(r: dict) -> str:
    return f"c={r['concurrency']}" if r["load"] == "closed" else f"{r['arrival_rate']:g}/s cap {r['in_flight']}"


COLUMNS = ("budget", "load", "ctx", "engine", "method", "gamma", "tau", "TPOT ms", "ITL p50/p95/p99 ms",
           "TTFT p95 ms", "queue p95 ms", "tok/s", "speedup", "EOS-short", "KV MiB", "peak MiB")
WIDTHS = (6, 14, 6, 10, 17, 16, 5, 8, 20, 11, 12, 7, 8, 9, 6, 8)
assert len(WIDTHS) == len(COLUMNS)  # zip() in load_table would drop the columns past the shorter one


def _sorted(report: dict[str, Any]) -> list[dict]:
    return sorted(report.get("load", []), key=lambda r: (r["budget"], r["load"], r["concurrency"] or 0,
                                                         r["arrival_rate"] or 0, _bucket_order(r["bucket"]),
                                                         r["engine"], r["method"] not in PLAIN, r["method"],
                                                         r["gamma"] or 0))


def load_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row of cells per test state (COLUMNS); a saturated state says so in place of its figures."""
    rows = []
    for r in _sorted(report):
        head = [str(r["budget"]), _load_text(r), r["bucket"], r["engine"], r["method"], _gamma_text(r)]
        if r["saturated"]:
            rows.append(head + [f"saturated: {r['saturation']}"])
            continue
        rows.append(head + ["-" if r.get("tau") is None else f"{r['tau']:.2f}", _ms(r["tpot_mean_s"]),
                            f"{_ms(r['itl_p50_s'])}/{_ms(r['itl_p95_s'])}/{_ms(r['itl_p99_s'])}",
                            _ms(r["ttft_p95_s"]), _ms(r["queue_p95_s"]), f"{r['tokens_per_s']:.1f}",
                            "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x",
                            f"{r['eos_shortened']}/{r['requests']}",
                            "-" if not r.get("kv_bytes") else f"{r['kv_bytes'] / 2**20:.0f}",
                            "-" if not r.get("peak_bytes") else f"{r['peak_bytes'] / 2**20:.0f}"])
    return rows


def _verdict_lines(report: dict[str, Any]) -> list[str]:
    out = []
    for v in report.get("load_gamma_verdicts") or []:
        if v["per_state_gamma"] == v["fixed_gamma"]:
            out.append(f"{v['method']} {_load_text(v)} ctx {v['bucket']} budget {v['budget']}: gamma "
                       f"{v['per_state_gamma']} per state = the fixed one (one measurement)")
            continue
        out.append(f"{v['method']} {_load_text(v)} ctx {v['bucket']} budget {v['budget']}: gamma "
                   f"{v['per_state_gamma']} (per-state) vs {v['fixed_gamma']} (fixed): TPOT "
                   f"{_ms(v['tpot_mean_s'][0])} vs {_ms(v['tpot_mean_s'][1])} ms "
                   f"({'wins' if v['wins_tpot_mean'] else 'loses'}), p95 ITL {_ms(v['itl_p95_s'][0])} vs "
                   f"{_ms(v['itl_p95_s'][1])} ms ({'wins' if v['wins_itl_p95'] else 'loses'})")
    return out


def load_table(report: dict[str, Any]) -> str:
    """The test states, one line each, grouped by budget, load and bucket; then the draft-length verdicts."""
    def line(cells):
        return " ".join(f"{c:<{w}}" for c, w in zip(cells, WIDTHS)).rstrip()

    lines = [line(COLUMNS)] + [line(row) if len(row) > 7 else line(row[:6]) + " " + row[6]
                               for row in load_rows(report)]
    verdicts = _verdict_lines(report)
    if verdicts:
        lines += ["", "per-state draft length vs the fixed one (test requests; wins: per-state <= fixed):"]
        lines += [f"  {v}" for v in verdicts]
    return "\n".join(lines)


def load_html_table(report: dict[str, Any]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row[:6])
                   + (f'<td colspan="{len(COLUMNS) - 6}">{e(row[6])}</td>' if len(row) == 7 else
                      "".join(f"<td>{e(c)}</td>" for c in row[6:])) + "</tr>" for row in load_rows(report))
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _line_key(r: dict, auto: bool) -> tuple[str, str] | None:
    """(label, linestyle) of a record's line; None for a fixed-gamma record that is also not per-state."""
    if r["method"] in PLAIN or r.get("gamma") is None:
        return f"{r['method']} ({r['engine']})", "-"
    if auto:
        roles = r.get("gamma_role") or []
        if "per-state" in roles:
            return f"{r['method']} per-state gamma", "-"
        return f"{r['method']} fixed gamma {r['gamma']}", "--"
    return f"{r['method']} gamma {r['gamma']}", "-"


def _grid(recs: list[dict], value, path: Path, *, title: str, ylabel: str, worse, plain_too: bool,
          auto: bool, log_y: bool = False) -> Path:
    """Rows: vs concurrency, vs context length; columns: budgets. ``log_y``: a logarithmic y axis."""
    closed = [r for r in recs if r["load"] == "closed" and not r["saturated"]]
    budgets = sorted({r["budget"] for r in closed}) or [0]
    width = max(4.6 * len(budgets) + 2.6, 9.5)  # one budget: still room for the title and the legend
    fig = Figure(figsize=(width, 6.6), dpi=100)
    axes = fig.subplots(2, len(budgets), squeeze=False)
    handles: dict[str, Any] = {}
    markers: dict[tuple, tuple] = {}
    flagged = False
    for j, budget in enumerate(budgets):
        rs = [r for r in closed if r["budget"] == budget and (plain_too or r["method"] not in PLAIN)]
        for row, (xkey, group_key, xlabel) in enumerate((("concurrency", "bucket", "concurrency (requests in flight)"),
                                                         ("bucket", "concurrency", "context bucket (prompt tokens)"))):
            ax = axes[row][j]
            series: dict[tuple, list] = {}
            for r in rs:
                key = _line_key(r, auto)
                y = value(r)
                if key is None or y is None:
                    continue
                series.setdefault((key, r["method"], r[group_key]), []).append((r, y))
            xs_all = sorted({r[xkey] for r in rs}, key=_bucket_order if xkey == "bucket" else (lambda v: v))
            pos = {x: i for i, x in enumerate(xs_all)}
            groups = sorted({r[group_key] for r in rs}, key=_bucket_order if group_key == "bucket" else (lambda v: v))
            for ((label, style), method, group), pts in sorted(series.items(), key=lambda kv: str(kv[0])):
                pts.sort(key=lambda p: pos[p[0][xkey]])
                xs, ys = [pos[p[0][xkey]] for p in pts], [p[1] for p in pts]
                suffix = f", ctx {group}" if group_key == "bucket" else f", c={group}"
                color = method_color(method)  # the plain engines: vanilla grey, llamacpp brown, vllm green
                g = groups.index(group)
                marker = MARKERS[g % len(MARKERS)]
                ax.plot(xs, ys, style, marker=marker, ms=5, color=color)
                # the legend: one entry per line colour (method) and one per marker (context or concurrency),
                # not their product
                handles.setdefault(label, Line2D([], [], color=color, ls=style))
                where = "top row" if group_key == "bucket" else "bottom row"
                markers.setdefault((row, g), (f"{where}: {suffix[2:]}",
                                              Line2D([], [], color="black", ls="", marker=marker, ms=5)))
                bad = [(x, y) for (r, y), x in zip(pts, xs) if worse(r, y)]
                if bad:
                    flagged = True
                    ax.plot([b[0] for b in bad], [b[1] for b in bad], "x", color="red", ms=9, mew=2, zorder=5)
            ax.set_xticks(range(len(xs_all)), [str(x) for x in xs_all])
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.set_title(f"budget {budget} tokens: vs {xkey if xkey == 'concurrency' else 'context'}", fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if ylabel.startswith("speedup"):
                ax.axhline(1.0, color="black", lw=0.8, ls=":")
            elif log_y:
                ax.set_yscale("log")  # one stalled state (seconds) would flatten every other line (tens of ms)
    for _, (text, h) in sorted(markers.items()):
        handles[text] = h
    if flagged:
        (h,) = axes[0][0].plot([], [], "x", color="red", ms=9, mew=2)
        handles["red x: " + ("below 1.0x (crossover)" if ylabel.startswith("speedup") else
                             "p95 worse than the plain engine")] = h
    fig.legend(list(handles.values()), list(handles.keys()), loc="center right", fontsize=7, frameon=False,
               handlelength=3.5)
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    fig.subplots_adjust(left=0.08, right=1 - 3.0 / width, top=0.88, bottom=0.09,
                        hspace=0.45, wspace=0.3)
    fig.savefig(path)
    return path


def plot_load(report: dict[str, Any], out: Path) -> dict[str, Path]:
    recs = [r for r in report.get("load", []) if r["split"] == "test"]
    auto = report.get("config", {}).get("gamma_mode") == "auto"
    base = {(r["engine"], r["concurrency"], r["budget"], r["bucket"], r["temperature"]): r for r in recs
            if r["method"] in PLAIN and r["load"] == "closed"}

    def worse_p95(r, y):
        b = base.get((r["engine"], r["concurrency"], r["budget"], r["bucket"], r["temperature"]))
        return r["method"] not in PLAIN and b is not None and b.get("itl_p95_s") is not None and \
            y > 1e3 * b["itl_p95_s"]

    files = {"load_speedup.png": _grid(recs, lambda r: r.get("speedup"), out / "load_speedup.png",
                                       title="Speedup over the same engine's plain decoding, by concurrency and "
                                             "context (closed loops, test requests)",
                                       ylabel="speedup (plain time/token / method's)",
                                       worse=lambda r, y: y < 1.0, plain_too=False, auto=auto),
             "load_itl_p95.png": _grid(recs, lambda r: None if r.get("itl_p95_s") is None else 1e3 * r["itl_p95_s"],
                                       out / "load_itl_p95.png",
                                       title="p95 inter-token latency by concurrency and context (closed loops, "
                                             "test requests)", ylabel="p95 ITL (ms, log scale)", worse=worse_p95,
                                       plain_too=True, auto=auto, log_y=True)}
    return files


def load_html_section(report: dict[str, Any], files: dict[str, Path]) -> str:
    """The report page's load section: policies, the printed table, the figures, the draft-length verdicts."""
    e = html.escape
    pol = next((r.get("policy") for r in report.get("load", []) if r.get("policy")), {})
    parts = ["<h2>Serving under load</h2>",
             "<p>Speedup = the same engine's plain method's time per committed token over the method's, in the same "
             "state (load, budget, context bucket, dtype). Only committed tokens count; EOS-shortened answers are "
             "counted (EOS-short) and not credited. Saturated states have no latency figures. KV MiB: the target's "
             "KV cache for the state's in-flight requests at the longest prompt plus the budget, at the run's dtype "
             "(computed from the model's shape: what the state needs held, whatever the engine allocates). Peak "
             "memory: the torch process's resident high-water mark on a CPU (process-wide, it never falls), the "
             "CUDA peak on a GPU; an engine's server processes' high-water marks summed since the server started "
             "(llama.cpp restarts per slot count; vLLM's server serves every state of its method and preallocates "
             "its KV cache).</p>",
             "<ul>" + "".join(f"<li><b>{e(k)}</b>: {e(str(v))}</li>" for k, v in pol.items()) + "</ul>",
             load_html_table(report)]
    verdicts = _verdict_lines(report)
    if verdicts:
        parts.append("<h3>Per-state draft length against the fixed one</h3><ul>"
                     + "".join(f"<li>{e(v)}</li>" for v in verdicts) + "</ul>")
    for name in LOAD_FIGURES:
        if name in files:
            parts.append(img_tag(files[name], name.replace("_", " ").removesuffix(".png")))
    return "\n".join(parts)


def write_load_report(out_dir: str | Path, report: dict[str, Any]) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clean = jsonable(report)
    files = plot_load(clean, out)
    (out / "report.json").write_text(json.dumps(clean, indent=1))
    notes = "\n".join(f"- {n}" for n in clean.get("notes", []))
    (out / "report.md").write_text(f"# eaglehead load sweep: {clean['config'].get('prompt_set')}\n\n```\n"
                                   f"{load_table(clean)}\n```\n\n" + "".join(f"![{n}]({n})\n\n" for n in files)
                                   + (f"Notes:\n{notes}\n" if notes else ""))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>eaglehead load sweep</title><style>{PAGE_STYLE}</style></head><body>"
            f"<h1>eaglehead load sweep: {html.escape(str(clean['config'].get('prompt_set')))}</h1>"
            + load_html_section(clean, files)
            + "".join(f"<p>{html.escape(n)}</p>" for n in clean.get("notes", [])) + "</body></html>")
    problems = check_html(page, figures=len(files))
    if problems:
        raise RuntimeError(f"report.html is not self-contained: {problems}")
    (out / "report.html").write_text(page)
    return {**files, "report.json": out / "report.json", "report.md": out / "report.md",
            "report.html": out / "report.html"}

