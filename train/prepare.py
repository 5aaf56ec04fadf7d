"""``eaglehead prepare --config configs/NAME.yaml [--cache-features DIR]``: the data side of a run.

Tokenises (and optionally regenerates) the training conversations with the target's chat template,
counts loss-masked tokens, writes them to ``output_dir/draft_vocab.safetensors`` (the draft
vocabulary is the ``draft_vocab_size`` most frequent of them; its coverage is printed), and with
``--cache-features`` runs the target once to store the fused features for offline training.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eaglehead.draftheads.taps import default_layer_ids, num_decoder_layers
from eaglehead.draftheads.vocab import build_draft_vocab, coverage

from .config import save_config
from .data import build_dataset, count_tokens
from .features import cache_features
from .recipe import TrainConfig, data_config, draft_vocab_size, load_target, save_token_counts


def prepare(cfg: TrainConfig, cache_dir: str | None = None, device: str | None = None) -> dict:
    """Returns a summary: sequences, loss tokens, draft-vocabulary coverage, feature cache path."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    target, tok = load_target(cfg.model, dev)
    ds = build_dataset(data_config(cfg), tok, model=target if cfg.data.regenerate else None)["train"]
    vocab = target.get_output_embeddings().weight.shape[0]
    counts = count_tokens(ds, vocab)
    out_dir = Path(cfg.output_dir)
    save_token_counts(out_dir, counts)
    save_config(cfg, out_dir / "prepare_config.yaml")
    size = draft_vocab_size(cfg.head, vocab)
    _, t2d = build_draft_vocab(counts, size)
    cov = coverage(counts, t2d)
    summary = {"sequences": len(ds), "loss_tokens": int(counts.sum()), "draft_vocab_size": size,
               "target_vocab_size": vocab, "coverage": cov}
    print(f"{len(ds)} sequences, {int(counts.sum())} loss tokens; draft vocabulary {size}/{vocab} covers "
          f"{100 * cov:.2f}% of them -> {out_dir / 'draft_vocab.safetensors'}")
    cache_dir = cache_dir or cfg.features.dir
    if cache_dir:
        ids = cfg.head.fused_layer_ids
        if ids is None:
            n = num_decoder_layers(target)
            ids = [n] if cfg.head.type == "eagle1" else default_layer_ids(n)
        cache_features(ds, target, list(ids), cache_dir, shard_size=cfg.features.shard_size,
                       dtype=cfg.features.dtype, batch_size=cfg.features.batch_size, target_name=cfg.model.target)
        summary["feature_cache"] = str(cache_dir)
    return summary
