"""gguf_to_hf_dir on a tiny GGUF the test writes itself (llama.cpp's layout, F32 tensors), and once on
the real SmolLM2-135M-Instruct GGUF."""

import json
import shutil
import time
from collections import namedtuple
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

import eaglehead.builtin.gguf as gguf_mod
from eaglehead.builtin.gguf import MARKER, GGUFError, gguf_to_hf_dir
from eaglehead.builtin.packages import smollm2_gguf_path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXT = ("The quick brown fox jumps over the lazy dog. "
        "def is_prime(n): return n > 1 and all(n % k for k in range(2, n))\n")


def _tokenizer() -> Tokenizer:
    """A byte-level BPE of ~300 tokens, ids 0-2 the specials (like SmolLM2's)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT] * 20, trainer)
    return tok


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers reverses it on load).
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, arch: str = "llama"):
    """A seeded 2-layer Llama and its tokenizer, written as an F32 GGUF at ``path``."""
    tok = _tokenizer()
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # non-trivial norms, so a mix-up of norm tensors shows in the logits
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}

    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny-llama")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])  # 3 = control
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], 4))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], 2))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, tok


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    model, tok = write_tiny_gguf(path)
    return path, model, tok


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "eaglehead" / "gguf"


def test_tiny_gguf_converts_to_a_dir_with_the_same_logits_and_tokenizer(tiny, cache):
    path, source, source_tok = tiny
    out = gguf_to_hf_dir(path, progress=False)
    assert out.parent == cache and out.name.startswith("tiny-llama-") and out.name.endswith("-float32")
    marker = json.loads((out / MARKER).read_text())
    assert marker["source"] == str(path.resolve()) and marker["dtype"] == "float32"
    assert out.name == f"tiny-llama-{marker['sha256'][:16]}-float32"
    assert not [p for p in cache.iterdir() if p != out], "the temporary build directory is left behind"

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert model.config.num_hidden_layers == 2 and not model.config.tie_word_embeddings
    assert getattr(model.config, "quantization_config", None) is None
    torch.manual_seed(1)
    ids = torch.randint(0, source.config.vocab_size, (3, 12))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, source(ids).logits, atol=1e-5, rtol=0)

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.encode(TEXT, add_special_tokens=False) == source_tok.encode(TEXT).ids
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_second_call_reuses_the_cached_dir_without_rebuilding(tiny, cache, monkeypatch):
    path = tiny[0]
    out = gguf_to_hf_dir(path, progress=False)
    stamp = (out / "model.safetensors").stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a complete directory")

    monkeypatch.setattr(gguf_mod, "_convert", no_rebuild)
    start = time.perf_counter()
    assert gguf_to_hf_dir(path, progress=False) == out
    assert time.perf_counter() - start < 2.0
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_dir_without_marker_is_removed_and_rebuilt(tiny, cache, capsys):
    path = tiny[0]
    out = gguf_to_hf_dir(path, "float16", progress=False)
    (out / MARKER).unlink()
    (out / "stray.txt").write_text("left by an interrupted build")
    assert gguf_to_hf_dir(path, "float16", progress=False) == out
    assert "no completion marker" in capsys.readouterr().err
    assert (out / MARKER).is_file() and not (out / "stray.txt").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.float16


def test_truncated_file_raises_naming_the_file(tiny, cache, tmp_path):
    cut = tmp_path / "cut.gguf"
    data = tiny[0].read_bytes()
    cut.write_bytes(data[: len(data) - 5000])
    with pytest.raises(GGUFError, match="cut.gguf.*truncated"):
        gguf_to_hf_dir(cut, progress=False)
    assert not cache.exists() or not any(cache.iterdir())


def test_missing_file_and_bad_magic_raise_naming_the_file(cache, tmp_path):
    with pytest.raises(GGUFError, match="nothere.gguf: no such"):
        gguf_to_hf_dir(tmp_path / "nothere.gguf", progress=False)
    bad = tmp_path / "notgguf.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(GGUFError, match="notgguf.gguf: not a GGUF"):
        gguf_to_hf_dir(bad, progress=False)


def test_unsupported_architecture_raises_naming_it_and_the_supported_ones(cache, tmp_path):
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(path, "mamba9000")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="odd.gguf: architecture 'mamba9000'.*supported: .*llama"):
        gguf_to_hf_dir(path, progress=False)


def test_low_free_disk_raises_before_writing(tiny, cache, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    expected = r"not enough free disk space for .*tiny-llama-.*needs about \d+ bytes, 1000 free"
    with pytest.raises(GGUFError, match=expected):
        gguf_to_hf_dir(tiny[0], progress=False)
    assert not cache.exists()


def test_unknown_dtype_is_a_value_error_naming_dtype(tiny, cache):
    with pytest.raises(ValueError, match="dtype 'int8'"):
        gguf_to_hf_dir(tiny[0], "int8", progress=False)


def test_real_smollm2_gguf_converts(cache, capsys):
    start = time.perf_counter()
    out = gguf_to_hf_dir(smollm2_gguf_path(), progress=True)
    seconds = time.perf_counter() - start
    assert "gguf SmolLM2-135M-Instruct.Q4_1.gguf" in capsys.readouterr().err  # the progress bar
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size, c.tie_word_embeddings) == (30, 576, 49152, True)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.eos_token_id == 2 and tok.eos_token == "<|im_end|>"
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = ids["input_ids"]
    with torch.no_grad():
        next_id = int(model(ids).logits[0, -1].argmax())
    assert tok.decode([next_id]).strip() in {"The", "Paris"}
    print(f"real SmolLM2 conversion: {seconds:.1f} s")
