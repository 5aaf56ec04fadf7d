"""GGUF targets: tiny Llama GGUFs written from Hugging Face models (llama.cpp reads them as transformers
does), float copies of quantized files (all metadata kept, cached atomically), edited copies, refused
inputs; and the float32 SmolLM2 GGUF against transformers' float32 model of the same file."""

import os
import time

import gguf
import numpy as np
import pytest

from eaglehead.builtin.gguf import GGUFError
from eaglehead.builtin.gguf_target import (float_gguf_path, llama_permute, llama_unpermute, open_gguf,
                                           read_target_gguf, rewrite_gguf, write_float_gguf)
from eaglehead.engines.llamacpp import LlamaCppServer
from eaglehead.builtin.packages import smollm2_gguf_path

from tests.builtin.llamacpp_support import (BUDGET, THREADS, assert_no_near_tie, llamacpp_runs, smollm2, smollm2_f32,
                                            smollm2_prompts, tiny_target)


def _tensors(path) -> dict[str, tuple[str, np.ndarray]]:
    reader = gguf.GGUFReader(path)
    return {t.name: (t.tensor_type.name, gguf.quants.dequantize(t.data, t.tensor_type).reshape(
        [int(n) for n in reversed(t.shape)])) for t in reader.tensors}


def _fields(path) -> dict:
    reader = gguf.GGUFReader(path)
    return {k: (f.contents(), [t.name for t in f.types]) for k, f in reader.fields.items()}


def test_llama_permute_round_trips():
    w = np.arange(4 * 16 * 3, dtype=np.float32).reshape(4 * 16, 3)
    assert not np.array_equal(llama_permute(w, 4), w)
    np.testing.assert_array_equal(llama_unpermute(llama_permute(w, 4), 4), w)


def test_tiny_llama_gguf_layout_and_tokenizer():
    model, tok, path, _ = tiny_target()
    target = read_target_gguf(path)
    assert (target.architecture, target.block_count, target.hidden_size) == ("llama", 4, 32)
    assert target.vocab_size == len(tok) == model.config.vocab_size
    assert target.tokenizer["tokenizer.ggml.tokens"][0] == tok.convert_ids_to_tokens(list(range(len(tok))))
    tensors = _tensors(path)
    assert "output.weight" in tensors and "token_embd.weight" in tensors and len(tensors) == 3 + 4 * 9
    q = model.model.layers[1].self_attn.q_proj.weight.detach().numpy()
    np.testing.assert_array_equal(tensors["blk.1.attn_q.weight"][1], llama_permute(q, 4))
    k = model.model.layers[1].self_attn.k_proj.weight.detach().numpy()
    np.testing.assert_array_equal(tensors["blk.1.attn_k.weight"][1], llama_permute(k, 2))


