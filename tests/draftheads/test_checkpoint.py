"""Checkpoints: our layout, EAGLE-3 and speculators exports, hand-built imports, refusals."""

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, LlamaConfig

from eaglehead.draftheads import (Eagle1Head, Eagle3Config, Eagle3Head, check_compatible, eagle3_config_dict,
                                  eagle3_state_dict, export_eagle3, export_speculators, load_head,
                                  load_pretrained, save_pretrained, speculators_config_dict,
                                  speculators_state_dict)

from .common import VOCAB, randomise, tiny_config, tiny_head


def assert_bit_exact(a: Eagle3Head, b: Eagle3Head):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape, k
        assert torch.equal(sa[k].view(torch.uint8) if sa[k].is_floating_point() else sa[k],
                           sb[k].view(torch.uint8) if sb[k].is_floating_point() else sb[k]), k


@pytest.mark.parametrize("cls,overrides", [(Eagle3Head, {}),
                                           (Eagle1Head, {"fused_layer_ids": [4], "draft_vocab_size": VOCAB})])
def test_save_load_round_trip(tmp_path, cls, overrides):
    head = tiny_head(cls=cls, **overrides).to(torch.bfloat16)
    save_pretrained(head, tmp_path / "ckpt")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert cfg["eaglehead_head_type"] == cls.head_type and cfg["fused_layer_ids"] == head.config.fused_layer_ids
    assert cfg["target_name_or_path"] == "tiny/target"
    loaded = load_pretrained(tmp_path / "ckpt")
    assert type(loaded) is cls and loaded.config == head.config
    assert_bit_exact(head, loaded)
    with pytest.raises(ValueError, match="not empty"):
        save_pretrained(head, tmp_path / "ckpt")
    save_pretrained(head, tmp_path / "ckpt", overwrite=True)


def test_export_eagle3_round_trip(tmp_path):
    head = tiny_head()
    export_eagle3(head, tmp_path / "e3")
    cfg = json.loads((tmp_path / "e3" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and cfg["vocab_size"] == VOCAB and cfg["draft_vocab_size"] == 40
    assert cfg["target_hidden_size"] == 32 and cfg["tie_word_embeddings"] is False
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]  # vLLM: output_hidden_states indexing
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]  # SGLang adds one
    parsed = AutoConfig.from_pretrained(tmp_path / "e3")  # what an engine's transformers sees
    assert type(parsed) is LlamaConfig and parsed.num_hidden_layers == 1 and parsed.draft_vocab_size == 40
    imported = load_head(tmp_path / "e3")
    assert imported.config == head.config
    assert_bit_exact(head, imported)
    bf16 = load_head(export_eagle3(head, tmp_path / "e3b", dtype=torch.bfloat16))
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16.d2t, head.d2t)


def test_export_speculators_round_trip(tmp_path):
    head = tiny_head(norm_before_residual=True)
    export_speculators(head, tmp_path / "spec", speculative_tokens=5, verifier_architectures=["LlamaForCausalLM"])
    cfg = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3Speculator"] and cfg["speculators_model_type"] == "eagle3"
    assert cfg["norm_before_residual"] is True and cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert cfg["transformer_layer_config"]["vocab_size"] == VOCAB and cfg["draft_vocab_size"] == 40
    spec = cfg["speculators_config"]
    assert spec["proposal_methods"][0]["speculative_tokens"] == 5
    assert spec["verifier"] == {"name_or_path": "tiny/target", "architectures": ["LlamaForCausalLM"]}
    imported = load_head(tmp_path / "spec")
    assert imported.config == head.config
    assert_bit_exact(head, imported)


