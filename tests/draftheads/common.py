"""Tiny seeded draft heads and target models shared by the draft-head tests."""

from __future__ import annotations

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from eaglehead.draftheads import Eagle3Config, Eagle3Head, build_draft_vocab

VOCAB = 96


def tiny_config(**overrides) -> Eagle3Config:
    fields = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  target_vocab_size=VOCAB, draft_vocab_size=40, fused_layer_ids=[1, 2, 3],
                  target_num_hidden_layers=4, rope_theta=10000.0, target_name_or_path="tiny/target")
    fields.update(overrides)
    return Eagle3Config(**fields)


def randomise(head: Eagle3Head, seed: int = 0) -> Eagle3Head:
    """Random weights everywhere (norm gains too, so a swapped norm would show) and a random draft vocab.
    A norm gain (``*norm.weight``, and EAGLE 3.1's ``fc_norm.{i}.weight``) is drawn around 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            gain = name.endswith("norm.weight") or name.startswith("fc_norm.")
            p.copy_(1.0 + 0.2 * noise if gain else 0.2 * noise)
        cfg = head.config
        counts = torch.randint(0, 50, (cfg.target_vocab_size,), generator=gen)
        head.set_vocab(*build_draft_vocab(counts, cfg.draft_vocab_size))
    return head


def tiny_head(seed: int = 0, cls=Eagle3Head, **overrides) -> Eagle3Head:
    head = randomise(cls(tiny_config(**overrides)), seed)
    torch.manual_seed(seed + 1)
    head.bind_embedding(torch.nn.Embedding(head.config.target_vocab_size, head.config.hidden_size))
    return head


def tiny_targets(layers: int = 4) -> dict[str, torch.nn.Module]:
    """One tiny causal LM per supported family, seeded and built locally."""
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                  vocab_size=VOCAB, max_position_embeddings=128)
    builders = {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**common, num_key_value_heads=2)),
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**common, num_key_value_heads=2, head_dim=16)),
        "mistral": lambda: MistralForCausalLM(MistralConfig(**common, num_key_value_heads=2, sliding_window=None)),
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=layers, n_head=4, vocab_size=VOCAB,
                                                   n_positions=128, bos_token_id=0, eos_token_id=0)),
        "gpt_neox": lambda: GPTNeoXForCausalLM(GPTNeoXConfig(**common)),
    }
    out = {}
    for i, (name, build) in enumerate(builders.items()):
        torch.manual_seed(100 + i)
        out[name] = build().eval()
    return out