def test_llamacpp_reads_the_tiny_gguf_as_transformers_does():
    """Greedy decoding in llama.cpp equals the HF model's: the layout (names, q/k permutation, norms,
    tokenizer size) is what llama.cpp expects."""
    model, tok, path, _ = tiny_target()
    prompts = [tok("def add(a, b):")["input_ids"], tok("The quick brown fox")["input_ids"]]
    with LlamaCppServer(path, threads=THREADS, n_ctx=256, warmup=False) as server:
        outs = [server.complete(p, 24, ignore_eos=True) for p in prompts]
    for p, out in zip(prompts, outs):
        assert len(out.tokens) == 24
        # ignore_eos bans llama.cpp's end-of-generation tokens, <|endoftext|> (eos) and <|im_end|>
        eog = tuple(tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"]))
        assert_no_near_tie(model, p, out.tokens, margin=1e-3, banned=eog)  # each token is the HF argmax


def test_write_float_gguf_keeps_metadata_and_values(tmp_path):
    _, _, src, _ = tiny_target()
    f16 = write_float_gguf(src, tmp_path / "f16.gguf", "float16")
    f32 = write_float_gguf(f16, tmp_path / "f32.gguf", "float32")
    before, after = _fields(src), _fields(f32)
    assert after.pop("general.file_type")[0] == gguf.LlamaFileType.ALL_F32
    assert _fields(f16)["general.file_type"][0] == gguf.LlamaFileType.MOSTLY_F16
    before.pop("general.file_type")
    assert after == before  # every other key, value and type copied
    src_t, half, full = _tensors(src), _tensors(f16), _tensors(f32)
    for name, (_, w) in src_t.items():
        assert half[name][0] == ("F32" if w.ndim == 1 else "F16"), name  # norms stay F32, as the converter
        assert full[name][0] == "F32"
        np.testing.assert_array_equal(full[name][1], w.astype(np.float16).astype(np.float32) if w.ndim > 1 else w)


def test_float_gguf_path_caches_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, _, src, _ = tiny_target()
    out = float_gguf_path(src, "float16")
    assert out.parent == tmp_path / "cache" / "eaglehead" / "gguf-float"
    assert out.name.startswith(src.stem + "-") and out.name.endswith("-float16.gguf")
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary left behind
    stamp = out.stat().st_mtime_ns
    time.sleep(0.01)
    assert float_gguf_path(src, "float16") == out and out.stat().st_mtime_ns == stamp  # reused, not rewritten
    with pytest.raises(GGUFError, match="dtype"):
        float_gguf_path(src, "int8")


def test_refused_inputs_name_the_file(tmp_path):
    _, _, src, _ = tiny_target()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    with pytest.raises(GGUFError, match=f"{cut}.*truncated"):
        open_gguf(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        write_float_gguf(junk, tmp_path / "x.gguf")
    existing = tmp_path / "exists.gguf"
    existing.write_bytes(b"keep me")
    with pytest.raises(GGUFError, match="out_path .*exists"):
        write_float_gguf(src, existing)
    assert existing.read_bytes() == b"keep me"
    with pytest.raises(GGUFError, match="no metadata key"):
        rewrite_gguf(src, tmp_path / "r.gguf", kv={"llama.no_such_key": 1})


def test_rewrite_gguf_replaces_only_what_it_is_told(tmp_path):
    _, _, src, _ = tiny_target()
    norm = np.full(32, 2.0, dtype=np.float32)
    out = rewrite_gguf(src, tmp_path / "r.gguf", kv={"llama.context_length": 128},
                       tensors={"output_norm.weight": norm})
    before, after = _fields(src), _fields(out)
    assert after.pop("llama.context_length") == (128, ["UINT32"]) and before.pop("llama.context_length")[0] == 256
    assert after == before
    a, b = _tensors(src), _tensors(out)
    np.testing.assert_array_equal(b.pop("output_norm.weight")[1], norm)
    a.pop("output_norm.weight")
    assert all(np.array_equal(a[n][1], b[n][1]) and a[n][0] == b[n][0] for n in a)


def test_smollm2_f32_gguf_is_transformers_float32_model():
    """The F32 copy holds exactly the weights transformers dequantizes from the same Q4_1 file, and llama.cpp
    decodes it greedily as our float32 torch target does (prompts with no near-tie, see llamacpp_support)."""
    model, _ = smollm2()
    path = smollm2_f32()
    assert path.name.endswith("-float32.gguf") and os.path.getsize(path) > 4 * 134e6
    reader = gguf.GGUFReader(path)
    weights = {t.name: t for t in reader.tensors}
    for gguf_name, hf_name, heads in (("blk.7.attn_q.weight", "model.layers.7.self_attn.q_proj.weight", 9),
                                      ("blk.7.attn_k.weight", "model.layers.7.self_attn.k_proj.weight", 3),
                                      ("blk.7.ffn_down.weight", "model.layers.7.mlp.down_proj.weight", None),
                                      ("token_embd.weight", "model.embed_tokens.weight", None)):
        t = weights[gguf_name]
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        w = np.asarray(t.data).reshape([int(n) for n in reversed(t.shape)])
        w = llama_unpermute(w, heads) if heads else w
        np.testing.assert_array_equal(w, model.state_dict()[hf_name].numpy())
    original = _fields(smollm2_gguf_path())
    copied = _fields(path)
    assert {k: v for k, v in copied.items() if k != "general.file_type"} == \
        {k: v for k, v in original.items() if k != "general.file_type"}
    for prompt, out in zip(smollm2_prompts(), llamacpp_runs(path, None)):
        assert len(out.tokens) == BUDGET
        # Every token llama.cpp chose is the float32 HF argmax after the same prefix (so HF's greedy
        # decoding is the same sequence), and by a margin no float32 rounding difference can flip.
        assert_no_near_tie(model, list(prompt), out.tokens)
