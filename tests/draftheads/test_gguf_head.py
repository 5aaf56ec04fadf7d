"""EAGLE-3 heads as llama.cpp GGUFs: exported and imported back they draft the same logits (float32
exactly; float16/bfloat16 equal to the source rounded to that dtype), ``load_head`` takes the file, and
everything llama.cpp's drafter cannot run is refused with the parameter or file named."""

import gguf
import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from eaglehead.builtin.gguf_target import TensorOut, rewrite_gguf, write_gguf
from eaglehead.draftheads import Eagle1Head
from eaglehead.draftheads.checkpoint import head_layout, load_head
from eaglehead.draftheads.gguf_head import GGUFExportError, GGUFHeadError, export_gguf, load_gguf_head
from tests.builtin.llamacpp_support import tiny_head, tiny_target

VOCAB = 320  # the tiny target's tokenizer


@pytest.fixture(scope="module")
def target():
    model, tok, path, hf_dir = tiny_target()
    assert len(tok) == VOCAB
    return model, path, hf_dir


def _logits(head, ids, feats) -> torch.Tensor:
    """Step-0 logits and one self-fed step's logits, float32: [B, T-1 + 1, Vd]."""
    hidden = head(ids, feats.to(head.dtype))  # [B, T-1, H]
    pos = torch.full((ids.shape[0], 1), ids.shape[1] - 1)
    fed = head.layer_forward(head.embed(ids[:, -1:]), hidden[:, -1:], pos)
    return head.logits(torch.cat([hidden, fed], 1)).float()


def _inputs(head, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, 9), generator=gen)
    feats = torch.randn(2, 9, head.config.fused_width, generator=gen)
    return ids, feats


def _bind(*heads):
    torch.manual_seed(5)
    emb = torch.nn.Embedding(VOCAB, 32)
    for h in heads:
        h.bind_embedding(emb)


