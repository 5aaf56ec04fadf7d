"""A Hugging Face causal LM with a KV cache whose rows may hold different numbers of valid tokens.

Convention: with ``L`` committed tokens, the target cache holds the first
``L - 1``; the last committed token is pending and is fed first in the next call. Rows of a batch
accept different numbers of drafts, but ``crop`` (of transformers' ``DynamicCache``, and of the
``GrowingCache`` used here, which appends in place instead of copying the cache every step) drops
the same count from every row. So the cache is kept *physically* aligned across rows and each row carries a validity mask:
rejected entries become holes (mask 0) that attention never sees, and every fed token gets an
explicit position id equal to the number of valid tokens before it, so RoPE positions stay right.
With batch 1 there are never holes: the physical crop is exactly the seed's ``crop(L + A)``.

Sliding-window targets (Mistral, Gemma 2/3, GPT-OSS, Qwen2/3 with sliding layers): every layer's cache is
kept full length, so rollback is always possible, and the window is applied by the mask
(:mod:`.attention_layout`): while there are no holes transformers' own sliding mask is exact (slot = position)
and ``None`` is passed as for full-attention targets; with holes the 4D masks are built here, by position.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from eaglehead.builtin.kvcache import GrowingCache, GrowingLayer, cache_keyword
from eaglehead.draftheads.taps import FeatureTaps

from .attention_layout import AttentionLayout, check_maskable, slot_positions


@dataclass
class ForwardOut:
    logits: torch.Tensor  # [B, T, V] (T = 1 when only the last row was asked for)
    features: torch.Tensor | None = None  # [B, T, k * H] fused tapped hidden states, if tapped


# A padded prompt block of at least this many positions on an empty cache is fed one row at a time
# (RaggedCacheLM._prefill_by_row); shorter blocks go in one masked call.
BY_ROW_MIN_TOKENS = 256


def _right_aligned(rows: list[torch.Tensor], t: int) -> torch.Tensor:
    """``[B, t, ...]`` from per-row ``[1, n_b, ...]`` tensors, each row's entries at the end, zeros before."""
    out = rows[0].new_zeros(len(rows), t, *rows[0].shape[2:])
    for b, r in enumerate(rows):
        out[b, t - r.shape[1]:] = r[0]
    return out


