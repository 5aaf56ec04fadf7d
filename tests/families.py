"""Tiny seeded causal LMs of every target family the toolkit claims, built from transformers' own classes.

One place names the families and their layouts, so the decoding tests (``tests/decode``) and the training and
export tests (``tests/draftheads``, ``tests/train``) cover the same set. Shapes are small enough for a 2-core
CPU (hidden 64, 4 layers) and the sliding window is short (``WINDOW``) so that a few dozen tokens pass it:
the window binds in every test that decodes past it.

    model = tiny_family("gemma3", seed=0)      # an eval()-mode model in float32
    FAMILIES                                   # every name tiny_family accepts
"""

from __future__ import annotations

import torch
import transformers

WINDOW = 8  # sliding window of the families that have one (Mistral binding, Gemma 2/3, GPT-OSS, Qwen2/3 sliding)
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 256, 64, 4, 4, 2, 16
MAX_POSITIONS = 512


def _common() -> dict:
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POSITIONS,
                bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def _alternating(n: int = LAYERS) -> list[str]:
    """Sliding, full, sliding, full, ...: every family with two layer types gets both in 4 layers."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


# name -> (config class, model class, extra config kwargs). Extra kwargs override the common ones.
_SPECS: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama-yarn": ("LlamaConfig", "LlamaForCausalLM",
                   {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                        "original_max_position_embeddings": 128}}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen2-sliding": ("Qwen2Config", "Qwen2ForCausalLM",
                      {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 2,
                       "layer_types": ["full_attention", "full_attention", "sliding_attention", "sliding_attention"]}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": HEAD_DIM}),
    "qwen3-moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  {"head_dim": HEAD_DIM, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                   "decoder_sparse_step": 1, "norm_topk_prob": True}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": WINDOW, "head_dim": HEAD_DIM}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None, "head_dim": HEAD_DIM}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"head_dim": HEAD_DIM, "sliding_window": WINDOW, "layer_types": _alternating(),
                "query_pre_attn_scalar": HEAD_DIM, "tie_word_embeddings": True}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"head_dim": HEAD_DIM, "sliding_window": WINDOW, "layer_types": _alternating(),
                "query_pre_attn_scalar": HEAD_DIM, "tie_word_embeddings": True}),
    "gpt-oss": ("GptOssConfig", "GptOssForCausalLM",
                {"head_dim": HEAD_DIM, "sliding_window": WINDOW, "layer_types": _alternating(),
                 "num_local_experts": 4, "num_experts_per_tok": 2,
                 "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 150000.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "original_max_position_embeddings": 128,
                                     "truncate": False}}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"partial_rotary_factor": 0.5}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "granite": ("GraniteConfig", "GraniteForCausalLM",
                {"embedding_multiplier": 2.0, "residual_multiplier": 0.5, "attention_multiplier": 0.25,
                 "logits_scaling": 2.0}),
}

FAMILIES: tuple[str, ...] = tuple(_SPECS)
# The families whose attention has a sliding window that binds within WINDOW tokens.
SLIDING_FAMILIES: tuple[str, ...] = ("qwen2-sliding", "mistral", "gemma2", "gemma3", "gpt-oss")


def family_config(name: str, **overrides):
    """The config of family ``name`` (see ``FAMILIES``), with ``overrides`` applied last."""
    if name not in _SPECS:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    cfg_cls, _, extra = _SPECS[name]
    kwargs = {**_common(), **extra, **overrides}
    return getattr(transformers, cfg_cls)(**kwargs)


def tiny_family(name: str, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """A seeded, randomly initialised ``eval()``-mode model of family ``name``.

    Norm weights are perturbed away from their initial constant so that a norm applied as ``w`` where the
    family means ``1 + w`` (Gemma) or skipped altogether changes the logits.
    """
    cfg = family_config(name, **overrides)
    _, model_cls, _ = _SPECS[name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname and p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif "sinks" in pname:
                p.copy_(torch.randn_like(p))
    return model.to(dtype).eval()
