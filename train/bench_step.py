"""Time one training step of a recipe on its real batches, for several ``rollout.deep_stride`` values.

    python -m eaglehead.train.bench_step --config configs/smollm2-135m-instruct.yaml \\
        features.dir=runs/smollm2-135m-instruct/features [--batches 3,7] [--strides 1,2] [--repeats 2]

For each chosen micro-batch (the recipe's own order: length grouping included) it runs the rollout's
forward and backward once per stride, interleaved ``--repeats`` times, and prints one JSON line per batch:
its shape, real and loss tokens, the seconds of every run and the ratio of the fastest runs against stride
1. The loss is the same computation the trainer runs (``accuracy=False``, as on steps that skip acc_i).
Needs a filled feature cache (``eaglehead prepare --cache-features``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from .config import load_config
from .features import FeatureDataset, collate_features
from .recipe import TrainConfig, build_head, load_target, recipe_token_counts
from .rollout import rollout
from .trainer import data_order


def measure(cfg: TrainConfig, batches: list[int], strides: list[int], repeats: int) -> list[dict]:
    if not cfg.features.dir or not (Path(cfg.features.dir) / "index.json").is_file():
        raise ValueError(f"features.dir={cfg.features.dir}: no feature cache there (eaglehead prepare --cache-features)")
    target, tok = load_target(cfg.model, torch.device("cpu"))
    data = FeatureDataset(cfg.features.dir)
    head = build_head(cfg, target, recipe_token_counts(cfg))
    head.bind_embedding(target.get_input_embeddings())
    lm_w = target.get_output_embeddings().weight
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    order = data_order(cfg, data, lambda rows: collate_features(rows, pad))
    key = data.source_of(list(head.config.fused_layer_ids))
    out = []
    for g in batches:
        batch, _ = order[g]
        batch = {**batch, "fused": batch[key].float(), "final_hidden": batch["final_hidden"].float()}
        seconds: dict[int, list[float]] = {s: [] for s in strides}
        for _ in range(repeats):
            for s in strides:
                head.zero_grad()
                t0 = time.perf_counter()
                rollout(head, batch, lm_w, depth=cfg.rollout.depth, decay=cfg.rollout.decay, labels=cfg.rollout.labels,
                        deep_stride=s, accuracy=False).loss().backward()
                seconds[s].append(round(time.perf_counter() - t0, 2))
        base = min(seconds[strides[0]])
        out.append({"micro_batch": g, "shape": list(batch["input_ids"].shape),
                    "real_tokens": int(batch["attention_mask"].sum()), "loss_tokens": int(batch["loss_mask"].sum()),
                    "seconds": {str(s): v for s, v in seconds.items()},
                    "speedup_vs_first": {str(s): round(base / min(v), 3) for s, v in seconds.items()}})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.train.bench_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--batches", default="3,7", help="comma-separated micro-batch numbers of the recipe's order")
    p.add_argument("--strides", default="1,2", help="comma-separated rollout.deep_stride values (first = baseline)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = p.parse_args(argv)
    try:
        batches = [int(x) for x in args.batches.split(",")]
        strides = [int(x) for x in args.strides.split(",")]
    except ValueError:
        p.error(f"--batches and --strides take comma-separated integers, got {args.batches!r} and {args.strides!r}")
    if min(strides) < 1 or min(batches) < 0 or args.repeats < 1:
        p.error("--strides must be >= 1, --batches >= 0 and --repeats >= 1")
    torch.set_num_threads(args.threads)
    cfg = load_config(TrainConfig, args.config, args.overrides)
    for rec in measure(cfg, batches, strides, args.repeats):
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
