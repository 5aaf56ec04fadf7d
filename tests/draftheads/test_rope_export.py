"""The head's attention under every RoPE variant equals transformers' Llama attention built from the *exported*
config.json (what vLLM's and SGLang's Llama layer read), and the exported layer ids read the same in vLLM and in
SGLang before and after its PR #25454."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

from eaglehead.draftheads import Eagle3Config, Eagle3Head
from eaglehead.draftheads.checkpoint import export_eagle3, export_speculators, load_head
from eaglehead.draftheads.eagle3 import causal_mask, attend

from .common import randomise, tiny_config

ROPES = {
    "default": (10000.0, None),
    "linear": (10000.0, {"rope_type": "linear", "factor": 4.0}),
    "llama3": (500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}),
    # GPT-OSS-20B's numbers, and long-context Qwen3's (no betas: the defaults 32/1, truncate True).
    "yarn-gpt-oss": (150000.0, {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                "original_max_position_embeddings": 4096, "truncate": False}),
    "yarn-qwen3": (1000000.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    "dynamic": (10000.0, {"rope_type": "dynamic", "factor": 2.0}),
}
MAX_POSITIONS = 131072


@pytest.mark.parametrize("name", list(ROPES))
def test_attention_equals_transformers_llama_from_the_exported_config(name, tmp_path):
    theta, scaling = ROPES[name]
    head = randomise(Eagle3Head(tiny_config(rope_theta=theta, rope_scaling=scaling,
                                            max_position_embeddings=MAX_POSITIONS)), seed=1)
    raw = json.loads((export_eagle3(head, tmp_path / "e") / "config.json").read_text())
    assert raw["rope_parameters"]["rope_type"] == (scaling or {}).get("rope_type", "default")
    assert raw["rope_parameters"]["rope_theta"] == theta
    layer_keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "rms_norm_eps", "rope_parameters", "max_position_embeddings", "vocab_size")
    hf_cfg = LlamaConfig(**{k: raw[k] for k in layer_keys}, attn_implementation="eager")
    # The engines' layer: q/k/v read the 2H-wide [norm(emb); norm(h)], so the projections are the head's own.
    ref = LlamaAttention(hf_cfg, layer_idx=0)
    att = head.midlayer.self_attn
    ref.q_proj, ref.k_proj, ref.v_proj, ref.o_proj = att.q_proj, att.k_proj, att.v_proj, att.o_proj
    gen = torch.Generator().manual_seed(0)
    b, t, h = 2, 6, head.config.hidden_size
    emb, hidden = torch.randn(b, t, h, generator=gen), torch.randn(b, t, h, generator=gen)
    # Long positions, where the variants differ most (all below max_position_embeddings, where dynamic NTK is plain).
    positions = torch.tensor([[0, 1, 2, 7, 100, 5000], [3, 4, 40, 9000, 20000, 131071]])
    with torch.no_grad():
        q, k, v, _ = head.qkv(emb, hidden, positions)
        ours = att.o_proj(attend(q, k, v, causal_mask(None, t)))
        x = torch.cat((head.midlayer.input_layernorm(emb), head.midlayer.hidden_norm(hidden)), dim=-1)
        cos_sin = LlamaRotaryEmbedding(hf_cfg)(x, positions)
        mask = torch.full((t, t), float("-inf")).triu(1)[None, None]  # eager adds the mask: additive
        theirs, _ = ref(x, position_embeddings=cos_sin, attention_mask=mask)
    # float32; the longest angle (131071 rad) loses ~1e-5 in cos/sin: 1e-4 absolute on outputs of magnitude ~1.
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert load_head(tmp_path / "e").config.rope_scaling == head.config.rope_scaling


def test_yarn_changes_the_attention():
    """The parity above would pass for any rope if both sides ignored it: YaRN must differ from plain RoPE."""
    theta, scaling = ROPES["yarn-gpt-oss"]
    plain = randomise(Eagle3Head(tiny_config(rope_theta=theta, max_position_embeddings=MAX_POSITIONS)), seed=1)
    yarn = randomise(Eagle3Head(tiny_config(rope_theta=theta, rope_scaling=scaling,
                                            max_position_embeddings=MAX_POSITIONS)), seed=1)
    pos = torch.tensor([[10, 5000, 60000]])
    assert not torch.allclose(plain.rope(pos)[0], yarn.rope(pos)[0], atol=1e-3)


@pytest.mark.parametrize("bad,match", [
    ({"rope_type": "yarn", "factor": 4.0}, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, "beta_fats": 32}, "beta_fats"),
    ({"rope_type": "dynamic"}, "factor"),
    ({"rope_type": "longrope", "factor": 2.0}, "longrope"),
])
def test_bad_rope_is_refused_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(rope_scaling=bad)


# ---------------------------------------------------------------- layer ids as each engine reads them
def vllm_boundaries(config: dict) -> list[int]:
    """vLLM: the top-level ids, boundary indices (id k = input of decoder layer k)."""
    return list(config["eagle_aux_hidden_state_layer_ids"])


def sglang_boundaries(config: dict, after_25454: bool) -> list[int]:
    """SGLang reads eagle_config's ids into ``layers_to_capture`` (the input of layer k is captured): always plus one
    before PR #25454 (and in its llama/qwen3 models), plus one only when the first id is 1 after it."""
    ids = list(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    return [i + 1 for i in ids] if not after_25454 or ids[0] == 1 else ids


@pytest.mark.parametrize("layers", [8, 28, 32, 36, 48, 62])
@pytest.mark.parametrize("speculators", [False, True])
def test_default_ids_read_the_same_in_vllm_and_both_sglang_conventions(layers, speculators, tmp_path):
    from eaglehead.draftheads.taps import default_layer_ids

    head = randomise(Eagle3Head(tiny_config(fused_layer_ids=None, target_num_hidden_layers=layers)))
    ids = default_layer_ids(layers)
    assert ids[0] == 2  # the one first id both SGLang conventions read alike (documented in checkpoint.py)
    out = (export_speculators if speculators else export_eagle3)(head, tmp_path / "x")
    raw = json.loads((out / "config.json").read_text())
    assert raw["norm_before_residual"] is False  # written, never left to speculators' default (True)
    assert vllm_boundaries(raw) == ids
    if not speculators:  # SGLang loads the EAGLE-3 layout
        assert sglang_boundaries(raw, after_25454=False) == sglang_boundaries(raw, after_25454=True) == ids
    assert load_head(out).config.fused_layer_ids == ids


def test_sglang_convention_is_ambiguous_off_first_id_two(tmp_path):
    """Off a first id of 2 no list reads alike in both SGLang conventions; the export keeps the always-plus-one one
    (SGLang's llama/qwen3/gpt-oss models) and says so in its provenance."""
    head = randomise(Eagle3Head(tiny_config(fused_layer_ids=[1, 2, 3])))
    raw = json.loads((export_eagle3(head, tmp_path / "x") / "config.json").read_text())
    assert sglang_boundaries(raw, after_25454=False) == [1, 2, 3] == vllm_boundaries(raw)
    assert sglang_boundaries(raw, after_25454=True) != [1, 2, 3]
    assert raw["eaglehead"]["sglang_layer_ids"] == "plus-one"
    assert isinstance(Eagle3Config.from_dict(head.config.to_dict()), Eagle3Config)
