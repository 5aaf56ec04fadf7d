"""Decode attention that skips the padding of a left-padded batch: rows split into segments, each segment
attends only to the cache columns its own rows use.

In the streaming sampler (:mod:`eaglehead.datagen.stream`) rows join at different times, so the cache is
as wide as its oldest row and a newly joined row sees mostly left padding: attention over those columns
is masked out but still read (a decode step's attention is memory-bound; at batch 64 it was ~30 % of a
bfloat16 step on SmolLM2). Here the batch is cut into contiguous row segments ``(a, b, start)`` and each
segment runs the model's own SDPA attention on ``key[a:b, :, start:]``: the same keys, values and mask
minus columns that are padding for every row of the segment, so each row's attention weights are the
same numbers (masked columns carry weight exactly 0; only the summation order of the kept ones may differ
by rounding). The segments come from :func:`plan_segments`, a dynamic programme that trades columns
skipped against the fixed cost of one more attention call.

    with segmented_attention(model) as on:          # on: False where the model cannot take it (falls back)
        segs = plan_segments(starts, width) if on else None
        model(..., kv_segments=segs)                 # the kwarg reaches the attention function
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from eaglehead.builtin.attention import NAME as FEW_QUERY
from eaglehead.builtin.attention import few_query_attention

NAME = "eaglehead_segmented_sdpa"
# The fixed cost of one more attention call, in cache cells (rows x columns) of attention work: slicing,
# one SDPA dispatch and the final concatenation cost about as much as a few hundred cells per layer.
CALL_COST = 384


def _segmented_sdpa(module, query, key, value, attention_mask, *args, kv_segments=None, **kwargs):
    # Each segment runs the attention a loaded target runs: SDPA, or on a CPU in half precision the grouped
    # matmuls of builtin.attention (which hands everything else to SDPA).
    if kv_segments is None or query.shape[2] != 1 or len(kv_segments) < 1:
        return few_query_attention(module, query, key, value, attention_mask, *args, **kwargs)
    if attention_mask is not None and attention_mask.shape[-1] != key.shape[-2]:
        raise ValueError(f"kv_segments: the mask covers {attention_mask.shape[-1]} cache columns, the keys "
                         f"{key.shape[-2]}; segments are only defined when the two agree")
    outs = []
    for a, b, s in kv_segments:
        mask = None if attention_mask is None else attention_mask[a:b, ..., s:]
        out, _ = few_query_attention(module, query[a:b], key[a:b, :, s:], value[a:b, :, s:], mask, *args, **kwargs)
        outs.append(out)
    return torch.cat(outs), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(NAME, _segmented_sdpa)
        AttentionMaskInterface.register(NAME, sdpa_mask)  # the mask SDPA itself would get


@contextmanager
def segmented_attention(model):
    """Switch ``model`` to segmented SDPA attention for the block; yields whether it is on. Models not on
    SDPA attention (eager, flash, a model that cannot switch) are left as they are and yield ``False``."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before not in ("sdpa", FEW_QUERY) or not hasattr(model, "set_attn_implementation"):
        yield False
        return
    try:
        _register()
        model.set_attn_implementation(NAME)
    except (ValueError, ImportError, AttributeError, KeyError):
        yield False
        return
    try:
        yield True
    finally:
        model.set_attn_implementation(before)


def plan_segments(starts: list[int], width: int, call_cost: int = CALL_COST) -> list[tuple[int, int, int]]:
    """Contiguous row segments ``[(a, b, start)]`` covering rows ``0..len(starts)-1`` that minimise the
    attention cells read, ``sum (b - a) * (width - min(starts[a:b]))``, plus ``call_cost`` per segment;
    ``starts[r]`` is the first cache column row ``r`` attends to (columns before it are padding)."""
    n = len(starts)
    if n == 0:
        return []
    best = [0.0] + [float("inf")] * n  # best[j]: rows 0..j-1 covered
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        lo = width
        for a in range(j - 1, -1, -1):  # the segment a..j-1, its start the min over it
            lo = min(lo, starts[a])
            cost = best[a] + (j - a) * (width - lo) + call_cost
            if cost < best[j]:
                best[j], cut[j] = cost, a
    segs, j = [], n
    while j > 0:
        a = cut[j]
        segs.append((a, j, min(starts[a:j])))
        j = a
    return segs[::-1]