def test_llama31_8b_export_table_on_meta():
    cfg = Eagle3Config(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                       target_vocab_size=128256, draft_vocab_size=32000, fused_layer_ids=[2, 16, 29],
                       target_num_hidden_layers=32, rope_theta=500000.0, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, target_name_or_path="meta-llama/Llama-3.1-8B-Instruct")
    with torch.device("meta"):
        head = Eagle3Head(cfg).to(torch.bfloat16)
    table = {k: (tuple(v.shape), v.dtype) for k, v in eagle3_state_dict(head).items()}
    bf = torch.bfloat16
    expected = {
        "fc.weight": ((4096, 12288), bf),
        "midlayer.self_attn.q_proj.weight": ((4096, 8192), bf),
        "midlayer.self_attn.k_proj.weight": ((1024, 8192), bf),
        "midlayer.self_attn.v_proj.weight": ((1024, 8192), bf),
        "midlayer.self_attn.o_proj.weight": ((4096, 4096), bf),
        "midlayer.mlp.gate_proj.weight": ((14336, 4096), bf),
        "midlayer.mlp.up_proj.weight": ((14336, 4096), bf),
        "midlayer.mlp.down_proj.weight": ((4096, 14336), bf),
        "midlayer.input_layernorm.weight": ((4096,), bf),
        "midlayer.hidden_norm.weight": ((4096,), bf),
        "midlayer.post_attention_layernorm.weight": ((4096,), bf),
        "norm.weight": ((4096,), bf),
        "lm_head.weight": ((32000, 4096), bf),
        "d2t": ((32000,), torch.int64),
        "t2d": ((128256,), torch.bool),
    }
    assert table == expected
    assert all(v.is_meta for v in head.state_dict().values())  # nothing was materialised
    config = eagle3_config_dict(head)
    assert (config["vocab_size"], config["draft_vocab_size"], config["hidden_size"]) == (128256, 32000, 4096)
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (32, 8, 128)
    assert config["torch_dtype"] == "bfloat16" and config["rope_theta"] == 500000.0
    spec_keys = set(speculators_state_dict(head))
    assert spec_keys == {k.replace("midlayer.", "layers.0.") for k in expected}
    assert speculators_config_dict(head)["transformer_layer_config"]["intermediate_size"] == 14336


def hand_built_weights(gen, vocab_full=False):
    h, inner, vd = 32, 64, (VOCAB if vocab_full else 40)

    def r(*shape):
        return torch.randn(*shape, generator=gen)

    w = {"fc.weight": r(h, 3 * h), "midlayer.self_attn.q_proj.weight": r(32, 2 * h),
         "midlayer.self_attn.k_proj.weight": r(16, 2 * h), "midlayer.self_attn.v_proj.weight": r(16, 2 * h),
         "midlayer.self_attn.o_proj.weight": r(h, 32), "midlayer.mlp.gate_proj.weight": r(inner, h),
         "midlayer.mlp.up_proj.weight": r(inner, h), "midlayer.mlp.down_proj.weight": r(h, inner),
         "midlayer.input_layernorm.weight": r(h), "midlayer.hidden_norm.weight": r(h),
         "midlayer.post_attention_layernorm.weight": r(h), "norm.weight": r(h), "lm_head.weight": r(vd, h)}
    if not vocab_full:
        ids = torch.sort(torch.randperm(VOCAB, generator=gen)[:40]).values
        w["d2t"] = ids - torch.arange(40)
        w["t2d"] = torch.zeros(VOCAB, dtype=torch.bool)
        w["t2d"][ids] = True
    return w


HAND_CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
               "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 2048, "vocab_size": VOCAB,
               "draft_vocab_size": 40, "hidden_act": "silu", "tie_word_embeddings": False}


def write_dir(path, config, weights, fmt="safetensors"):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        save_file(weights, str(path / "model.safetensors"))
    else:
        torch.save(weights, path / "pytorch_model.bin")
    return path


