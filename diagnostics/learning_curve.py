"""A training's learning curve: the greedy tau its head predicts at every saved step, against the answer
tokens trained so far, measured as :mod:`eaglehead.diagnostics.head_accuracy` measures one head.

``python -m eaglehead.diagnostics.learning_curve --run DIR [--run DIR ...] --target PATH --prompts SET
[--max-prompts N] [--max-new-tokens N] [--depth D] --out DIR [--flat-gain G] [--min-points K] [--threads N]``

e.g. ``--run runs/smollm2-135m-instruct/eagle3 --run runs/smollm2-135m-instruct/eagle1 --target
builtin:smollm2-135m-instruct --prompts mt-bench --max-prompts 80 --out runs/curve``.

Every save of the recipe writes a head-only snapshot, ``<run>/snapshots/step_N`` (never pruned; see
:mod:`eaglehead.train.trainer`). Each call measures the snapshots not measured before (in chunks, so a
killed call loses one chunk at most) and appends them to ``<out>/measurements.jsonl``; the target's greedy
continuations are generated once and kept in ``<out>/continuations.json``, so every point of every curve is
measured on the same tokens. ``<out>/settings.json`` pins target, prompts and depth: another setting needs
another ``--out``. Then it writes ``<out>/curve.json`` and ``<out>/curve.png`` (predicted tau at gamma = depth
and first-draft agreement against answer tokens trained, one line per run) and prints each run's verdict.

Flattened: over the snapshots in a run's last doubling of answer tokens (tokens >= half the last one's),
the least-squares slope of predicted tau against log2(tokens) is the tau gained per doubling of training;
the curve has flattened when at least ``--min-points`` snapshots lie there and the slope is below
``--flat-gain``. Snapshots taken while a wsd run anneals (its rate decaying: ``snapshot.json``'s ``annealing``,
or for older snapshots the run's logged rates) are drawn apart and left out of the verdict: what the decay
adds is the anneal's gain, not more tokens'. A checkpoint resumed from before the count existed starts
counting at its step: the tokens of the steps before are estimated at the run's later mean per step, and the
point says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

from eaglehead.builtin.jsonio import read_json, read_jsonl
from eaglehead.builtin.models import load_target
from eaglehead.decode.eagle import load_eagle_drafter
from eaglehead.train.trainer import SNAPSHOT_FILE, SNAPSHOTS_DIR

from .curve_figure import plot_curve
from .head_accuracy import agreement_records, load_texts, target_continuations

MEASUREMENTS, CONTINUATIONS, SETTINGS = "measurements.jsonl", "continuations.json", "settings.json"
FLAT_GAIN, MIN_POINTS = 0.02, 3


def run_snapshots(run_dir: str | Path) -> list[dict]:
    """The complete snapshots of a run, by step: ``snapshot.json`` plus ``dir`` and ``head_type`` (from the
    head's config), answer tokens estimated where the count started late (``answer_tokens_estimated``)."""
    root = Path(run_dir) / SNAPSHOTS_DIR
    found = []
    for path in root.glob("step_*") if root.is_dir() else []:
        if not (path.is_dir() and path.name[5:].isdigit() and (path / SNAPSHOT_FILE).is_file()):
            continue  # .step_N.tmp: a snapshot being written
        snap = read_json(path / SNAPSHOT_FILE, expect=dict)
        config = read_json(path / "config.json", expect=dict)
        found.append({**snap, "dir": str(path), "head_type": head_label(config)})
    found.sort(key=lambda s: s["step"])
    unknown = [s["step"] for s in found if "annealing" not in s]  # written before snapshots recorded it
    derived = _annealing(Path(run_dir), unknown) if unknown else {}
    for snap in found:
        snap.setdefault("annealing", derived.get(snap["step"], False))
        since = snap.get("answer_tokens_since_step", 0)
        if since and snap["step"] > since:  # the mean tokens per counted step stands in for the uncounted ones
            snap["answer_tokens"] = round(snap["answer_tokens"] * snap["step"] / (snap["step"] - since))
            snap["answer_tokens_estimated"] = True
    return found


def _annealing(run_dir: Path, steps: list[int]) -> dict[int, bool]:
    """Whether each of ``steps`` of a wsd run (its ``config.yaml``) was taken while it annealed, read from the
    rate logged last before it (``metrics.jsonl``: the rate after each logged step): below the peak after the
    warmup. The logged rate at a launch's own last step is 0 even with no decay (the rate after the end),
    hence the one before. All False for other schedules or when either file is missing."""
    import yaml

    config_path, metrics_path = run_dir / "config.yaml", run_dir / "metrics.jsonl"
    if not (config_path.is_file() and metrics_path.is_file()):
        return {s: False for s in steps}
    optim = (yaml.safe_load(config_path.read_text()) or {}).get("optim") or {}
    if optim.get("schedule") != "wsd":
        return {s: False for s in steps}
    peak, warmup = float(optim.get("lr", 0.0)), int(optim.get("warmup_steps", 0))
    rates = sorted((rec["step"], rec["lr"]) for _, rec in read_jsonl(metrics_path) if "lr" in rec)
    out = {}
    for step in steps:
        before = [(s, lr) for s, lr in rates if s < step]
        out[step] = bool(before) and before[-1][0] >= warmup and before[-1][1] < peak * (1 - 1e-6)
    return out


def head_label(config: dict) -> str:
    """EAGLE-3, EAGLE-1 or EAGLE-3.1 (fc_norm and norm_output both on; one alone is named) from a head's config."""
    kind = {"eagle3": "EAGLE-3", "eagle1": "EAGLE-1"}.get(config.get("eaglehead_head_type"), "head")
    switches = [k for k in ("fc_norm", "norm_output") if config.get(k)]
    if kind == "EAGLE-3" and len(switches) == 2:
        return "EAGLE-3.1"
    return kind + "".join(f" +{s}" for s in switches)


def flat_verdict(points: list[dict], *, flat_gain: float = FLAT_GAIN, min_points: int = MIN_POINTS) -> dict:
    """Whether a curve (points with ``answer_tokens`` and ``tau``) has flattened: the least-squares slope of
    tau against log2(tokens) over the points in the last doubling of tokens, below ``flat_gain``."""
    pts = sorted((p for p in points if p["answer_tokens"] > 0), key=lambda p: p["answer_tokens"])
    verdict = {"flattened": False, "gain_per_doubling": None, "window_points": 0, "flat_gain": flat_gain,
               "min_points": min_points}
    if not pts:
        return {**verdict, "reason": "no snapshot with answer tokens"}
    last = pts[-1]["answer_tokens"]
    window = [p for p in pts if p["answer_tokens"] >= last / 2]
    verdict["window_points"] = len(window)
    verdict["window_tokens"] = [window[0]["answer_tokens"], last]
    if len(window) < min_points:
        return {**verdict, "reason": f"{len(window)} snapshot(s) in the last doubling of tokens, need {min_points}"}
    x = [math.log2(p["answer_tokens"]) for p in window]
    y = [p["tau"] for p in window]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx > 0 else 0.0
    verdict.update(gain_per_doubling=round(slope, 4), flattened=slope < flat_gain)
    verdict["reason"] = (f"{slope:+.3f} tau per doubling of answer tokens over the last doubling "
                         f"({len(window)} snapshots), {'below' if slope < flat_gain else 'not below'} {flat_gain}")
    return verdict


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _check_settings(out: Path, settings: dict) -> None:
    """Pin ``out`` to one measurement setting: points measured otherwise are not comparable."""
    path = out / SETTINGS
    if path.is_file():
        old = read_json(path, expect=dict)
        if old != settings:
            changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise ValueError(f"{out} holds measurements with other settings ({', '.join(changed)}: "
                             f"{[old.get(k) for k in changed]} here, {[settings.get(k) for k in changed]} now); "
                             "use another --out")
    else:
        _atomic_write(path, json.dumps(settings, indent=1))


def _continuations(out: Path, target, tok, settings: dict) -> list[tuple[torch.Tensor, int]]:
    """The target's greedy continuations of the prompts: generated once per ``out``, then read back."""
    path = out / CONTINUATIONS
    if path.is_file():
        return [(torch.tensor([ids]), n) for ids, n in read_json(path, expect=list)]
    texts = load_texts(settings["prompts"], settings["max_prompts"])
    sequences = target_continuations(target, tok, texts, max_new_tokens=settings["max_new_tokens"])
    _atomic_write(path, json.dumps([[seq[0].tolist(), n] for seq, n in sequences]))
    return sequences


def _key(rec: dict) -> tuple:
    """A snapshot's identity: run, step and write time (a run restarted from scratch rewrites its steps)."""
    return str(Path(rec["run"]).resolve()), rec["step"], rec["utc"]


def pending(out: Path, runs: list[str]) -> tuple[list[dict], list[dict]]:
    """(the measurements in ``out``, the snapshots of ``runs`` not among them)."""
    path = out / MEASUREMENTS
    done = [rec for _, rec in read_jsonl(path)] if path.is_file() else []
    seen = {_key(rec) for rec in done}
    snaps = [{**s, "run": run} for run in runs for s in run_snapshots(run)]
    return done, [s for s in snaps if _key(s) not in seen]


def measure(out: Path, done: list[dict], todo: list[dict], target, tok, settings: dict, chunk: int = 4) -> None:
    """Measure the snapshots ``todo`` and add them to ``done`` and to ``out/measurements.jsonl`` (rewritten whole
    after each chunk of ``chunk`` snapshots: a killed call loses that chunk only)."""
    sequences = _continuations(out, target, tok, settings)
    for i in range(0, len(todo), chunk):
        part = todo[i: i + chunk]
        drafters = [load_eagle_drafter(s["dir"], target) for s in part]
        records = agreement_records(target, drafters, [s["dir"] for s in part], sequences, settings["depth"])
        for snap, rec in zip(part, records):
            done.append({**snap, **rec})
            print(f"measured {snap['dir']}: {snap['answer_tokens']} answer tokens, predicted tau "
                  f"{rec['predicted_greedy_tau_by_gamma'][-1]}", flush=True)
        _atomic_write(out / MEASUREMENTS, "".join(json.dumps(rec) + "\n" for rec in done))


def build_curve(measured: list[dict], runs: list[str], settings: dict, *, flat_gain: float = FLAT_GAIN,
                min_points: int = MIN_POINTS) -> dict:
    """``curve.json``'s content: per run (in ``runs``' order) its measured points by step and its verdict."""
    by_key = {_key(rec): rec for rec in measured}
    curves = []
    for run in runs:
        snaps = run_snapshots(run)  # a run's current snapshots: a rewritten step shows its new head only
        s_annealing = {s["step"]: s["annealing"] for s in snaps}
        points = []
        for rec in (by_key.get(_key({**s, "run": run})) for s in snaps):
            if rec is not None:
                points.append({"step": rec["step"], "answer_tokens": rec["answer_tokens"],
                               "answer_tokens_estimated": rec.get("answer_tokens_estimated", False),
                               "accuracy_by_depth": rec["accuracy_by_depth"],
                               "predicted_greedy_tau_by_gamma": rec["predicted_greedy_tau_by_gamma"],
                               "tau": rec["predicted_greedy_tau_by_gamma"][-1], "utc": rec["utc"],
                               "annealing": bool(s_annealing.get(rec["step"], False))})
        head_type = snaps[-1]["head_type"] if snaps else "head"
        # Flattening is judged at the peak rate: a decay's gain is the anneal's, not more tokens'.
        verdict = flat_verdict([p for p in points if not p["annealing"]], flat_gain=flat_gain, min_points=min_points)
        if points and all(p["annealing"] for p in points):
            verdict["reason"] = "every snapshot was taken while annealing: no point at the peak rate to judge"
        curves.append({"run": run, "head_type": head_type, "label": f"{head_type} ({Path(run).name})",
                       "points": points, "verdict": verdict})
    return {"settings": settings, "tau_gamma": settings["depth"], "runs": curves}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.diagnostics.learning_curve",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, action="append", help="a training's output_dir (repeat for several)")
    p.add_argument("--target", required=True, help="target path or hub id, or a builtin: name")
    p.add_argument("--prompts", required=True, help="'mt-bench', 'humaneval', a JSONL prompt set or 'demo-heldout'")
    p.add_argument("--max-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--out", required=True, help="folder of the measurements, curve.json and curve.png")
    p.add_argument("--flat-gain", type=float, default=FLAT_GAIN,
                   help="flattened below this predicted-tau gain per doubling of answer tokens")
    p.add_argument("--min-points", type=int, default=MIN_POINTS, help="snapshots needed in the last doubling")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = p.parse_args(argv)
    for name in ("max_prompts", "max_new_tokens", "depth", "min_points"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"target": args.target, "prompts": args.prompts, "max_prompts": args.max_prompts,
                "max_new_tokens": args.max_new_tokens, "depth": args.depth}
    try:
        _check_settings(out, settings)
        load_texts(args.prompts, 1)  # a bad prompt set fails before the target loads
        done, todo = pending(out, args.run)
        print(f"{len(todo)} snapshot(s) to measure, {len(done)} measured before", flush=True)
        if todo:
            target, tok = load_target(args.target, dtype=torch.float32)
            measure(out, done, todo, target, tok, settings)
    except ValueError as exc:
        print(f"learning_curve: error: {exc}", file=sys.stderr)
        return 2
    curve = build_curve(done, args.run, settings, flat_gain=args.flat_gain, min_points=args.min_points)
    if (out / CONTINUATIONS).is_file():  # a prompt set may hold fewer than --max-prompts
        curve["prompts_measured"] = len(read_json(out / CONTINUATIONS, expect=list))
    _atomic_write(out / "curve.json", json.dumps(curve, indent=1))
    plot_curve(curve, out / "curve.png")
    for c in curve["runs"]:
        v = c["verdict"]
        print(f"{c['label']}: {len(c['points'])} snapshots, {'FLATTENED' if v['flattened'] else 'not flattened'}: "
              f"{v['reason']}")
    print(f"wrote {out / 'curve.json'} and {out / 'curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
