"""Reduced draft vocabulary: the most frequent target tokens, and the d2t/t2d maps the engines load.

``d2t[i] = target_id(i) - i`` (int64, ``[draft_vocab_size]``), so ``target_id = draft_id + d2t[draft_id]``;
``t2d`` (bool, ``[target_vocab_size]``) is true where a target token is in the draft vocabulary.

Usage::

    counts = torch.bincount(ids[loss_mask.bool()], minlength=target_vocab_size)   # int64 [V]
    d2t, t2d = build_draft_vocab(counts, draft_vocab_size=32000)
    coverage(counts, t2d)        # fraction of counted tokens the draft vocabulary can emit
"""

from __future__ import annotations

import torch

# The draft vocabulary a head gets unless told otherwise: the reference heads' size for Llama-3 targets.
DEFAULT_DRAFT_VOCAB_SIZE = 32000


def resolve_draft_vocab_size(requested: int, target_vocab: int) -> int:
    """The rows of a head's ``lm_head``: ``requested`` capped at the target's vocabulary (a draft vocabulary
    is a subset of the target's)."""
    return min(requested, target_vocab)


def build_draft_vocab(token_counts: torch.Tensor, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick the ``draft_vocab_size`` most frequent target ids and return ``(d2t, t2d)`` on CPU.

    Ties (including the zero-count ids that fill a vocabulary larger than the set of seen tokens) go to the
    lower id, so the result is deterministic. The chosen ids are sorted ascending.
    """
    if not isinstance(token_counts, torch.Tensor) or token_counts.dim() != 1:
        raise ValueError(f"token_counts must be a 1-D tensor [target_vocab_size], got {_describe(token_counts)}")
    if token_counts.dtype.is_floating_point or token_counts.dtype.is_complex or token_counts.dtype == torch.bool:
        raise ValueError(f"token_counts must hold integer counts, got dtype {token_counts.dtype}")
    counts = token_counts.detach().to("cpu", torch.int64)
    if (counts < 0).any():
        raise ValueError("token_counts must be non-negative")
    vocab = counts.numel()
    size = draft_vocab_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= vocab:
        raise ValueError(f"draft_vocab_size must be an int in 1..{vocab} (the target vocab), got {draft_vocab_size!r}")
    # A stable descending sort keeps equal counts in ascending id order: the lower id wins a tie.
    order = torch.sort(counts, descending=True, stable=True).indices
    chosen = torch.sort(order[:draft_vocab_size]).values
    return draft_vocab_from_ids(chosen, vocab)


def draft_vocab_from_ids(target_ids: torch.Tensor, target_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d2t, t2d)`` for a strictly increasing list of target ids."""
    ids = target_ids.detach().to("cpu", torch.int64)
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(f"target_ids must be a non-empty 1-D tensor, got {_describe(target_ids)}")
    if (ids[1:] <= ids[:-1]).any() or ids[0] < 0 or ids[-1] >= target_vocab_size:
        raise ValueError(f"target_ids must be strictly increasing ids in 0..{target_vocab_size - 1}")
    d2t = ids - torch.arange(ids.numel(), dtype=torch.int64)
    t2d = torch.zeros(target_vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d


def check_vocab_mapping(d2t: torch.Tensor, t2d: torch.Tensor, draft_vocab_size: int, target_vocab_size: int) -> None:
    """Raise ``ValueError`` (naming ``d2t`` or ``t2d``) unless the pair is a valid, consistent mapping."""
    if d2t.shape != (draft_vocab_size,) or d2t.dtype != torch.int64:
        raise ValueError(f"d2t must be int64 [{draft_vocab_size}], got {_describe(d2t)}")
    if t2d.shape != (target_vocab_size,) or t2d.dtype != torch.bool:
        raise ValueError(f"t2d must be bool [{target_vocab_size}], got {_describe(t2d)}")
    if d2t.is_meta or t2d.is_meta:
        return
    ids = d2t.cpu() + torch.arange(draft_vocab_size, dtype=torch.int64)
    if (ids[1:] <= ids[:-1]).any() or ids[0] < 0 or ids[-1] >= target_vocab_size:
        raise ValueError(f"d2t maps draft ids to target ids not strictly increasing in 0..{target_vocab_size - 1}")
    t2d_cpu = t2d.cpu()
    if int(t2d_cpu.sum()) != draft_vocab_size or not bool(t2d_cpu[ids].all()):
        raise ValueError("t2d does not mark exactly the target ids that d2t maps to")


def coverage(token_counts: torch.Tensor, t2d: torch.Tensor) -> float:
    """Fraction of the counted tokens that lie in the draft vocabulary (``t2d`` true)."""
    if token_counts.shape != t2d.shape or t2d.dtype != torch.bool:
        raise ValueError(f"t2d must be bool with token_counts' shape {tuple(token_counts.shape)}, got {_describe(t2d)}")
    counts = token_counts.detach().to("cpu", torch.int64)
    total = int(counts.sum())
    if total <= 0:
        raise ValueError("token_counts sums to zero: coverage is undefined")
    return int(counts[t2d.cpu()].sum()) / total


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {list(x.shape)}"
    return type(x).__name__
