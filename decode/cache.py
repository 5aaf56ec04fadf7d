"""A Hugging Face causal LM with a KV cache whose rows may hold different numbers of valid tokens.

Convention: with ``L`` committed tokens, the target cache holds the first
``L - 1``; the last committed token is pending and is fed first in the next call. Rows of a batch
accept different numbers of drafts, but ``DynamicCache.crop`` drops the same count from every row.
So the cache is kept *physically* aligned across rows and each row carries a validity mask:
rejected entries become holes (mask 0) that attention never sees, and every fed token gets an
explicit position id equal to the number of valid tokens before it, so RoPE positions stay right.
With batch 1 there are never holes: the physical crop is exactly the seed's ``crop(L + A)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from eaglehead.draftheads.taps import FeatureTaps


@dataclass
class ForwardOut:
    logits: torch.Tensor  # [B, T, V] (T = 1 when only the last row was asked for)
    features: torch.Tensor | None = None  # [B, T, k * H] fused tapped hidden states, if tapped


class RaggedCacheLM:
    """Feeds tokens to ``model`` through a per-row masked KV cache.

    ``valid [B, P]`` marks which of the ``P`` physical cache entries belong to each row;
    ``lengths [B]`` counts them (the logical cache length, i.e. the next position id).
    """

    def __init__(self, model: nn.Module, feature_layer_ids: list[int] | None = None):
        self.model = model
        self.taps = FeatureTaps(model, feature_layer_ids) if feature_layer_ids else None
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        self.cache: DynamicCache | None = None
        self.valid: torch.Tensor | None = None
        self.lengths: torch.Tensor | None = None
        self._has_holes = False

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def physical_length(self) -> int:
        return 0 if self.valid is None else self.valid.shape[1]

    def reset(self, batch_size: int) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._has_holes = False

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
        all_new_valid = new_valid is None
        if all_new_valid:
            new_valid = torch.ones(bsz, t, dtype=torch.bool, device=tokens.device)
        # Position of each new token = valid tokens before it in its row (holes do not count).
        positions = self.lengths[:, None] + new_valid.long().cumsum(-1) - 1
        positions = positions.clamp_min(0)
        valid = torch.cat([self.valid, new_valid], dim=1)
        holes = self._has_holes or (not all_new_valid and not bool(new_valid.all()))
        kwargs = {
            "input_ids": tokens,
            "position_ids": positions,
            # Without holes the mask is all ones: pass None so attention can use its causal fast path.
            "attention_mask": valid.long() if holes else None,
            self._cache_kw: self.cache,
            "use_cache": True,
        }
        if last_only and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        if want_features and self.taps is not None:
            with self.taps.capture() as cap:
                out = self.model(**kwargs)
            features = cap.fused()
        else:
            out = self.model(**kwargs)
            features = None
        self.valid = valid
        self.lengths = self.lengths + new_valid.long().sum(-1)
        self._has_holes = holes
        logits = out.logits
        if last_only:
            logits = logits[:, -1:]
        return ForwardOut(logits=logits, features=features)

    def keep_recent(self, n_recent: int, n_keep: list[int]) -> None:
        """Among the last ``n_recent`` physical entries, keep the first ``n_keep[b]`` of row ``b``.

        ``n_keep`` is a host list: the caller has already paid its one host sync for it. The cache
        is cropped physically to the longest kept row; shorter rows get holes.
        """
        if n_recent == 0 or min(n_keep) == n_recent:
            return  # nothing dropped: no crop, no mask update
        p = self.physical_length
        start = p - n_recent
        longest = max(n_keep)
        if longest < n_recent:
            self.cache.crop(longest - n_recent)  # transformers 5: crop(-n) drops n entries from the end
        keep = torch.tensor(n_keep, device=self.valid.device)
        old = self.valid[:, start:]  # [B, n_recent]
        kept = old & (torch.arange(n_recent, device=old.device)[None, :] < keep[:, None])
        self.lengths = self.lengths - (old & ~kept).long().sum(-1)
        self.valid = torch.cat([self.valid[:, :start], kept[:, :longest]], dim=1)
        if min(n_keep) != longest:
            self._has_holes = True
