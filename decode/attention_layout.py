"""Which attention each target layer runs, and the 4D masks that make a ragged or tree forward exact on it.

Why this module exists. Speculative decoding rolls the target's cache back after a rejection, leaves holes
in it (rows of a batch accept different counts, :mod:`.cache`) and verifies trees whose nodes sit at
their depth's position, not at their cache slot. transformers 5.25 gets none of that right by itself on a
sliding-window layer:

- ``DynamicCache(config=...)`` gives a sliding layer a ring of the last ``W - 1`` entries; ``crop`` past the
  window raises. So the caches here keep every layer full length (``GrowingCache(full_length=True)``):
  rollback is always a view change, and the window is applied by the mask alone.
- ``masking_utils`` applies the window by *slot* index (``kv_idx > q_idx - W``, ``sliding_window_overlay``),
  which equals the logical position only while the cache has no holes; and a custom 4D mask is passed to
  every layer as it is, with no window on top. So with holes or a tree, this module builds the masks: key
  ``j`` is visible to query ``i`` iff ``j`` is a valid past entry or an ancestor-or-self of ``i`` in the new
  block, and, on a sliding layer, ``pos_i - pos_j < W`` with ``pos`` the RoPE position id (holes do not
  count; a tree node sits at its row's length + its depth). That is transformers' own inequality, by
  position instead of slot.
- Models with several layer types (Gemma 2/3, GPT-OSS, Qwen2/3 with ``layer_types``) take a dict
  ``{"full_attention": m, "sliding_attention": m}``; single-type models (Mistral, Mixtral, Phi-3 with a
  window) take one tensor used by every layer.
- ``eager`` *adds* the mask, so the masks are additive floats (0 / dtype minimum), never boolean. Every query
  sees at least itself, so no row is fully masked (a fully masked row gives NaN in some kernels).

Flash-attention variants cannot take a 4D mask and flex is not verified here (and cannot apply GPT-OSS's sinks
on CPU): :func:`check_maskable` refuses them by name before decoding starts. GPT-OSS's sinks are applied by
its ``eager`` kernel after the mask is added, so a custom mask keeps them; its ``sdpa`` path would drop them
(transformers marks the model ``_supports_sdpa = False``), which is refused too.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import nn

from eaglehead.builtin.attention import NAME as FEW_QUERY

FULL, SLIDING = "full_attention", "sliding_attention"
# attention implementations that take an additive 4D mask as it is (the third: builtin.attention, SDPA's
# semantics with grouped matmuls for a few queries on a CPU in half precision)
MASKABLE = ("eager", "sdpa", FEW_QUERY)


def slot_positions(valid: torch.Tensor) -> torch.Tensor:
    """The position id of each physical cache slot ``[B, K]`` of ``valid [B, K]``: valid entries before it
    (holes hold any value: the mask hides them)."""
    return valid.long().cumsum(-1) - 1


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``allowed [B, Q, K]`` bool -> the additive mask ``[B, 1, Q, K]`` (0 = attend, dtype minimum = masked)."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@dataclass(frozen=True)
class AttentionLayout:
    """The attention type of every decoder layer of a target and its sliding window.

    ``layer_types`` as transformers names them (``full_attention`` / ``sliding_attention``); ``window`` the
    sliding window ``W`` (None when no layer slides); ``takes_dict`` whether the model reads a per-layer-type
    dict of masks (needed when both types occur)."""

    layer_types: tuple[str, ...]
    window: int | None
    takes_dict: bool

    @property
    def sliding(self) -> bool:
        return SLIDING in self.layer_types

    @classmethod
    def of(cls, model: nn.Module) -> AttentionLayout:
        """Read the layout from ``model.config`` (the text config of a composite model); raise on a layer
        type no mask here can express (chunked, linear, ...)."""
        cfg = model.config.get_text_config(decoder=True)
        window = getattr(cfg, "sliding_window", None)
        n = getattr(cfg, "num_hidden_layers", None) or 0
        types = getattr(cfg, "layer_types", None)
        if types is None:  # transformers' own inference (cache_utils.get_layer_types_and_kwargs)
            types = [SLIDING if window is not None else FULL] * n
        unknown = sorted(set(types) - {FULL, SLIDING})
        if unknown:
            raise ValueError(f"target layer_types {unknown} are not supported by exact decoding (supported: "
                             f"{FULL!r}, {SLIDING!r})")
        if SLIDING in types and (not isinstance(window, int) or window < 1):
            raise ValueError(f"target has sliding_attention layers but config.sliding_window is {window!r}; "
                             "expected a positive integer")
        takes_dict = _reads_mask_mapping(model)
        if SLIDING in types and FULL in types and not takes_dict:
            raise ValueError(f"{type(model).__name__} mixes full and sliding layers but does not read a "
                             "per-layer-type mask dict: exact decoding cannot mask it")
        return cls(tuple(types), window if SLIDING in types else None, takes_dict)

    def masks(self, past_valid: torch.Tensor, new_pos: torch.Tensor, block_ok: torch.Tensor, dtype: torch.dtype,
              past_pos: torch.Tensor | None = None):
        """The attention mask(s) for ``T`` new tokens appended after ``K`` cached slots.

        ``past_valid [B, K]`` bool (holes False); ``new_pos [B, T]`` the new tokens' position ids;
        ``block_ok [B, T, T]`` which new token sees which (causal, or ancestor-or-self in a tree);
        ``past_pos [B, K]`` the cached slots' positions (default: :func:`slot_positions`). Returns an additive
        ``[B, 1, T, K+T]`` tensor when every layer has one type, else the per-type dict.
        """
        bsz, t = new_pos.shape
        k = past_valid.shape[1]
        idx = torch.arange(t, device=new_pos.device)
        block_ok = block_ok | (idx[:, None] == idx[None, :])  # every query sees itself: no fully masked row
        seen = torch.cat([past_valid[:, None, :].expand(bsz, t, k), block_ok], 2)  # [B, T, K+T]
        if not self.sliding:
            return additive(seen, dtype)
        if past_pos is None:
            past_pos = slot_positions(past_valid)
        key_pos = torch.cat([past_pos, new_pos], 1)  # [B, K+T]
        near = (new_pos[:, :, None] - key_pos[:, None, :]) < self.window  # masking_utils' kv > q - W, by position
        sliding = additive(seen & near, dtype)
        if FULL not in self.layer_types:
            return sliding
        return {FULL: additive(seen, dtype), SLIDING: sliding}


def _reads_mask_mapping(model: nn.Module) -> bool:
    """Whether the model's decoder stack reads a per-layer-type mask dict (transformers' ``causal_mask_mapping``
    idiom: ``if not isinstance(causal_mask_mapping := attention_mask, dict)``)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else model
    return _forward_reads_mask_mapping(type(base))


@functools.lru_cache(maxsize=None)
def _forward_reads_mask_mapping(cls: type) -> bool:
    """Per class, once: reading the source costs milliseconds, and a runner is built per generate call."""
    try:
        return "causal_mask_mapping" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def check_maskable(model: nn.Module, why: str) -> None:
    """Refuse, by name, an attention implementation that cannot take the additive 4D masks ``why`` needs."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in MASKABLE:
        raise ValueError(f"attn_implementation {impl!r} cannot take the 4D attention mask that {why} needs; "
                         f"load the target with attn_implementation in {MASKABLE}")
    if impl == "sdpa" and getattr(model, "_supports_sdpa", True) is False:
        raise ValueError(f"attn_implementation 'sdpa' is not supported by {type(model).__name__} (its sdpa path "
                         "would drop parts of its attention, e.g. GPT-OSS's sinks); load it with 'eager'")
