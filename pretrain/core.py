"""What the two small-LM pretraining recipes share: packing, the seeded batch order, the schedule, the optimizer.

The recipes are :mod:`eaglehead.pretrain.demo_target` (the demo's target LM on the standard library) and
:mod:`eaglehead.pretrain.draft_lm` (a draft LM with a real target's tokenizer, on chat data). A settings
object here is any object with the named fields (``lr``, ``warmup``, ``steps``, ``min_lr_ratio``,
``weight_decay``): each recipe's own config class.
"""

from __future__ import annotations

import math
import sys


def pack_stream(stream, seq_len: int, what: str, option: str):
    """A 1-D tensor cut into chunks (n_chunks, seq_len + 1); the tail that fills no chunk is dropped.

    Consecutive chunks overlap by one token so that every stream position is a target exactly once.
    ``what`` and ``option`` name the stream and the length setting in the error for a short stream.
    """
    n = (len(stream) - 1) // seq_len
    if n < 1:
        raise ValueError(f"{what}: {len(stream)} tokens do not fill one chunk of {option} {seq_len}")
    return stream[: n * seq_len + 1].unfold(0, seq_len + 1, seq_len)


def chunk_batches(n_chunks: int, batch: int, seed: int):
    """Endless batches of chunk indices: a fresh seeded permutation per epoch, read ``batch`` at a time."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    pending = torch.empty(0, dtype=torch.long)
    while True:
        while len(pending) < batch:
            pending = torch.cat([pending, torch.randperm(n_chunks, generator=gen)])
        yield pending[:batch]
        pending = pending[batch:]


def lr_at(s, step: int) -> float:
    """Linear warm-up over ``s.warmup`` steps, then cosine from ``s.lr`` to ``s.lr * s.min_lr_ratio`` at ``s.steps``.

    ``s`` is any object with those fields (``demo_target.Settings``, ``draft_lm.DraftLMConfig``).
    """
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def spread(chunks, k: int):
    """``k`` chunks evenly spaced over ``chunks`` (all of them when there are fewer)."""
    import torch

    return chunks[torch.linspace(0, len(chunks) - 1, min(k, len(chunks))).round().long()]


def adamw(model, s):
    """AdamW (0.9, 0.95) at ``s.lr``; ``s`` is any object with ``lr`` and ``weight_decay``."""
    import torch

    # Weight decay on matrices only (projections, embedding); RMSNorm gains are left alone.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                              {"params": keep, "weight_decay": 0.0}], lr=s.lr, betas=(0.9, 0.95))


def package_versions() -> dict:
    import tokenizers
    import torch
    import transformers

    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
