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


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer(vocab: int = 256):
    """A byte-level BPE trained on a few sentences here, with a ChatML-like template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [
        "def add(a, b):\n    return a + b\n", "The quick brown fox jumps over the lazy dog.",
        "for i in range(10):\n    print(i)\n", "Speculative decoding drafts tokens and verifies them.",
        "class Stack:\n    def push(self, x):\n        self.items.append(x)\n",
    ] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML)


def save_tiny_target(path, seed: int = 0, layers: int = 4, hidden: int = 32):
    """Save a tiny Llama target and its tokenizer with ``save_pretrained`` (loadable by path)."""
    tok = tiny_tokenizer()
    model = tiny_llama(seed=seed, vocab=len(tok), hidden=hidden, layers=layers)
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model, tok
