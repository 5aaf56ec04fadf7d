"""The draft layer's rotary position embedding, as the engines build it from an exported config.

``rope_frequencies`` takes the head's ``rope_theta``/``rope_scaling`` (default, linear, llama3, yarn, dynamic) and
returns the inverse frequencies and the cos/sin scale (YaRN's ``mscale``) through transformers' own
``ROPE_INIT_FUNCTIONS``, so the head, transformers, vLLM's ``get_rope`` and SGLang compute the same rotation.

Usage::

    inv, scale = rope_frequencies(head_dim, theta, {"rope_type": "yarn", "factor": 32.0,
                                                    "original_max_position_embeddings": 4096})
    cos, sin = rope_cos_sin(positions, inv, torch.float32, scale)     # positions [B, T] -> [B, T, head_dim]
    q = apply_rope(q, cos, sin)                                        # q [B, heads, T, head_dim]
"""

from __future__ import annotations

import torch


def rope_frequencies(head_dim: int, rope_theta: float, rope_scaling: dict | None = None, *,
                     max_position_embeddings: int = 2048, device=None) -> tuple[torch.Tensor, float]:
    """``(inv_freq [head_dim // 2] float32, attention_scaling)`` of the draft layer's RoPE.

    Computed by transformers' own ``ROPE_INIT_FUNCTIONS`` (linear, llama3, yarn, dynamic) from a one-layer Llama
    config of the head's RoPE, the config an engine builds from the export; ``attention_scaling`` multiplies cos
    and sin (YaRN's ``mscale``; 1 otherwise). Dynamic NTK is taken at ``max_position_embeddings``, where it is
    plain RoPE: vLLM's ``DynamicNTKScalingRotaryEmbedding`` fixes its base there too, so both engines and
    transformers agree at every position below it (transformers rescales only past it, where vLLM stops).
    """
    kind = (rope_scaling or {}).get("rope_type", "default")
    if kind == "default":
        exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
        return 1.0 / (rope_theta ** exponent), 1.0
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind == "yarn":
        # The factor is explicit (vLLM reads it, not a ratio of context lengths); a max_position_embeddings that
        # matches it keeps transformers from warning about the implicit ratio. It changes nothing else in YaRN.
        max_position_embeddings = int(rope_scaling["factor"] * rope_scaling["original_max_position_embeddings"])
    params = {**rope_scaling, "rope_theta": float(rope_theta)}
    cfg = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim,
                      max_position_embeddings=max_position_embeddings, rope_parameters=params)
    inv, scaling = ROPE_INIT_FUNCTIONS[kind](cfg, device)
    return inv.float(), float(scaling)


def rope_inv_freq(head_dim: int, rope_theta: float, rope_scaling: dict | None = None, device=None,
                  max_position_embeddings: int = 2048) -> torch.Tensor:
    """Inverse frequencies ``[head_dim // 2]`` (float32) of :func:`rope_frequencies`, without the cos/sin scale."""
    return rope_frequencies(head_dim, rope_theta, rope_scaling, max_position_embeddings=max_position_embeddings,
                            device=device)[0]


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype,
                 scaling: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``[B, T, head_dim]`` for integer ``positions [B, T]`` (computed in float32), times
    ``scaling`` (the rope's attention scaling, as transformers and vLLM apply it)."""
    freqs = positions.float()[..., None] * inv_freq  # [B, T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    if scaling == 1.0:
        return emb.cos().to(dtype), emb.sin().to(dtype)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, heads, T, d]`` (rotate-half layout, as Llama)."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