def test_float32_round_trip_is_exact(target, tmp_path):
    _, gguf_target, _ = target
    head = tiny_head(VOCAB)
    back = load_gguf_head(export_gguf(head, tmp_path / "h.gguf", target=gguf_target, dtype="float32"))
    assert back.dtype == torch.float32 and back.config.to_dict() == head.config.to_dict()
    assert back.config.fused_layer_ids == [1, 2, 3]
    assert torch.equal(back.d2t, head.d2t) and torch.equal(back.t2d, head.t2d)
    assert not torch.equal(head.target_ids, torch.arange(VOCAB // 2))  # a vocabulary that is not the first ids
    _bind(head, back)
    ids, feats = _inputs(head)
    with torch.no_grad():
        assert (_logits(back, ids, feats) - _logits(head, ids, feats)).abs().max() <= 1e-5


@pytest.mark.parametrize("dtype,torch_dtype,rel",
                         [("float16", torch.float16, 1e-2), ("bfloat16", torch.bfloat16, 8e-2)])
def test_half_precision_export_is_the_rounded_head(target, tmp_path, dtype, torch_dtype, rel):
    """The file is lossless for a head already in that dtype (norms stored float32 and cast back), and
    against the float32 source the drafted logits differ only by the weights' rounding: ``rel`` of the
    logits' spread (about 4x the 2.5e-3 / 2.2e-2 measured over three seeds)."""
    _, gguf_target, _ = target
    head = tiny_head(VOCAB)
    path = export_gguf(head, tmp_path / "h.gguf", target=gguf_target, dtype=dtype)
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.attn_norm_2.weight"] == "F32"  # norms stay float32, as the converter writes them
    assert types["fc.weight"] == {"float16": "F16", "bfloat16": "BF16"}[dtype]
    back = load_gguf_head(path)
    assert back.dtype == torch_dtype
    rounded = {k: (v if k in ("d2t", "t2d") else v.to(torch_dtype)) for k, v in head.state_dict().items()}
    assert all(torch.equal(back.state_dict()[k], v) for k, v in rounded.items())
    _bind(head, back)
    ids, feats = _inputs(head)
    with torch.no_grad():
        ref = _logits(head, ids, feats)
        got = _logits(back.float(), ids, feats)
    assert (got - ref).abs().max() <= rel * ref.std()


def test_load_head_and_head_layout_take_a_gguf(target, tmp_path):
    model, gguf_target, _ = target
    head = tiny_head(VOCAB)
    path = export_gguf(head, tmp_path / "h.gguf", target=gguf_target, dtype="float32")
    assert head_layout(path) == "gguf"
    back = load_head(path, target_config=model.config)
    assert torch.equal(back.fc.weight, head.fc.weight)
    assert load_head(path, fused_layer_ids=[0, 1, 2]).config.fused_layer_ids == [0, 1, 2]
    with pytest.raises(ValueError, match="target_hidden_size"):
        load_head(path, target_config={**model.config.to_dict(), "hidden_size": 64})
    with pytest.raises(ValueError, match="expected the eaglehead layout, found gguf"):
        load_head(path, layout="eaglehead")


def test_hf_directory_target_writes_the_same_file(target, tmp_path):
    _, gguf_target, hf_dir = target
    head = tiny_head(VOCAB)
    a = gguf.GGUFReader(export_gguf(head, tmp_path / "a.gguf", target=gguf_target))
    b = gguf.GGUFReader(export_gguf(head, tmp_path / "b.gguf", target=hf_dir))
    assert {k: f.contents() for k, f in a.fields.items()} == {k: f.contents() for k, f in b.fields.items()}
    assert all(np.array_equal(x.data, y.data) and x.name == y.name for x, y in zip(a.tensors, b.tensors))


def test_converter_style_file_loads_without_our_keys(target, tmp_path):
    """llama.cpp's converter writes no eaglehead.* keys: the head loads from the standard keys alone."""
    _, gguf_target, _ = target
    head = tiny_head(VOCAB)
    ours = export_gguf(head, tmp_path / "h.gguf", target=gguf_target, dtype="float32")
    plain = rewrite_gguf(ours, tmp_path / "plain.gguf", kv={"eaglehead.config": None, "eaglehead.head_type": None})
    back = load_gguf_head(plain)
    assert back.config.target_num_hidden_layers is None and back.config.target_name_or_path == ""
    assert back.config.fused_layer_ids == [1, 2, 3]
    assert all(torch.equal(back.state_dict()[k], v) for k, v in head.state_dict().items())


def test_export_refusals_name_the_reason(target, tmp_path):
    _, gguf_target, _ = target
    out = tmp_path / "h.gguf"
    with pytest.raises(GGUFExportError, match=r"fused_layer_ids \[1, 3\]: .*exactly 3"):
        export_gguf(tiny_head(VOCAB, fused=(1, 3)), out, target=gguf_target)
    with pytest.raises(GGUFExportError, match="EAGLE-1 head"):
        export_gguf(tiny_head(VOCAB, fused=(4,), cls=Eagle1Head), out, target=gguf_target)
    with pytest.raises(GGUFExportError, match=r"fused_layer_ids \[1, 2, 4\]: \[4\] not in 0..3"):
        export_gguf(tiny_head(VOCAB, fused=(1, 2, 4)), out, target=gguf_target)
    with pytest.raises(GGUFExportError, match="dtype must be one of"):
        export_gguf(tiny_head(VOCAB), out, target=gguf_target, dtype="q8_0")
    with pytest.raises(GGUFExportError, match="target_vocab_size 96, the target has 320"):
        export_gguf(tiny_head(96), out, target=gguf_target)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_target.read_bytes()[:-1000])
    with pytest.raises(GGUFExportError, match=f"target {cut}: truncated"):
        export_gguf(tiny_head(VOCAB), out, target=cut)
    with pytest.raises(GGUFExportError, match="expected a .gguf file or a Hugging Face model directory"):
        export_gguf(tiny_head(VOCAB), out, target=tmp_path / "missing")
    assert not out.exists()


def test_unknown_target_architectures_are_refused(target, tmp_path):
    T = gguf.GGUFValueType
    kv = {"gpt2.block_count": (4, T.UINT32, None), "gpt2.embedding_length": (32, T.UINT32, None),
          "tokenizer.ggml.tokens": ([f"t{i}" for i in range(VOCAB)], T.ARRAY, T.STRING)}
    other = write_gguf(tmp_path / "gpt2.gguf", "gpt2", kv,
                       [TensorOut("x", (2,), gguf.GGMLQuantizationType.F32, np.zeros(2, np.float32))])
    with pytest.raises(GGUFExportError, match=f"target {other}: architecture 'gpt2' does not expose"):
        export_gguf(tiny_head(VOCAB), tmp_path / "h.gguf", target=other)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=4, n_head=4, vocab_size=VOCAB)).save_pretrained(tmp_path / "g")
    with pytest.raises(GGUFExportError, match="architecture 'GPT2LMHeadModel' is not one llama.cpp"):
        export_gguf(tiny_head(VOCAB), tmp_path / "h.gguf", target=tmp_path / "g")


