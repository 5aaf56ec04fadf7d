"""Tiny seeded causal LMs built locally (no hub) for the tests."""

from __future__ import annotations

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)


def tiny_llama(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2, **kw) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, **kw)
    return LlamaForCausalLM(cfg).eval()


def tiny_qwen2(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return Qwen2ForCausalLM(cfg).eval()


def tiny_mistral(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2) -> MistralForCausalLM:
    torch.manual_seed(seed)
    cfg = MistralConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, sliding_window=None)
    return MistralForCausalLM(cfg).eval()


def tiny_gpt2(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=256,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()
