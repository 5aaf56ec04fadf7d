"""The target's attention on a CPU: grouped matmuls for a few half-precision queries, SDPA without kv copies.

Why. Two costs of transformers' ``sdpa`` attention on a CPU, both in every verification and decode step:

- PyTorch's CPU ``scaled_dot_product_attention`` is slow for a handful of queries in bfloat16/float16: over
  1024 cached keys one SmolLM2 layer's one-query attention takes 0.59 ms through it against 0.19 ms through
  three grouped matmuls, over 7168 keys 4.30 against 0.79 ms (BENCHMARKS.md, "Round cost against context
  length"), so a plain bfloat16 decode step at 4k tokens of context cost more than a verification of four tokens.
- With a mask and more than one query (every verification, a padded batch's every step) transformers calls
  ``repeat_kv`` on a grouped-query model: the whole cache is copied ``heads / kv_heads`` times in every layer,
  because its ``enable_gqa`` is kept for CUDA without a mask. On SmolLM2 (3:1) at batch 4 over 4096 keys, one
  layer's 4-query attention takes 30 ms that way against 3.3 ms with ``enable_gqa`` (BENCHMARKS.md, "The
  verification's kv copy"): a float32 chain round cost 1.2 s against a 165 ms plain step.

What. :data:`NAME` is a transformers attention implementation (registered with ``AttentionInterface`` and
with SDPA's own mask function, so the masks the model builds are SDPA's). :func:`few_query_attention` picks one
of three paths:

1. **grouped matmuls** (:func:`grouped_attention`, :func:`takes_grouped_path`): on a CPU in bfloat16 or
   float16, at most :data:`MAX_QUERIES` queries, with a mask (bool or additive float) or a single query, and
   no dropout, softcap, sinks or position bias. It computes what transformers' ``eager`` attention computes, in
   the same precision (scores as a half-precision matmul times the scale, the mask added, a float32 softmax cast
   back, a half-precision matmul with the values), reading each kv head once for its query heads. A fully
   masked row gets uniform weights (the mask is added as the dtype minimum, as ``eager`` does), not NaN.
2. **SDPA with enable_gqa** (:func:`takes_gqa_sdpa`): on a CPU, a masked call of more than one query on a
   grouped-query layer, without softcap, sinks or position bias: the same kernel call transformers makes, on
   the kv heads in place of their repeated copy (PyTorch's CPU kernels index the kv head per query head). The
   output is the same to the bit (tests/builtin/test_attention.py), so no figure's numerics change.
3. transformers' ``sdpa_attention_forward`` with the arguments as they came, for everything else (a prefill
   without a mask, one float32 query, which transformers already packs per kv head, softcap, sinks, dropout).

Use. :func:`use_few_query_attention` switches a model that runs ``sdpa`` on a CPU and leaves any other model as
it is; :func:`eaglehead.builtin.models.load_causal_lm` calls it, so every target eaglehead loads (decoding,
evaluation, data generation) gets it.
"""

from __future__ import annotations

import torch

NAME = "eaglehead_few_query_sdpa"
# Up to this many queries the grouped path runs: it beat CPU SDPA in bfloat16 at 8 to 64 queries over 256 to
# 7168 cached keys on SmolLM2's shape (BENCHMARKS.md, "The target's attention in bfloat16"), and its float32
# score matrix ([kv heads, groups x queries, keys]) stays small. Longer blocks (a prefill) take SDPA's flash kernel.
MAX_QUERIES = 64
# The dtypes the grouped path serves: half precision, where CPU SDPA is slow at a few queries. float32 keeps SDPA's
# kernel (with ``enable_gqa`` where transformers would copy the kv heads): its numerics are the ones every float32
# figure was measured on, and at 4 to 8 queries the two cost about the same; ``bench_context --grouped-float32``
# measures the grouped alternative.
DTYPES = (torch.bfloat16, torch.float16)


def takes_grouped_path(query: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
                       **kwargs) -> bool:
    """Whether :func:`few_query_attention` computes this call itself (else it hands it to SDPA)."""
    if query.device.type != "cpu" or query.dtype not in DTYPES or not 1 <= query.shape[2] <= MAX_QUERIES:
        return False
    if dropout or kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        return False
    if kwargs.get("position_bias") is not None:
        return False
    return attention_mask is not None or query.shape[2] == 1