class RaggedCacheLM:
    """Feeds tokens to ``model`` through a per-row masked KV cache.

    ``valid [B, P]`` marks which of the ``P`` physical cache entries belong to each row;
    ``lengths [B]`` counts them (the logical cache length, i.e. the next position id). While the
    cache has no holes (no padding, every row accepted the same count: always so at batch 1) neither
    is stored: every row's length is ``P``, position ids are one ``arange`` and no mask is built or
    grown per step. They are materialised at the first hole.
    """

    def __init__(self, model: nn.Module, feature_layer_ids: list[int] | None = None):
        self.model = model
        self.taps = FeatureTaps(model, feature_layer_ids) if feature_layer_ids else None
        params = inspect.signature(model.forward).parameters
        self._cache_kw = cache_keyword(model)
        self._has_logits_to_keep = "logits_to_keep" in params
        self.layout = AttentionLayout.of(model)
        if self.layout.sliding:  # holes on a sliding target need the 4D masks: refuse now, not mid-answer
            check_maskable(model, "decoding a sliding-window target with a rollback-able cache")
        self.cache: GrowingCache | None = None
        self._valid: torch.Tensor | None = None  # None: no holes, every row holds all P entries
        self._lengths: torch.Tensor | None = None
        self._physical = 0
        self._bsz = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def physical_length(self) -> int:
        return self._physical

    @property
    def valid(self) -> torch.Tensor | None:
        if self.cache is None:
            return None
        if self._valid is None:
            return torch.ones(self._bsz, self._physical, dtype=torch.bool, device=self.device)
        return self._valid

    @property
    def lengths(self) -> torch.Tensor | None:
        if self.cache is None:
            return None
        if self._valid is None:
            return torch.full((self._bsz,), self._physical, dtype=torch.long, device=self.device)
        return self._lengths

    def reset(self, batch_size: int) -> None:
        self.cache = GrowingCache(config=self.model.config, full_length=True)
        self._valid, self._lengths = None, None
        self._physical, self._bsz = 0, batch_size

    def _make_holes_possible(self) -> None:
        """Materialise ``valid`` and ``lengths`` (all entries valid so far)."""
        if self._valid is None:
            self._valid, self._lengths = self.valid, self.lengths

    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        new_valid: torch.Tensor | None = None,
        *,
        last_only: bool = False,
        want_features: bool = False,
    ) -> ForwardOut:
        """Append ``tokens [B, T]`` to the cache and return their logits (and tapped features).

        ``new_valid [B, T]`` marks padding (False) among the new tokens: a padded entry is a hole.
        """
        if self.cache is None:
            raise RuntimeError("call reset(batch_size) before forward")
        bsz, t = tokens.shape
        if new_valid is not None and self._valid is None and bool(new_valid.all()):
            new_valid = None  # no padding (a one-off sync per prompt): stay on the hole-free path
        if new_valid is not None and self._by_row(new_valid):
            return self._prefill_by_row(tokens, new_valid, last_only, want_features)
        if new_valid is None and self._valid is None:
            positions = torch.arange(self._physical, self._physical + t, device=tokens.device).expand(bsz, t)
            # All ones: pass None so attention can use its causal fast path (on sliding layers transformers'
            # own window mask, by slot, is exact while slot = position)
            mask = None
        else:
            self._make_holes_possible()
            if new_valid is None:
                new_valid = torch.ones(bsz, t, dtype=torch.bool, device=tokens.device)
            # Position of each new token = valid tokens before it in its row (holes do not count).
            positions = (self._lengths[:, None] + new_valid.long().cumsum(-1) - 1).clamp_min(0)
            if self.layout.sliding:  # the window by position, not slot: build the 4D mask(s) here
                causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
                mask = self.layout.masks(self._valid, positions, causal & new_valid[:, None, :],
                                         self._dtype(), slot_positions(self._valid))
            self._valid = torch.cat([self._valid, new_valid], dim=1)
            self._lengths = self._lengths + new_valid.long().sum(-1)
            if not self.layout.sliding:
                mask = self._valid.long()
        kwargs = {
            "input_ids": tokens,
            "position_ids": positions,
            "attention_mask": mask,
            self._cache_kw: self.cache,
            "use_cache": True,
        }
        if self._skips_logits(last_only, want_features):
            kwargs["logits_to_keep"] = 1
        out, features = self._call(kwargs, want_features)
        self._physical += t
        logits = out.logits
        if last_only:
            logits = logits[:, -1:]
        return ForwardOut(logits=logits, features=features)

    def _skips_logits(self, last_only: bool, want_features: bool) -> bool:
        """Whether the LM head runs on the last row only (``logits_to_keep=1``): when only it is asked for, unless
        the features are read at the LM head's input (a tapped layer id L)."""
        tapped_final = want_features and self.taps is not None and self.taps.reads_lm_head_input
        return last_only and self._has_logits_to_keep and not tapped_final

    def _by_row(self, new_valid: torch.Tensor) -> bool:
        """Whether a padded block goes in one row at a time (:meth:`_prefill_by_row`): the first block on an empty
        cache, of at least :data:`BY_ROW_MIN_TOKENS` positions, every row left-padded and non-empty, every cache
        layer one that :meth:`_prefill_by_row` can fill."""
        bsz, t = new_valid.shape
        if self._physical or self._valid is not None or bsz < 2 or t < BY_ROW_MIN_TOKENS:
            return False
        if not all(type(layer) is GrowingLayer for layer in self.cache.layers) or not self.cache.layers:
            return False
        lengths = new_valid.long().sum(-1)
        suffix = torch.arange(t, device=new_valid.device)[None, :] >= (t - lengths)[:, None]
        return bool(lengths.min() > 0) and bool(torch.equal(suffix, new_valid))

    def _prefill_by_row(self, tokens: torch.Tensor, new_valid: torch.Tensor, last_only: bool,
                        want_features: bool) -> ForwardOut:
        """A left-padded prompt block on an empty cache, one row at a time without its padding.

        Each row is an unmasked batch-1 forward (SDPA's causal kernel: about half the attention work of the
        masked batched call, and none on padding), computed exactly as that row alone at batch 1 is. Its keys
        and values go right-aligned into the batch's cache, zeros in the padding slots, which become holes (the
        mask never shows them); logits and features are laid out as the batched call returns them (zeros on
        padding). A batch of 4 left-padded 4k prompts: BENCHMARKS.md, "The verification's kv copy"."""
        bsz, t = tokens.shape
        counts = new_valid.long().sum(-1)
        lengths = counts.tolist()
        rows = []
        for b, n in enumerate(lengths):
            cache = GrowingCache(config=self.model.config, full_length=True)
            kwargs = {"input_ids": tokens[b:b + 1, t - n:], "attention_mask": None, self._cache_kw: cache,
                      "position_ids": torch.arange(n, device=tokens.device)[None], "use_cache": True}
            if self._skips_logits(last_only, want_features):
                kwargs["logits_to_keep"] = 1
            out, features = self._call(kwargs, want_features)
            rows.append((cache, out.logits[:, -1:] if last_only else out.logits, features))
        for i, layer in enumerate(rows[0][0].layers):
            k, v = layer.keys, layer.values
            keys = k.new_zeros(bsz, k.shape[1], t, k.shape[-1])
            values = v.new_zeros(bsz, v.shape[1], t, v.shape[-1])
            for b, (n, (cache, _, _)) in enumerate(zip(lengths, rows)):
                keys[b, :, t - n:] = cache.layers[i].keys[0]
                values[b, :, t - n:] = cache.layers[i].values[0]
            self.cache.update(keys, values, i)
        self._valid, self._lengths = new_valid.clone(), counts
        self._physical = t
        logits = torch.cat([r[1] for r in rows]) if last_only else _right_aligned([r[1] for r in rows], t)
        features = _right_aligned([r[2] for r in rows], t) if rows[0][2] is not None else None
        return ForwardOut(logits=logits, features=features)

    def _dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def _call(self, kwargs: dict, want_features: bool):
        """One forward of the model with ``kwargs``: ``(its output, the fused tapped features or None)``."""
        if want_features and self.taps is not None:
            with self.taps.capture() as cap:
                out = self.model(**kwargs)
            return out, cap.fused()
        return self.model(**kwargs), None

    def keep_recent(self, n_recent: int, n_keep: list[int]) -> None:
        """Among the last ``n_recent`` physical entries, keep the first ``n_keep[b]`` of row ``b``.

        ``n_keep`` is a host list: the caller has already paid its one host sync for it. The cache
        is cropped physically to the longest kept row; shorter rows get holes.
        """
        if n_recent == 0 or min(n_keep) == n_recent:
            return  # nothing dropped: no crop, no mask update
        longest = max(n_keep)
        if min(n_keep) != longest:
            self._make_holes_possible()  # rows kept different counts: the shorter ones get holes
        if longest < n_recent:
            self.cache.crop(longest - n_recent)  # transformers 5: crop(-n) drops n entries from the end
        start = self._physical - n_recent
        self._physical = start + longest
        if self._valid is None:
            return  # every row kept the same count: still no holes
        keep = torch.tensor(n_keep, device=self._valid.device)
        old = self._valid[:, start:]  # [B, n_recent]
        kept = old & (torch.arange(n_recent, device=old.device)[None, :] < keep[:, None])
        self._lengths = self._lengths - (old & ~kept).long().sum(-1)
        self._valid = torch.cat([self._valid[:, :start], kept[:, :longest]], dim=1)
