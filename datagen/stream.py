"""The batched sampler that writes chat data in process: continuous batching over a left-padded KV cache.

    toks, ended = sample_stream(model, prompts, batch_size=32, sampling=SamplingConfig(temperature=0.7),
                                max_new_tokens=512, eos_ids={2}, pad_id=2, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from collections import deque

import torch

from eaglehead.builtin.kvcache import GrowingCache, cache_keyword
from eaglehead.builtin.text import left_pad
from eaglehead.decode import SamplingConfig, probs

from .config import DEFAULT_SAMPLER, sampler_named
from .segments import plan_segments, segmented_attention


@torch.no_grad()
def sample_stream(model, prompts: list[list[int]], *, batch_size: int, sampling: SamplingConfig,
                  max_new_tokens: int, eos_ids: set[int], pad_id: int, generator: torch.Generator,
                  sampler: str = DEFAULT_SAMPLER, segments: bool = True) -> tuple[list[list[int]], list[bool]]:
    """Continue each prompt until EOS or ``max_new_tokens``; returns ``(new tokens, ended by EOS)``.

    Continuous batching: at most ``batch_size`` rows decode together; a row that finishes leaves the
    batch at once (its cache rows are dropped), and waiting prompts join when a quarter of the batch is
    free (prefilled together, then merged into the running cache, left-padded), so every step runs
    near the full batch instead of waiting for its longest row. Each row keeps its own position ids
    and attention mask, so its tokens are exactly what it would get decoding alone. Decode attention
    skips the columns that are padding for whole segments of rows (:mod:`.segments`; a joining group is
    ordered longest prompt first, so its padding lines up; ``segments=False``: one attention call over
    the whole padded cache, as before). ``sampler`` names how tokens are drawn (:data:`SAMPLERS`).
    """
    if not segments:
        return _stream(model, prompts, batch_size, sampling, max_new_tokens, eos_ids, pad_id, generator,
                       sampler_named(sampler), False)
    with segmented_attention(model) as segmented:
        return _stream(model, prompts, batch_size, sampling, max_new_tokens, eos_ids, pad_id, generator,
                       sampler_named(sampler), segmented)


def _stream(model, prompts, batch_size, sampling, max_new_tokens, eos_ids, pad_id, generator, draw, segmented):
    device = next(model.parameters()).device
    cache_kw = cache_keyword(model)
    waiting = deque(range(len(prompts)))
    out: list[list[int]] = [[] for _ in prompts]
    ended = [False] * len(prompts)
    live: list[int] = []  # prompt index of each batch row
    cache = mask = pos = logits = segs = None
    while waiting or live:
        free = batch_size - len(live)
        if waiting and (not live or free >= max(1, batch_size // 4)):
            new = sorted((waiting.popleft() for _ in range(min(free, len(waiting)))), key=lambda i: -len(prompts[i]))
            ids, new_mask = left_pad([prompts[i] for i in new], pad_id, device)
            new_cache = GrowingCache(config=model.config)
            new_logits = model(input_ids=ids, attention_mask=new_mask, position_ids=(new_mask.cumsum(-1) - 1).clamp_min(0),
                               logits_to_keep=1, use_cache=True, **{cache_kw: new_cache}).logits[:, -1]
            if live:
                cache, mask = _merge_left_padded(cache, mask, new_cache, new_mask)
                pos, logits = torch.cat([pos, new_mask.sum(-1)]), torch.cat([logits, new_logits])
            else:
                cache, mask, pos, logits = new_cache, new_mask, new_mask.sum(-1), new_logits
            live += new
            segs = None
        tok = draw(probs(logits, sampling), generator)  # [rows]
        keep = []
        for i, t in enumerate(tok.tolist()):
            row = live[i]
            out[row].append(t)
            if t in eos_ids:
                ended[row] = True
            elif len(out[row]) < max_new_tokens:
                keep.append(i)
        if len(keep) < len(live):
            live = [live[i] for i in keep]
            if not live:
                continue
            sel = torch.tensor(keep, device=device)
            cache.batch_select_indices(sel)
            tok, mask, pos = tok[sel], mask[sel], pos[sel]
            cache, mask = _drop_leading_padding(cache, mask)
            segs = None
        if segmented and segs is None:  # rows joined or left: re-plan (columns added later are every row's)
            segs = plan_segments(mask.int().argmax(-1).tolist(), mask.shape[1] + 1)
        extra = {"kv_segments": segs} if segmented else {}
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], 1)
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos[:, None], use_cache=True,
                       **{cache_kw: cache}, **extra).logits[:, -1]
        pos = pos + 1
    return out, ended


def _left_pad_seq(x: torch.Tensor, length: int) -> torch.Tensor:
    """Zero-pad dim -2 (sequence) of a ``[B, H, T, D]`` cache tensor on the left to ``length``."""
    return x if x.shape[-2] == length else torch.nn.functional.pad(x, (0, 0, length - x.shape[-2], 0))


def _merge_left_padded(cache_a, mask_a, cache_b, mask_b):
    """Stack two left-padded batches (caches and masks) into one, padding the shorter on the left."""
    width = max(mask_a.shape[1], mask_b.shape[1])
    for la, lb in zip(cache_a.layers, cache_b.layers):
        la.keys = torch.cat([_left_pad_seq(la.keys, width), _left_pad_seq(lb.keys, width)])
        la.values = torch.cat([_left_pad_seq(la.values, width), _left_pad_seq(lb.values, width)])
    pad = torch.nn.functional.pad
    return cache_a, torch.cat([pad(mask_a, (width - mask_a.shape[1], 0)), pad(mask_b, (width - mask_b.shape[1], 0))])


def _drop_leading_padding(cache, mask):
    """Cut the leading columns that no remaining row attends to (left by rows that finished)."""
    lead = int(mask.any(0).long().argmax())
    if lead == 0:
        return cache, mask
    for layer in cache.layers:
        layer.drop_leading(lead)
    return cache, mask[:, lead:]
