"""The target's attention on a CPU in half precision: grouped matmuls for a few queries, SDPA otherwise.

Why. PyTorch's CPU ``scaled_dot_product_attention`` is slow for a handful of queries in bfloat16/float16: over
1024 cached keys one SmolLM2 layer's one-query attention takes 0.59 ms through it against 0.19 ms through
three grouped matmuls, over 7168 keys 4.30 against 0.79 ms (BENCHMARKS.md, "Round cost against context
length"). transformers' ``sdpa`` attention calls that kernel for every decode step and every verification,
so a plain bfloat16 decode step at 4k tokens of context cost more than a verification of four tokens; every
bfloat16 speedup measured against it was inflated.

What. :data:`NAME` is a transformers attention implementation (registered with ``AttentionInterface`` and
with SDPA's own mask function, so the masks the model builds are SDPA's). :func:`few_query_attention` takes
the grouped path when all of these hold, and otherwise calls transformers' ``sdpa_attention_forward`` with the
same arguments:

- the tensors are on a CPU in bfloat16 or float16, with at most :data:`MAX_QUERIES` queries;
- there is a mask (bool or additive float), or a single query (a single query needs no causal mask);
- no dropout, softcap, sinks or position bias (each of those goes to SDPA, which applies or refuses it).

The grouped path computes what transformers' ``eager`` attention computes, in the same precision (scores as a
half-precision matmul times the scale, the mask added, a float32 softmax cast back, a half-precision matmul
with the values), but reads each kv head once for its ``heads / kv_heads`` query heads instead of repeating
it. A fully masked row gets uniform weights (the mask is added as the dtype minimum, as ``eager`` does), not
NaN.

Use. :func:`use_few_query_attention` switches a model that runs ``sdpa`` on a CPU in half precision and leaves
any other model as it is; :func:`eaglehead.builtin.models.load_causal_lm` calls it, so every target eaglehead
loads (decoding, evaluation, data generation) gets it.
"""

from __future__ import annotations

import torch

NAME = "eaglehead_few_query_sdpa"
# Up to this many queries the grouped path runs: it beat CPU SDPA in bfloat16 at 8 to 64 queries over 256 to
# 7168 cached keys on SmolLM2's shape (BENCHMARKS.md, "The target's attention in bfloat16"), and its float32
# score matrix ([kv heads, groups x queries, keys]) stays small. Longer blocks (a prefill) take SDPA's flash kernel.
MAX_QUERIES = 64
# The dtypes the grouped path serves: half precision, where CPU SDPA is slow at a few queries. float32 keeps SDPA
# (every float32 figure in the README was measured on it); ``bench_context --grouped-float32`` measures the
# alternative.
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
    """A transformers attention function: :func:`grouped_attention` where :func:`takes_grouped_path`, else
    transformers' ``sdpa_attention_forward`` with the arguments as they came."""
    if takes_grouped_path(query, attention_mask, dropout, **kwargs):
        return grouped_attention(query, key, value, attention_mask, scaling), None
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
    """Whether ``model`` runs transformers' ``sdpa`` attention on a CPU in half precision."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    return param.device.type == "cpu" and param.dtype in DTYPES


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
