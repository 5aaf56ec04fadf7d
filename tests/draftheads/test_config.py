"""Eagle3Config: derivation from HF target configs, validation messages, dict round trip."""

import pytest
from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from eaglehead.draftheads import Eagle1Head, Eagle3Config, default_layer_ids

from .common import tiny_config

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def test_from_llama_config_with_llama3_rope():
    hf = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rope_scaling=dict(LLAMA3),
                     max_position_embeddings=131072, rms_norm_eps=1e-5)
    hf._name_or_path = "meta-llama/Llama-3.1-8B-Instruct"
    cfg = Eagle3Config.from_target_config(hf)
    assert cfg.fused_layer_ids == [2, 16, 29]
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads) == (4096, 14336, 32)
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.target_hidden_size) == (8, 128, 4096)
    assert (cfg.target_vocab_size, cfg.draft_vocab_size) == (128256, 32000)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == LLAMA3
    assert (cfg.max_position_embeddings, cfg.rms_norm_eps, cfg.target_num_hidden_layers) == (131072, 1e-5, 32)
    assert cfg.target_name_or_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert cfg.fused_width == 3 * 4096 and cfg.norm_before_residual is False


@pytest.mark.parametrize("hf,expect", [
    (Qwen3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, vocab_size=500, rope_theta=1e6),
     dict(hidden_size=64, intermediate_size=96, num_key_value_heads=2, head_dim=32, rope_theta=1e6,
          target_vocab_size=500)),
    (Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=500),
     dict(hidden_size=64, num_key_value_heads=4, head_dim=16)),
    (MistralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=500, max_position_embeddings=4096),
     dict(num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6)),
    (GPT2Config(n_embd=48, n_layer=8, n_head=4, vocab_size=500, n_positions=512, layer_norm_epsilon=1e-5),
     dict(hidden_size=48, intermediate_size=192, num_attention_heads=4, num_key_value_heads=4, head_dim=12,
          max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None)),
    (GPTNeoXConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=8, num_attention_heads=4,
                   vocab_size=500, rotary_pct=0.25, rotary_emb_base=20000),
     dict(hidden_size=64, intermediate_size=256, num_key_value_heads=4, head_dim=16, rope_theta=20000.0,
          rope_scaling=None)),
])
def test_from_other_families(hf, expect):
    cfg = Eagle3Config.from_target_config(hf)
    assert cfg.fused_layer_ids == default_layer_ids(8) == [2, 4, 5]
    assert cfg.target_num_hidden_layers == 8 and cfg.draft_vocab_size == 500
    for key, value in expect.items():
        assert getattr(cfg, key) == value, key


def test_from_dict_target_config_and_overrides():
    hf = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100}
    cfg = Eagle3Config.from_target_config(hf, draft_vocab_size=50, fused_layer_ids=[0, 2, 4], norm_before_residual=True)
    assert (cfg.draft_vocab_size, cfg.fused_layer_ids, cfg.norm_before_residual) == (50, [0, 2, 4], True)
    assert cfg.intermediate_size == 128  # 4 * hidden when the target does not say
    with pytest.raises(ValueError, match="unknown override.*colour"):
        Eagle3Config.from_target_config(hf, colour="red")
    with pytest.raises(ValueError, match="num_hidden_layers"):
        Eagle3Config.from_target_config({"hidden_size": 32, "num_attention_heads": 4, "vocab_size": 100})


def test_yarn_is_copied_and_an_unsupported_rope_is_refused_unless_overridden():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    hf = LlamaConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, vocab_size=100,
                     max_position_embeddings=256, rope_scaling=dict(yarn))
    assert Eagle3Config.from_target_config(hf).rope_scaling == yarn
    long = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
            "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match="rope_scaling.*longrope"):
        Eagle3Config.from_target_config({"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
                                         "vocab_size": 100, "rope_scaling": long})
    assert Eagle3Config.from_target_config(hf, rope_scaling=None).rope_scaling is None


@pytest.mark.parametrize("overrides,field", [
    ({"hidden_size": 0}, "hidden_size"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"draft_vocab_size": 1000}, "draft_vocab_size"),
    ({"target_hidden_size": 64}, "target_hidden_size"),
    ({"head_dim": 7}, "head_dim"),
    ({"fused_layer_ids": [1, 2, 9]}, "fused_layer_ids"),
    ({"fused_layer_ids": []}, "fused_layer_ids"),
    ({"fused_layer_ids": None, "target_num_hidden_layers": None}, "fused_layer_ids"),
    ({"rope_theta": -1.0}, "rope_theta"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
    ({"rms_norm_eps": 0.0}, "rms_norm_eps"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"norm_before_residual": 1}, "norm_before_residual"),
    ({"target_name_or_path": None}, "target_name_or_path"),
])
def test_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**overrides)


def test_dict_round_trip_and_defaults():
    cfg = tiny_config(fused_layer_ids=None, rope_scaling={"type": "linear", "factor": 2.0})
    assert cfg.fused_layer_ids == default_layer_ids(4)
    assert cfg.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert Eagle3Config.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown key.*bogus"):
        Eagle3Config.from_dict({**cfg.to_dict(), "bogus": 1})


def test_eagle1_config_from_target():
    hf = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=100)
    cfg = Eagle1Head.config_from_target(hf)
    assert cfg.fused_layer_ids == [4] and cfg.draft_vocab_size == 100 and cfg.fused_width == 32
