"""The evaluation report's figures, drawn to be read at a glance: one panel per serving state, at most
about eight lines or bars per panel, legends outside the axes, ~1200 px wide at most.

Usage::

    from eaglehead.eval.figures import write_figures
    paths = write_figures(report_dict, out_dir)   # {"headline.png": Path, "survival.png": ..., ...}

- ``headline.png``: time per token per method (median over repeats, min-max bar), the speedup against
  the state's fastest baseline and tau written beside each bar; one panel per serving state.
- ``survival.png``: Pr(A >= i) per method (trees: i is the depth; llama.cpp gives no per-round data, so its
  methods are absent); ``round_time.png``: stacked T_d, T_v, T_b per method.
- ``gamma_sweep.png``: time per token against gamma, one panel per method and temperature, one line
  per batch size and split, tau at each point, the chosen gamma starred.
- ``itl_cdf.png``: inter-token gaps per method, x clipped at the panel's p99 (the count clipped is stated).

Panels show the test split, category ``all`` (every category when there is no ``all``); when a
method was measured at several gammas, its fastest one stands for it. Figures are drawn on
``matplotlib.figure.Figure`` (Agg canvas): no global backend is switched.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

MAX_COLS = 3
PANEL_W, PANEL_H = 4.0, 3.0  # inches at dpi 100: 400 x 300 px per panel
DPI = 100
# One colour per method in every figure.
METHOD_COLORS = {"vanilla": "#8c8c8c", "hf-generate": "#3b3b3b", "eagle3": "C0", "eagle1": "C1", "draft-lm": "C2",
                 "prompt-lookup": "C4", "hf-assisted": "C3", "eagle3-tree": "#0b2f6b", "eagle1-tree": "#a0522d",
                 "llamacpp": "#6b4226", "llamacpp-eagle3": "C6", "llamacpp-ngram": "C8",
                 "vllm": "#2e7d32", "vllm-eagle3": "#00897b", "vllm-ngram": "#9e9d24", "dflash": "C9"}


def method_color(method: str) -> str:
    return METHOD_COLORS.get(method, "C5")


def _cols(keys) -> int:
    """Panels per row: one per batch size (so a row is one temperature), at most MAX_COLS."""
    sizes = {k[-1] for k in keys}
    return max(1, min(MAX_COLS, len(sizes) if len(sizes) > 1 else len(list(keys))))


def state_label(key: tuple) -> str:
    prompt_set, temperature, batch_size = key
    return f"{prompt_set}: T={temperature:g}, batch {batch_size}"


def headline_runs(runs: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """``{(prompt_set, temperature, batch_size): [run per method]}``: the test split's category ``all``
    over all turns (all runs when neither exists), each method at its fastest gamma, in the order
    methods first appear."""
    pool = [r for r in runs if r.get("split") == "test"] or list(runs)
    pool = [r for r in pool if r.get("category") == "all"] or pool
    pool = [r for r in pool if r.get("turn", "all") == "all"] or pool  # per-turn records are parts of it
    states: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in pool:
        key = (r.get("prompt_set"), r.get("temperature"), r.get("batch_size"))
        best = states.setdefault(key, {}).get(r["method"])
        t, bt = r.get("time_per_token_s"), best and best.get("time_per_token_s")
        if best is None or (t is not None and (bt is None or t < bt)):
            states[key][r["method"]] = r
    return {k: list(v.values()) for k, v in states.items()}


def method_label(r: dict[str, Any]) -> str:
    """``eagle3 g=4``; a tree by its verified nodes and depth (``eagle3-tree n=8 d=6``)."""
    g = r.get("gamma")
    if r.get("tree_tokens") is not None:
        return f"{r['method']} n={r['tree_tokens']} d={r.get('tree_depth')}"
    return f"{r['method']} g={g}" if g else str(r["method"])


def _grid(n: int, *, w: float = PANEL_W, h: float = PANEL_H, extra_w: float = 0.0,
          cols: int | None = None) -> tuple[Figure, list]:
    cols = min(cols or MAX_COLS, max(1, n))
    rows = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(cols * w + extra_w, rows * h + 0.4))
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(max(n, 1))]
    return fig, axes


def _suptitle(fig: Figure, text: str, fontsize: float = 10) -> None:
    """A figure title wrapped to the figure's width (a one-panel figure is narrower than a long title)."""
    chars = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))  # ~0.55 em per character
    fig.suptitle(textwrap.fill(text, chars), fontsize=fontsize)


