"""The learning-curve figure (:mod:`eaglehead.diagnostics.learning_curve`): two panels against answer tokens
trained (log scale), one line per run: the greedy tau its head predicts at gamma = depth, and its first-draft
agreement ``alpha_1``. The legend gives each run's verdict; hollow markers are points whose token count is
partly estimated; squares joined by a dashed line are snapshots taken while the run annealed (its rate
decaying). Drawn on a ``matplotlib.figure.Figure`` (Agg canvas): no global backend is switched.

    plot_curve(curve, Path("runs/curve/curve.png"))   # curve: learning_curve.build_curve's dict
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

from eaglehead.eval.figures import METHOD_COLORS

_TYPE_COLOR = {"EAGLE-3": METHOD_COLORS["eagle3"], "EAGLE-1": METHOD_COLORS["eagle1"], "EAGLE-3.1": "C2"}


def _legend_label(run: dict) -> str:
    v, n = run["verdict"], len(run["points"])
    if n and all(p.get("annealing") for p in run["points"]):
        return f"{run['label']}: {n} pts, all annealing (not judged)"
    if v["gain_per_doubling"] is None:
        return f"{run['label']}: {n} pts, too few to judge"
    state = "flattened" if v["flattened"] else "still rising"
    return f"{run['label']}: {state} ({v['gain_per_doubling']:+.3f} τ / doubling)"


def plot_curve(curve: dict, path: Path) -> Path:
    """Write the two-panel figure of ``curve`` to ``path`` (PNG)."""
    s = curve["settings"]
    fig = Figure(figsize=(12, 4.6), dpi=100)
    ax_tau, ax_acc = fig.subplots(1, 2)
    used: set[str] = set()
    for i, run in enumerate(curve["runs"]):
        pts = [p for p in run["points"] if p["answer_tokens"] > 0]
        color = _TYPE_COLOR.get(run["head_type"], f"C{i + 3}")
        color = color if color not in used else f"C{i + 3}"  # a second run of the same head type
        used.add(color)
        x = [p["answer_tokens"] for p in pts]
        for ax, y in ((ax_tau, [p["tau"] for p in pts]), (ax_acc, [p["accuracy_by_depth"][0] for p in pts])):
            peak = [(a, b) for a, b, p in zip(x, y, pts) if not p.get("annealing")]
            if peak:
                ax.plot(*zip(*peak), "-", color=color, lw=1.6, label=_legend_label(run) if ax is ax_tau else None)
            filled = [(a, b) for a, b, p in zip(x, y, pts)
                      if not p["answer_tokens_estimated"] and not p.get("annealing")]
            hollow = [(a, b) for a, b, p in zip(x, y, pts) if p["answer_tokens_estimated"] and not p.get("annealing")]
            if filled:
                ax.plot(*zip(*filled), "o", color=color, ms=4)
            if hollow:
                ax.plot(*zip(*hollow), "o", mfc="white", color=color, ms=4)
            for i, p in enumerate(pts):  # each annealed point, dashed from the point before it
                if p.get("annealing"):
                    seg = [(x[i - 1], y[i - 1])] if i else []
                    ax.plot(*zip(*seg, (x[i], y[i])), "--", color=color, lw=1.2,
                            label=None if peak or i or ax is ax_acc else _legend_label(run))
                    ax.plot(x[i], y[i], "s", color=color, ms=5)
        if pts:
            ax_tau.annotate(f"{pts[-1]['tau']:.2f}", (x[-1], pts[-1]["tau"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=8, color=color)
    for ax, title in ((ax_tau, f"predicted greedy τ at γ = {curve['tau_gamma']}"),
                      (ax_acc, "first-draft agreement α₁ with the target")):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 100k 200k 500k 1M: never collide
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.08)  # room for the last value's label
        ax.set_xlabel("answer tokens trained")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    ax_tau.set_ylabel("τ (tokens per target forward)")
    ax_acc.set_ylabel("α₁")
    if any(run["points"] for run in curve["runs"]):
        gain = curve["runs"][0]["verdict"]["flat_gain"]
        note = f"flattened: under {gain:g} τ gained per doubling of tokens, fitted over the last doubling"
        if any(p["answer_tokens_estimated"] for run in curve["runs"] for p in run["points"]):
            note += "; hollow points: tokens partly estimated"
        if any(p.get("annealing") for run in curve["runs"] for p in run["points"]):
            note += "; squares, dashed: annealing (rate decaying), not in the verdict"
        fig.legend(loc="lower center", ncol=min(2, len(curve["runs"])), fontsize=9, frameon=False, title=note,
                   title_fontsize=8)
    prompts = curve.get("prompts_measured", s["max_prompts"])
    fig.suptitle(f"Learning curve: {s['prompts']} ({prompts} prompts × {s['max_new_tokens']} new tokens of "
                 f"{s['target']})", fontsize=11)
    fig.tight_layout(rect=(0, 0.12, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