def test_existing_output_is_kept_unless_overwrite(target, tmp_path):
    _, gguf_target, _ = target
    out = tmp_path / "h.gguf"
    out.write_bytes(b"someone's file")
    with pytest.raises(GGUFExportError, match=f"out_path {out} exists; pass overwrite=True"):
        export_gguf(tiny_head(VOCAB), out, target=gguf_target)
    assert out.read_bytes() == b"someone's file"
    export_gguf(tiny_head(VOCAB), out, target=gguf_target, overwrite=True)
    assert load_gguf_head(out).config.draft_vocab_size == VOCAB // 2
    assert [p.name for p in tmp_path.iterdir()] == ["h.gguf"]  # no temporary file left


def test_import_refusals_name_the_file(target, tmp_path):
    _, gguf_target, _ = target
    path = export_gguf(tiny_head(VOCAB), tmp_path / "h.gguf", target=gguf_target, dtype="float32")
    reader = gguf.GGUFReader(path)
    absolute = np.asarray(next(t for t in reader.tensors if t.name == "d2t").data)
    offsets = rewrite_gguf(path, tmp_path / "offsets.gguf", tensors={"d2t": absolute - np.arange(absolute.size)})
    with pytest.raises(GGUFHeadError, match=f"{offsets}: tensor d2t"):
        load_gguf_head(offsets)
    with pytest.raises(GGUFHeadError, match="general.architecture is 'llama', expected 'eagle3'"):
        load_gguf_head(gguf_target)
    with pytest.raises(GGUFHeadError, match="no such file"):
        load_gguf_head(tmp_path / "nope.gguf")


@pytest.mark.parametrize("rope_scaling", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64}])
def test_scaled_rope_round_trips(target, tmp_path, rope_scaling):
    """Linear scaling travels as llama.cpp's rope.scaling keys, llama3 as the converter's rope_freqs factors
    (plain over scaled frequency: 1 for short wavelengths, ``factor`` for long ones)."""
    _, gguf_target, _ = target
    head = tiny_head(VOCAB)
    head.config.rope_scaling = rope_scaling
    path = export_gguf(head, tmp_path / "h.gguf", target=gguf_target, dtype="float32")
    reader = gguf.GGUFReader(path)
    freqs = [np.asarray(t.data) for t in reader.tensors if t.name == "rope_freqs.weight"]
    if rope_scaling["rope_type"] == "llama3":
        assert freqs[0][0] == 1.0 and freqs[0][-1] == 8.0
    else:
        assert not freqs and reader.fields["eagle3.rope.scaling.factor"].contents() == 2.0
    back = load_gguf_head(path)
    assert back.config.rope_scaling == head.config.rope_scaling
    _bind(head, back)
    ids, feats = _inputs(head)
    with torch.no_grad():
        assert (_logits(back, ids, feats) - _logits(head, ids, feats)).abs().max() <= 1e-5
