"""Time one training step of a recipe on its real batches, for several ``rollout.deep_stride`` values and
autocast settings, side by side.

    python -m eaglehead.train.bench_step --config configs/smollm2-135m-instruct.yaml \\
        features.dir=runs/smollm2-135m-instruct/features [--batches 3,7] [--strides 1,2] [--repeats 2] \\
        [--autocast none,bfloat16] [--threads 1]

For each chosen micro-batch (the recipe's own order: length grouping included) it runs the rollout's
forward and backward once per variant (stride x autocast), interleaved ``--repeats`` times, and prints one
JSON line per batch: its shape, real and loss tokens, the seconds of every run, loss tokens per second per
thread of the fastest run, and the ratio of the fastest runs against the first variant. A variant is named by
its stride, plus ``/bfloat16`` or ``/none`` when several autocast settings are compared. The loss is the same
computation the trainer runs (``accuracy=False``, as on steps that skip acc_i). Needs a filled feature cache
(``eaglehead prepare --cache-features``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from eaglehead.builtin.typed_config import load_config

from .features import FeatureDataset, collate_features
from .recipe import TrainConfig, build_head, load_recipe_target, recipe_token_counts
from .rollout import rollout
from .trainer import data_order


def measure(cfg: TrainConfig, batches: list[int], strides: list[int], repeats: int,
            autocasts: tuple[str, ...] = ("none",), threads: int = 1) -> list[dict]:
    if not cfg.features.dir or not (Path(cfg.features.dir) / "index.json").is_file():
        raise ValueError(f"features.dir={cfg.features.dir}: no feature cache there (eaglehead prepare --cache-features)")
    target, tok = load_recipe_target(cfg.model, torch.device("cpu"))
    data = FeatureDataset(cfg.features.dir)
    head = build_head(cfg, target, recipe_token_counts(cfg))
    head.bind_embedding(target.get_input_embeddings())
    lm_w = target.get_output_embeddings().weight
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    order = data_order(cfg, data, lambda rows: collate_features(rows, pad))
    key = data.source_of(list(head.config.fused_layer_ids))
    variants = [(s, a, str(s) if len(autocasts) == 1 else f"{s}/{a}") for s in strides for a in autocasts]
    out = []
    for g in batches:
        batch, _ = order[g]
        batch = {**batch, "fused": batch[key].float(), "final_hidden": batch["final_hidden"].float()}
        seconds: dict[str, list[float]] = {name: [] for _, _, name in variants}
        for _ in range(repeats):
            for stride, autocast, name in variants:
                head.zero_grad()
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bfloat16"):
                    loss = rollout(head, batch, lm_w, depth=cfg.rollout.depth, decay=cfg.rollout.decay,
                                   labels=cfg.rollout.labels, deep_stride=stride, accuracy=False).loss()
                loss.backward()
                seconds[name].append(round(time.perf_counter() - t0, 2))
        base = min(seconds[variants[0][2]])
        loss_tokens = int(batch["loss_mask"].sum())
        out.append({"micro_batch": g, "shape": list(batch["input_ids"].shape),
                    "real_tokens": int(batch["attention_mask"].sum()), "loss_tokens": loss_tokens,
                    "seconds": seconds, "speedup_vs_first": {k: round(base / min(v), 3) for k, v in seconds.items()},
                    "loss_tokens_per_s_per_thread": {k: round(loss_tokens / min(v) / threads, 1)
                                                     for k, v in seconds.items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.train.bench_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--batches", default="3,7", help="comma-separated micro-batch numbers of the recipe's order")
    p.add_argument("--strides", default="1,2", help="comma-separated rollout.deep_stride values (first = baseline)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--autocast", default="none", help="comma-separated autocast settings to compare: none, bfloat16")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = p.parse_args(argv)
    try:
        batches = [int(x) for x in args.batches.split(",")]
        strides = [int(x) for x in args.strides.split(",")]
    except ValueError:
        p.error(f"--batches and --strides take comma-separated integers, got {args.batches!r} and {args.strides!r}")
    if min(strides) < 1 or min(batches) < 0 or args.repeats < 1:
        p.error("--strides must be >= 1, --batches >= 0 and --repeats >= 1")
    autocasts = tuple(dict.fromkeys(a.strip() for a in args.autocast.split(",")))
    if not set(autocasts) <= {"none", "bfloat16"}:
        p.error(f"--autocast takes comma-separated values among none, bfloat16, got {args.autocast!r}")
    torch.set_num_threads(args.threads)
    cfg = load_config(TrainConfig, args.config, args.overrides)
    for rec in measure(cfg, batches, strides, args.repeats, autocasts, args.threads):
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
