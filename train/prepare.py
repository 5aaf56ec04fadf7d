"""``eaglehead prepare --config configs/NAME.yaml [--cache-features DIR]``: the data side of a run.

Tokenises (and optionally regenerates) the training conversations with the target's chat template,
counts loss-masked tokens, writes them to ``output_dir/draft_vocab.safetensors`` (the draft
vocabulary is the ``draft_vocab_size`` most frequent of them; its coverage is printed), and with
``--cache-features`` runs the target once to store the fused features for offline training.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eaglehead.builtin.models import output_vocab_size
from eaglehead.builtin.typed_config import save_config
from eaglehead.draftheads.taps import default_layer_ids, num_decoder_layers
from eaglehead.draftheads.vocab import build_draft_vocab, coverage

from .data import build_dataset, count_tokens
from .features import cache_features
from .recipe import TrainConfig, data_config, head_vocab_size, load_recipe_target, save_token_counts


def coverage_by_size(train_counts: torch.Tensor, heldout_counts: torch.Tensor,
                     sizes: tuple[int, ...] = (1024, 2048, 4096, 8192, 12288, 16384, 32768)) -> dict[int, dict]:
    """Coverage of training and held-out loss tokens by the draft vocabulary of each size (the most
    frequent training tokens): the held-out figure is what decoding sees, the training one flatters
    (a size past the count of distinct training tokens covers all of them)."""
    vocab = train_counts.numel()
    out = {}
    for k in sorted({min(k, vocab) for k in sizes}):
        _, t2d = build_draft_vocab(train_counts, k)
        out[k] = {"train": coverage(train_counts, t2d),
                  "heldout": coverage(heldout_counts, t2d) if int(heldout_counts.sum()) else float("nan")}
    return out


def prepare(cfg: TrainConfig, cache_dir: str | None = None, device: str | None = None) -> dict:
    """Returns a summary: sequences, loss tokens, draft-vocabulary coverage, feature cache path."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    target, tok = load_recipe_target(cfg.model, dev)
    splits = build_dataset(data_config(cfg), tok, model=target if cfg.data.regenerate else None)
    ds = splits["train"]
    vocab = output_vocab_size(target)
    counts = count_tokens(ds, vocab)
    out_dir = Path(cfg.output_dir)
    save_token_counts(out_dir, counts)
    save_config(cfg, out_dir / "prepare_config.yaml")
    size = head_vocab_size(cfg.head, vocab)
    _, t2d = build_draft_vocab(counts, size)
    cov = coverage(counts, t2d)
    summary = {"sequences": len(ds), "loss_tokens": int(counts.sum()), "draft_vocab_size": size,
               "target_vocab_size": vocab, "coverage": cov}
    print(f"{len(ds)} sequences, {int(counts.sum())} loss tokens; draft vocabulary {size}/{vocab} covers "
          f"{100 * cov:.2f}% of them -> {out_dir / 'draft_vocab.safetensors'}")
    test = splits.get("test")
    if test is not None and len(test):
        summary["coverage_by_size"] = coverage_by_size(counts, count_tokens(test, vocab))
        print("draft vocabulary size -> coverage of training / held-out loss tokens: " + ", ".join(
            f"{k}: {100 * c['train']:.1f}% / {100 * c['heldout']:.1f}%" for k, c in summary["coverage_by_size"].items()))
    cache_dir = cache_dir or cfg.features.dir
    if cache_dir:
        ids = cfg.head.fused_layer_ids
        if ids is None:
            n = num_decoder_layers(target)
            ids = [n] if cfg.head.type == "eagle1" else default_layer_ids(n)
        cache_features(ds, target, list(ids), cache_dir, shard_size=cfg.features.shard_size,
                       dtype=cfg.features.dtype, batch_size=cfg.features.batch_size, target_name=cfg.model.target)
        # The counts travel with the features: every head trained from this cache (the EAGLE-1 ablation in
        # its own output_dir) builds the same draft vocabulary without copying files around.
        save_token_counts(Path(cache_dir), counts)
        summary["feature_cache"] = str(cache_dir)
    return summary