def _save(fig: Figure, path: Path, *, right: float | None = None) -> Path:
    fig.tight_layout(rect=(0, 0, right or 1.0, 1))
    fig.savefig(path, dpi=DPI)
    return path


# engine -> (its name, the colour of its plain-decoding bar in METHOD_COLORS), as the headline's title names them
ENGINE_PLAIN = {"llama.cpp": ("llama.cpp", "brown"), "vllm": ("vLLM", "green")}


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def plot_headline(runs: list[dict[str, Any]], path: Path) -> Path:
    states = headline_runs(runs)
    fig, axes = _grid(len(states), w=5.0, h=0.45 * max((len(v) for v in states.values()), default=4) + 1.2,
                      cols=_cols(states))
    for ax, (key, rows) in zip(axes, states.items()):
        rows = [r for r in rows if r.get("time_per_token_s")]
        rows.sort(key=lambda r: r["time_per_token_s"], reverse=True)  # fastest at the top
        ys = np.arange(len(rows))
        med = np.array([1e3 * r["time_per_token_s"] for r in rows])
        lo = np.array([1e3 * (r.get("time_per_token_min_s") or r["time_per_token_s"]) for r in rows])
        hi = np.array([1e3 * (r.get("time_per_token_max_s") or r["time_per_token_s"]) for r in rows])
        base = rows[0].get("baseline_method") if rows else None
        colors = [method_color(r["method"]) for r in rows]
        ax.barh(ys, med, color=colors, xerr=[med - lo, hi - med], capsize=3, error_kw={"lw": 1})
        ax.set_yticks(ys, [method_label(r) for r in rows], fontsize=8)
        for y, r, h in zip(ys, rows, hi):
            sp = r.get("speedup")
            tau = r.get("tau")
            text = (f"{sp:.2f}x" if sp else "-") + (f"  tau {tau:.2f}" if tau and r.get("gamma") else "")
            per_round = r.get("tau_committed")
            if r.get("engine") == "llama.cpp" and r.get("gamma") and per_round:  # its tau counts drafting rounds only
                text += f" ({per_round:.2f} over all rounds)"
            ax.text(h, y, "  " + text, va="center", fontsize=8)
        ax.set_xlim(0, 1.45 * max(hi, default=1))
        n_rep = max((r.get("repeats") or 1 for r in rows), default=1)
        ax.set_xlabel(f"ms per output token (median of {n_rep}, bar = min-max)" if n_rep > 1
                      else "ms per output token", fontsize=8)
        ax.set_title(f"{state_label(key)}\nspeedup vs fastest baseline: {base}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    if not states:
        _empty(axes[0], "no runs")
    plain = [" (torch)"] if any(r.get("engine") in ENGINE_PLAIN for r in runs) else []
    plain += [f"{colour} = plain {name}" for engine, (name, colour) in ENGINE_PLAIN.items()
              if any(r.get("engine") == engine for r in runs)]
    drafting = ("; an engine's tau counts the rounds that drafted, the figure in brackets every round"
                if any(r.get("engine") == "llama.cpp" and r.get("gamma") for r in runs) else "")
    _suptitle(fig, "Time per token and speedup vs the fastest exact baseline (tau includes the bonus token; "
              f"grey = baselines{'; '.join(plain)}{drafting})")
    return _save(fig, path)


def plot_survival(runs: list[dict[str, Any]], path: Path) -> Path:
    states = {k: [r for r in v if r.get("survival")] for k, v in headline_runs(runs).items()}
    states = {k: v for k, v in states.items() if v}
    fig, axes = _grid(len(states), extra_w=1.6, cols=_cols(states))
    handles = {}
    for ax, (key, rows) in zip(axes, states.items()):
        for r in rows:
            pts = [(i + 1, s) for i, s in enumerate(r["survival"]) if s is not None]
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=method_color(r["method"]))
            handles.setdefault(r["method"], line)
            tag = f"n={r['tree_tokens']}" if r.get("tree_tokens") is not None else f"g={r.get('gamma')}"
            ax.annotate(tag, pts[-1], fontsize=7, xytext=(3, 0), textcoords="offset points")
        ax.set(ylim=(0, 1.05), title=state_label(key))
        ax.set_xlabel("draft position i (trees: depth i)", fontsize=8)
        ax.set_ylabel("Pr(A >= i)", fontsize=8)
        ax.title.set_fontsize(9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not states:
        _empty(axes[0], "no speculative runs")
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    _suptitle(fig, "Survival: share of the rounds that drafted position i accepting at least i drafts")
    return _save(fig, path, right=1 - 1.6 / fig.get_figwidth())


def plot_round_time(runs: list[dict[str, Any]], path: Path) -> Path:
    states = headline_runs(runs)
    n_rows = max((len(v) for v in states.values()), default=4)
    fig, axes = _grid(len(states), w=4.6, h=0.4 * n_rows + 1.3, extra_w=1.4, cols=_cols(states))
    parts = (("t_draft_mean_s", "T_d draft", "C1"), ("t_verify_mean_s", "T_v verify", "C0"),
             ("t_rest_mean_s", "T_b rest", "C2"))
    for ax, (key, rows) in zip(axes, states.items()):
        ys = np.arange(len(rows))
        left = np.zeros(len(rows))
        for k, label, c in parts:
            vals = np.array([1e3 * (r.get(k) or 0.0) for r in rows])
            ax.barh(ys, vals, left=left, color=c, label=label)
            left += vals
        ax.set_yticks(ys, [method_label(r) for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms per round (HF, llama.cpp: all booked as T_v)", fontsize=8)
        ax.set_title(state_label(key), fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    if not states:
        _empty(axes[0], "no runs")
    h, labels = axes[0].get_legend_handles_labels()
    fig.legend(h, labels, loc="center right", fontsize=8, frameon=False)
    _suptitle(fig, "Round time C = T_d + T_v + T_b")
    return _save(fig, path, right=1 - 1.4 / fig.get_figwidth())


def plot_sweeps(sweeps: list[dict[str, Any]], path: Path, chosen: dict[tuple, int] | None = None) -> Path:
    """``chosen``: ``{(method, temperature, batch_size): gamma}`` to star (the tune split's choice)."""
    for i, s in enumerate(sweeps):
        missing = [k for k in ("method", "gamma", "tau", "time_per_token_s") if k not in s]
        if missing:
            raise ValueError(f"report['sweeps'][{i}] lacks keys {missing}")
    methods = list(dict.fromkeys(s["method"] for s in sweeps))
    temps = sorted({s.get("temperature", 0.0) or 0.0 for s in sweeps})
    cols = len(temps)
    fig = Figure(figsize=(min(12.0, 4.2 * cols + 1.8), 2.8 * len(methods) + 0.5))
    series_ids = sorted({(s.get("batch_size"), s.get("split")) for s in sweeps}, key=str)
    style = {sid: (f"C{i % 10}", "o-" if sid[1] != "tune" else "s--") for i, sid in enumerate(series_ids)}
    handles = {}
    for mi, m in enumerate(methods):
        for ti, t in enumerate(temps):
            ax = fig.add_subplot(len(methods), cols, mi * cols + ti + 1)
            for sid in series_ids:
                pts = sorted((s for s in sweeps if s["method"] == m and (s.get("temperature") or 0.0) == t
                              and (s.get("batch_size"), s.get("split")) == sid), key=lambda s: s["gamma"])
                if not pts:
                    continue
                g = [s["gamma"] for s in pts]
                y = np.array([1e3 * s["time_per_token_s"] for s in pts])
                lo = np.array([1e3 * (s.get("time_per_token_min_s") or s["time_per_token_s"]) for s in pts])
                hi = np.array([1e3 * (s.get("time_per_token_max_s") or s["time_per_token_s"]) for s in pts])
                c, fmt = style[sid]
                line = ax.errorbar(g, y, yerr=[y - lo, hi - y], fmt=fmt, color=c, ms=4, capsize=2, lw=1)
                handles.setdefault(f"batch {sid[0]}, {sid[1]} split", line)
                for gx, top, s in zip(g, hi, pts):
                    if s.get("tau"):  # above the error bar and the star
                        ax.annotate(f"{s['tau']:.2f}", (gx, top), fontsize=7, xytext=(0, 7), textcoords="offset points",
                                    ha="center", color=c)
                pick = (chosen or {}).get((m, t, sid[0]))
                if pick in g:
                    ax.plot([pick], [y[g.index(pick)]], marker="*", ms=13, color=c, mec="k", zorder=5)
            ax.set_title(f"{m}, T={t:g}", fontsize=9)
            ax.set_xlabel("verified tree nodes n" if m.endswith("-tree") else "gamma", fontsize=8)
            ax.set_ylabel("ms / token", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(bottom=0)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    _suptitle(fig, "Gamma sweeps: ms per token (median, bar = min-max); numbers = tau; star = chosen gamma "
              "(trees: chosen n)")
    return _save(fig, path, right=1 - 1.8 / fig.get_figwidth())


_ITL_LABEL = re.compile(r"^(?P<method>\S+) g=(?P<gamma>\S+) T=(?P<temperature>\S+) B=(?P<batch_size>\d+)$")


def itl_series(samples: Any) -> list[dict[str, Any]]:
    """ITL samples as ``[{method, gamma, temperature, batch_size, gaps}]``: from that list itself, or
    from ``{"<method> g=<gamma> T=<temperature> B=<batch>": gaps}`` (any other label: one state)."""
    if isinstance(samples, list):
        return samples
    out = []
    for label, gaps in samples.items():
        m = _ITL_LABEL.match(str(label))
        if m:
            out.append({"method": m["method"], "gamma": None if m["gamma"] == "None" else m["gamma"],
                        "temperature": float(m["temperature"]), "batch_size": int(m["batch_size"]), "gaps": gaps})
        else:
            out.append({"method": str(label), "gamma": None, "temperature": None, "batch_size": None, "gaps": gaps})
    return out


def plot_itl_cdf(samples: Any, path: Path, keep: dict[tuple, set] | None = None) -> Path:
    """``keep``: ``{(temperature, batch_size): {(method, gamma)}}`` to draw (default: all series)."""
    states: dict[tuple, list[dict[str, Any]]] = {}
    for s in itl_series(samples):
        key = (s.get("temperature"), s.get("batch_size"))
        if keep is not None and (s["method"], s.get("gamma")) not in keep.get(key, set()):
            continue
        if s["gaps"]:
            states.setdefault(key, []).append(s)
    fig, axes = _grid(len(states), extra_w=1.8, cols=_cols(states))
    handles = {}
    for ax, (key, series) in zip(axes, states.items()):
        everything = np.concatenate([np.asarray(s["gaps"], dtype=float) for s in series]) * 1e3
        cap = float(np.percentile(everything, 99))
        clipped = int((everything > cap).sum())
        for s in series:
            xs = np.sort(np.asarray(s["gaps"], dtype=float) * 1e3)
            cdf = np.arange(1, len(xs) + 1) / len(xs)
            (line,) = ax.step(xs, cdf, where="post", color=method_color(s["method"]), lw=1.2)
            handles.setdefault(s["method"], line)
        ax.set_xlim(0, cap * 1.02 if cap > 0 else 1)
        ax.set_ylim(0, 1.02)
        t, b = key
        title = "all runs" if t is None else f"T={t:g}, batch {b}"
        ax.set_title(f"{title}\n{clipped} of {len(everything)} gaps > p99 = {cap:.1f} ms not shown", fontsize=8)
        ax.set_xlabel("inter-token gap (ms)", fontsize=8)
        ax.set_ylabel("fraction of tokens", fontsize=8)
        ax.tick_params(labelsize=8)
    if not states:
        _empty(axes[0], "no inter-token gaps")
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    _suptitle(fig, "Inter-token latency CDF (per token; co-delivered tokens count 0)")
    return _save(fig, path, right=1 - 1.8 / fig.get_figwidth())


def write_figures(report: dict[str, Any], out: Path) -> dict[str, Path]:
    """Every figure the report's data supports, written into ``out``; ``{file name: path}``."""
    runs = report["runs"]
    files = {"headline.png": plot_headline(runs, out / "headline.png"),
             "survival.png": plot_survival(runs, out / "survival.png"),
             "round_time.png": plot_round_time(runs, out / "round_time.png")}
    if report.get("sweeps"):
        chosen = {(s["method"], s.get("temperature"), s.get("batch_size")): s.get("chosen")
                  for s in report.get("gamma_selection") or [] if "method" in s}
        files["gamma_sweep.png"] = plot_sweeps(report["sweeps"], out / "gamma_sweep.png", chosen)
    if report.get("itl_samples"):
        if not isinstance(report["itl_samples"], (dict, list)):
            raise ValueError("report['itl_samples'] must be a dict {label: [gap seconds]} or a list of series")
        keep = {}
        for key, rows in headline_runs(runs).items():
            keep[(key[1], key[2])] = {(r["method"], None if r.get("gamma") in (None, 0) else str(r.get("gamma")))
                                      for r in rows} | {(r["method"], r.get("gamma")) for r in rows}
        series = itl_series(report["itl_samples"])
        if any(s.get("temperature") is None for s in series):
            keep = None  # free-form labels: draw them all in one panel
        files["itl_cdf.png"] = plot_itl_cdf(series, out / "itl_cdf.png", keep)
    return files