def takes_gqa_sdpa(module, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
                   **kwargs) -> bool:
    """Whether :func:`few_query_attention` calls SDPA with ``enable_gqa`` itself, where transformers' ``sdpa``
    would copy the kv heads (a masked call of several queries on a grouped-query layer, on a CPU)."""
    if query.device.type != "cpu" or attention_mask is None or query.shape[2] < 2:
        return False
    if getattr(module, "num_key_value_groups", 1) <= 1 or query.shape[1] == key.shape[1]:
        return False
    return all(kwargs.get(name) is None for name in ("softcap", "s_aux", "position_bias"))


def gqa_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor,
             dropout: float = 0.0, scaling: float | None = None) -> torch.Tensor:
    """transformers' masked SDPA call (``is_causal`` off: the mask holds the causal part) with ``enable_gqa``
    instead of ``repeat_kv``; ``[B, Tq, heads, d]`` as its attention functions return."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=False,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous()


def grouped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None) -> torch.Tensor:
    """Attention ``[B, Tq, heads, d]`` (transformers' attention-function layout) of ``query [B, heads, Tq, d]``
    over ``key, value [B, kv_heads, Tk, d]`` (query head ``j`` reads kv head ``j // (heads // kv_heads)``).
    ``attention_mask`` bool (True = attend) or additive float, broadcastable to ``[B, heads, Tq, Tk]``."""
    b, heads, tq, d = query.shape
    kv_heads, tk = key.shape[1], key.shape[2]
    if heads % kv_heads:
        raise ValueError(f"query has {heads} heads, key {kv_heads}: expected a multiple")
    groups = heads // kv_heads
    scale = d ** -0.5 if scaling is None else scaling
    q = query.reshape(b, kv_heads, groups * tq, d)  # the groups of one kv head share its keys: one matmul
    scores = (torch.matmul(q, key.transpose(-1, -2)) * scale).view(b, kv_heads, groups, tq, tk).float()
    if attention_mask is not None:
        mask = attention_mask
        if mask.dim() != 4:
            raise ValueError(f"attention_mask has shape {tuple(mask.shape)}; expected 4 dims [B, heads|1, Tq, Tk]")
        # [B|1, heads|1, Tq, Tk] -> [B|1, kv_heads|1, groups|1, Tq, Tk], broadcast against the scores
        if mask.shape[1] == heads:
            mask = mask.reshape(mask.shape[0], kv_heads, groups, *mask.shape[2:])
        else:
            mask = mask[:, :, None]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
        else:
            scores = scores + mask.float()
    weights = torch.softmax(scores, dim=-1).to(query.dtype).view(b, kv_heads, groups * tq, tk)
    out = torch.matmul(weights, value)  # [B, kv_heads, groups * Tq, d]
    return out.view(b, heads, tq, -1).transpose(1, 2).contiguous()


def few_query_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                        scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """A transformers attention function: :func:`grouped_attention` where :func:`takes_grouped_path`,
    :func:`gqa_sdpa` where :func:`takes_gqa_sdpa`, else transformers' ``sdpa_attention_forward`` with the
    arguments as they came."""
    if takes_grouped_path(query, attention_mask, dropout, **kwargs):
        return grouped_attention(query, key, value, attention_mask, scaling), None
    if takes_gqa_sdpa(module, query, key, attention_mask, **kwargs):
        return gqa_sdpa(query, key, value, attention_mask, dropout, scaling), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def register() -> None:
    """Register :data:`NAME` with transformers (once): the attention function and SDPA's mask function."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(NAME, few_query_attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)


def wants_few_query_attention(model) -> bool:
    """Whether ``model`` runs transformers' ``sdpa`` attention on a CPU (any dtype: float32 takes the
    ``enable_gqa`` path, half precision both)."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    return param.device.type == "cpu"


def use_few_query_attention(model):
    """Switch ``model`` to :data:`NAME` where :func:`wants_few_query_attention`; return the model. A model
    transformers will not switch (its class refuses a custom attention) keeps ``sdpa``."""
    if not wants_few_query_attention(model):
        return model
    register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, KeyError, AttributeError):
        pass
    return model
