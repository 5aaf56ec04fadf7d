"""A KV cache that grows in place: ``DynamicCache`` without a full copy per decoding step.

``transformers``' ``DynamicLayer`` appends with ``torch.cat``, which copies the whole layer cache on
every forward: at batch 32 and a few hundred positions that copy costs more than the model's matmuls
(``BENCHMARKS.md``, "A KV cache that grows in place"). ``GrowingCache`` keeps each layer in a buffer
with spare positions, writes new entries into it and hands attention a view of the filled part;
the buffer is reallocated (1.5x) only when full. ``crop``, ``batch_select_indices`` and
``batch_repeat_interleave`` keep working; if other code replaces ``layer.keys`` / ``layer.values``,
the next ``update`` adopts the new tensors, so the cache never serves stale entries.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

MIN_GROWTH = 128  # positions added at least when a buffer is reallocated


def cache_keyword(model) -> str:
    """The keyword ``model.forward`` takes its KV cache under: ``cache`` since transformers 5.x renamed
    ``past_key_values`` (the old name warns until 5.40), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, ``[B, H, T, D]`` views of buffers with room to grow along ``T``."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._kbuf = self._vbuf = None  # [B, H, capacity, D]

    def _owned(self) -> bool:
        """Whether ``keys``/``values`` are still the views this layer handed out last."""
        return self._kbuf is not None and self.keys is self._kview and self.values is self._vview

    def _set_views(self, n: int) -> None:
        self._kview = self.keys = self._kbuf[..., :n, :]
        self._vview = self.values = self._vbuf[..., :n, :]

    def _rebuffer(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        """Copy ``keys``/``values`` into fresh buffers of ``capacity`` positions."""
        n = keys.shape[-2]
        shape = (*keys.shape[:-2], capacity, keys.shape[-1])
        self._kbuf = keys.new_empty(shape)
        self._vbuf = values.new_empty((*values.shape[:-2], capacity, values.shape[-1]))
        self._kbuf[..., :n, :].copy_(keys)
        self._vbuf[..., :n, :].copy_(values)
        self._set_views(n)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.get_seq_length(), key_states.shape[-2]
        batch_changed = self._kbuf is not None and self._kbuf.shape[0] != key_states.shape[0]
        if not self._owned() or batch_changed or n + t > self._kbuf.shape[-2]:
            old_k, old_v = (self.keys, self.values) if n else (key_states[..., :0, :], value_states[..., :0, :])
            self._rebuffer(old_k, old_v, max(n + t, n + max(MIN_GROWTH, n // 2)))
        self._kbuf[..., n:n + t, :].copy_(key_states)
        self._vbuf[..., n:n + t, :].copy_(value_states)
        self._set_views(n + t)
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative count of entries to drop from the end")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        if not self._owned():
            super().crop(tokens_to_remove)
            return
        self._set_views(max(self.get_seq_length() + tokens_to_remove, 0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() == 0 or not self._owned():
            super().batch_select_indices(indices)
            return
        n = self.get_seq_length()
        self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
        self._set_views(n)

    def drop_leading(self, count: int) -> None:
        """Forget the first ``count`` positions of every row (no copy: the views start later)."""
        if count == 0 or not self.is_initialized:
            return
        if not self._owned():
            self.keys, self.values = self.keys[..., count:, :], self.values[..., count:, :]
            return
        n = self.get_seq_length()
        self._kbuf, self._vbuf = self._kbuf[..., count:, :], self._vbuf[..., count:, :]
        self._set_views(n - count)


class GrowingCache(DynamicCache):
    """``DynamicCache`` whose full-attention layers are :class:`GrowingLayer`.

    ``full_length=True`` makes sliding-window layers :class:`GrowingLayer` too: they then keep every entry
    instead of transformers' ring of the last ``W - 1``, so a rollback (``crop``) is always possible, and
    the window must come from the attention mask (transformers' own sliding mask does it by slot while the
    cache has no holes; :mod:`eaglehead.decode.attention_layout` builds it by position otherwise). Other
    layer kinds keep transformers' own class."""

    def __init__(self, config=None, full_length: bool = False):
        super().__init__(config=config)
        grow = (DynamicLayer, DynamicSlidingWindowLayer) if full_length else (DynamicLayer,)
        self.layers = [GrowingLayer() if type(layer) in grow else layer for layer in self.layers]
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = GrowingLayer