def test_import_hand_built_sglang_style_safetensors(tmp_path):
    weights = hand_built_weights(torch.Generator().manual_seed(0))
    sglang_ids = {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    config = {**HAND_CONFIG, "eagle_config": sglang_ids}
    head = load_head(write_dir(tmp_path / "d", config, weights), target_name_or_path="some/target")
    assert head.config.fused_layer_ids == [2, 4, 6]  # SGLang ids are output-of-layer ids: ours minus one
    assert head.config.target_name_or_path == "some/target" and head.config.rms_norm_eps == 1e-5
    for k, v in head.state_dict().items():
        assert torch.equal(v, weights[k]), k


def test_import_hand_built_vllm_style_bin_full_vocab(tmp_path):
    weights = hand_built_weights(torch.Generator().manual_seed(1), vocab_full=True)
    config = {**HAND_CONFIG, "draft_vocab_size": VOCAB, "eagle_aux_hidden_state_layer_ids": [2, 3, 4]}
    target = LlamaConfig(hidden_size=32, num_hidden_layers=6, num_attention_heads=4, vocab_size=VOCAB)
    head = load_head(write_dir(tmp_path / "d", config, weights, fmt="bin"), target_config=target)
    assert head.config.fused_layer_ids == [2, 3, 4] and head.config.target_num_hidden_layers == 6
    assert torch.equal(head.d2t, torch.zeros(VOCAB, dtype=torch.int64)) and head.t2d.all()
    assert torch.equal(head.lm_head.weight, weights["lm_head.weight"])
    no_ids = load_head(tmp_path / "d", fused_layer_ids=None, target_config=LlamaConfig(
        hidden_size=32, num_hidden_layers=8, num_attention_heads=4, vocab_size=VOCAB))
    assert no_ids.config.fused_layer_ids == [2, 3, 4]  # the checkpoint's ids win over the default


@pytest.mark.parametrize("mutate,match", [
    (lambda w: w.update({"midlayer.self_attn.q_proj.weight": torch.zeros(32, 48)}),
     r"midlayer\.self_attn\.q_proj\.weight has shape \[32, 48\], expected \[32, 64\]"),
    (lambda w: w.pop("norm.weight"), r"missing key\(s\) \['norm\.weight'\]"),
    (lambda w: w.update({"embed_tokens.weight": torch.zeros(VOCAB, 32)}), "unexpected key.*embed_tokens"),
    (lambda w: w.update({"d2t": w["d2t"].int()}), "d2t has dtype torch.int32, expected torch.int64"),
    (lambda w: w.update({"norm.weight": w["norm.weight"].half()}), "norm.weight has dtype torch.float16"),
    (lambda w: w.update({"t2d": ~w["t2d"]}), "t2d"),
])
def test_import_refuses_mismatches(tmp_path, mutate, match):
    weights = hand_built_weights(torch.Generator().manual_seed(2))
    mutate(weights)
    config = {**HAND_CONFIG, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    with pytest.raises(ValueError, match=match):
        load_head(write_dir(tmp_path / "d", config, weights))


def test_import_refuses_config_mismatches(tmp_path):
    weights = hand_built_weights(torch.Generator().manual_seed(3))
    base = {**HAND_CONFIG, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    with pytest.raises(ValueError, match="hidden_size=32 differs from target_hidden_size=64"):
        load_head(write_dir(tmp_path / "a", {**base, "target_hidden_size": 64}, weights))
    with pytest.raises(ValueError, match="no eagle_aux_hidden_state_layer_ids"):
        load_head(write_dir(tmp_path / "b", HAND_CONFIG, weights))
    with pytest.raises(ValueError, match="num_hidden_layers must be 1"):
        load_head(write_dir(tmp_path / "c", {**base, "num_hidden_layers": 2}, weights))
    with pytest.raises(ValueError, match="target_vocab_size: head expects 96, target has vocab_size 100"):
        load_head(write_dir(tmp_path / "d", base, weights), target_config=LlamaConfig(
            hidden_size=32, num_hidden_layers=4, num_attention_heads=4, vocab_size=100))


def test_check_compatible():
    cfg = tiny_config()
    ok = LlamaConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, vocab_size=VOCAB)
    check_compatible(cfg, ok)
    with pytest.raises(ValueError, match="target_hidden_size: head expects 32, target has 64"):
        check_compatible(cfg, LlamaConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=VOCAB))
    with pytest.raises(ValueError, match="target_num_hidden_layers: head expects 4, target has 2"):
        check_compatible(cfg, LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB))
    with pytest.raises(ValueError, match="fused_layer_ids"):
        check_compatible(tiny_config(target_num_hidden_layers=None),
                         LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB))


def test_export_refusals(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=str(tmp_path / "full")):
        export_eagle3(tiny_head(), tmp_path / "full")
    assert (tmp_path / "full" / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="exactly 3"):
        export_eagle3(randomise(Eagle1Head(tiny_config(fused_layer_ids=[4], draft_vocab_size=VOCAB))), tmp_path / "a")
    with pytest.raises(ValueError, match="final-normed"):
        export_speculators(tiny_head(fused_layer_ids=[1, 2, 4]), tmp_path / "b")
    with pytest.raises(ValueError, match="norm_before_residual"):
        export_eagle3(tiny_head(norm_before_residual=True), tmp_path / "c")
    with pytest.raises(ValueError, match="meta"):
        with torch.device("meta"):
            meta_head = Eagle3Head(tiny_config())
        export_eagle3(meta_head, tmp_path / "d")
