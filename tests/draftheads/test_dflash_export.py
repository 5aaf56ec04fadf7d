"""The DFlash drafter exported as vLLM 0.32 loads it (z-lab's ``DFlashDraftModel`` layout and the speculators
``dflash`` type) and loaded back by ``load_head``: the same config and weights, the same greedy decoding; the
layer ids and causality written as vLLM reads them; and every export or checkpoint vLLM would run differently
from our head refused by name (``DFlashExportError``). vLLM itself runs the export in
``tests/engines/test_vllm.py``."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglehead.decode import SamplingConfig, speculative_generate
from eaglehead.decode.dflash import DFlashDrafter
from eaglehead.draftheads.checkpoint import head_layout, load_head
from eaglehead.draftheads.dflash import DFlashConfig, DFlashHead
from eaglehead.draftheads.dflash_export import (DFlashExportError, export_dflash, vllm_speculative_config,
                                                zlab_config_dict)
from tests.tiny_models import tiny_llama

LAYERS, BLOCK = 4, 5
LAYOUT_NAMES = {"zlab": "dflash", "speculators": "speculators"}  # export layout -> head_layout's name


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=3, vocab=64, hidden=32, layers=LAYERS, initializer_range=0.2)


def make_head(target, ids=(1, 2, 3), seed: int = 0) -> DFlashHead:
    cfg = DFlashConfig.from_target_config(target.config, mask_token_id=5, fused_layer_ids=list(ids), block_size=BLOCK,
                                          num_hidden_layers=2, intermediate_size=48, target_name_or_path="tiny/llama")
    head = DFlashHead(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random everywhere, norm gains too, so a swapped or dropped weight shows
        for name, p in head.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.2 * noise if name.endswith("norm.weight") else 2.0 * noise / p.shape[-1] ** 0.5)
    return head


def _block_hidden(head: DFlashHead, target) -> torch.Tensor:
    """The drafter's block outputs over a seeded context: every weight of the head takes part."""
    head.bind_target(target)
    fused = torch.randn(1, 6, len(head.config.fused_layer_ids) * 32, generator=torch.Generator().manual_seed(1))
    kv = head.context_kv(head.context_states(fused), torch.arange(6)[None])
    return head.block_hidden(head.block_input(torch.tensor([3])), torch.arange(6, 6 + BLOCK)[None], kv, None)


def _decode(head: DFlashHead, target) -> tuple[list, list]:
    prompt = torch.tensor([[7, 3, 9, 11, 2, 30, 41, 8]])
    res = speculative_generate(target, DFlashDrafter(head, target), prompt, gamma=BLOCK - 1,
                               sampling=SamplingConfig(temperature=0), max_new_tokens=24)
    return res.tokens, [r.accepted for r in res.rounds]


@pytest.mark.parametrize("layout", ["zlab", "speculators"])
def test_round_trip_keeps_config_weights_and_decoding(target, tmp_path, layout):
    head = make_head(target)
    out = export_dflash(head, tmp_path / layout, layout=layout)
    assert head_layout(out) == LAYOUT_NAMES[layout]
    loaded = load_head(out, target_config=target.config)
    assert isinstance(loaded, DFlashHead) and loaded.config == head.config
    assert loaded.state_dict().keys() == head.state_dict().keys()
    for k, v in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    with torch.no_grad():
        assert torch.equal(_block_hidden(loaded, target), _block_hidden(head, target))
        assert _decode(loaded, target) == _decode(head, target)


def test_zlab_config_is_what_vllm_reads(target, tmp_path):
    head = make_head(target)
    out = export_dflash(head, tmp_path / "z", dtype=torch.bfloat16)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"] == {"mask_token_id": 5, "target_layer_ids": [0, 1, 2], "causal": False,
                                    "use_aux_hidden_state": True}  # z-lab ids: a layer's output = ours - 1
    assert "eagle_aux_hidden_state_layer_ids" not in cfg  # vLLM would read it before target_layer_ids
    assert cfg["block_size"] == BLOCK and cfg["num_target_layers"] == LAYERS and cfg["head_dim"] == 8
    assert cfg["rope_parameters"]["rope_theta"] == head.config.rope_theta  # vLLM's default would be 1e6
    assert cfg["layer_types"] == ["full_attention"] * 2 and cfg["torch_dtype"] == "bfloat16"
    state = load_file(out / "model.safetensors")
    assert not [k for k in state if "embed" in k or "lm_head" in k]  # vLLM shares the target's
    assert {v.dtype for v in state.values()} == {torch.bfloat16}


def test_speculators_config_is_what_vllm_reads(target, tmp_path):
    out = export_dflash(make_head(target), tmp_path / "s", layout="speculators")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "dflash" and cfg["aux_hidden_state_layer_ids"] == [1, 2, 3]  # ours
    assert cfg["sliding_window_non_causal"] is True  # vLLM: causal = not this, every layer
    assert cfg["mask_token_id"] == 5 and cfg["block_size"] == BLOCK
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == BLOCK - 1
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "tiny/llama"


def test_speculative_config_defaults_to_the_trained_block(tmp_path):
    assert vllm_speculative_config(tmp_path, 16) == {"method": "dflash", "model": str(tmp_path),
                                                     "num_speculative_tokens": 15}
    assert vllm_speculative_config(tmp_path, 16, 3)["num_speculative_tokens"] == 3
    with pytest.raises(DFlashExportError, match="drafts 1..15 tokens"):
        vllm_speculative_config(tmp_path, 16, 16)


# ---------------------------------------------------------------- refusals
def test_export_refusals(target, tmp_path):
    with pytest.raises(DFlashExportError, match="final-normed state"):
        zlab_config_dict(make_head(target, ids=(2, LAYERS)))
    head = make_head(target)
    with pytest.raises(DFlashExportError, match="layout must be one of"):
        export_dflash(head, tmp_path / "x", layout="eagle3")
    with pytest.raises(DFlashExportError, match="speculative_tokens=5"):
        export_dflash(head, tmp_path / "y", layout="speculators", speculative_tokens=BLOCK)
    with pytest.raises(DFlashExportError, match="floating dtype"):
        export_dflash(head, tmp_path / "w", dtype=torch.int8)
    export_dflash(head, tmp_path / "z")
    with pytest.raises(DFlashExportError, match="not empty"):
        export_dflash(head, tmp_path / "z")
    export_dflash(head, tmp_path / "z", overwrite=True)


def _edited(src, dst, edit=None, state_edit=None):
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    if edit:
        edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    state = load_file(src / "model.safetensors")
    if state_edit:
        state_edit(state)
    save_file(state, dst / "model.safetensors")
    return dst


def _set(path: str, value):
    def edit(cfg):
        *outer, last = path.split(".")
        for k in outer:
            cfg = cfg.setdefault(k, {})
        cfg[last] = value
    return edit


ZLAB_REFUSALS = [
    (_set("is_causal", True), "is_causal: vLLM would run the block causally"),
    (_set("dflash_config.causal", True), "dflash_config.causal: vLLM would run the block causally"),
    (_set("dflash_config.use_swa", True), "use_swa: sliding-window"),
    (_set("layer_types", ["sliding_attention", "full_attention"]), "layer_types: sliding-window"),
    (_set("attention_bias", True), "attention_bias is set"),
    (_set("dflash_config.attention_sink_bias", True), "attention_sink_bias is set"),
    (_set("is_neox_style", False), "is_neox_style=false is set"),
    (_set("dflash_config.sample_from_anchor", True), "sample_from_anchor is set"),
    (_set("draft_vocab_size", 32), "draft_vocab_size 32 != vocab_size 64"),
    (_set("eagle_aux_hidden_state_layer_ids", [0, 1, 2]), "eagle_aux_hidden_state_layer_ids .* disagree"),
    (_set("architectures", ["DFlash2DraftModel"]), "only \\['DFlashDraftModel'\\]"),
    (lambda c: c["dflash_config"].pop("mask_token_id"), "needs target_layer_ids and mask_token_id"),
    (lambda c: c.pop("block_size"), "missing key 'block_size'"),
    (lambda c: (c.pop("rope_parameters"), c.pop("rope_theta")), "no rope_theta"),
]


@pytest.mark.parametrize("edit, message", ZLAB_REFUSALS, ids=[m.split(":")[0][:30] for _, m in ZLAB_REFUSALS])
def test_zlab_checkpoints_vllm_runs_differently_are_refused(target, tmp_path, edit, message):
    src = export_dflash(make_head(target), tmp_path / "src")
    with pytest.raises(DFlashExportError, match=message):
        load_head(_edited(src, tmp_path / "bad", edit))


def test_speculators_refusals(target, tmp_path):
    src = export_dflash(make_head(target), tmp_path / "src", layout="speculators")
    with pytest.raises(DFlashExportError, match="sliding_window_non_causal=false: vLLM would run the block causally"):
        load_head(_edited(src, tmp_path / "a", _set("sliding_window_non_causal", False)))
    with pytest.raises(DFlashExportError, match="dflash2 adds a convolution"):
        load_head(_edited(src, tmp_path / "b", _set("speculators_model_type", "dflash2")))
    with pytest.raises(DFlashExportError, match="missing key 'aux_hidden_state_layer_ids'"):
        load_head(_edited(src, tmp_path / "c", lambda c: c.pop("aux_hidden_state_layer_ids")))


def test_weights_and_files_the_head_cannot_use_are_refused(target, tmp_path):
    src = export_dflash(make_head(target), tmp_path / "src")
    own_embedding = _edited(src, tmp_path / "emb", state_edit=lambda s: s.update(
        {"embed_tokens.weight": torch.zeros(64, 32)}))
    with pytest.raises(DFlashExportError, match="shares the target's embedding"):
        load_head(own_embedding)
    mask = _edited(src, tmp_path / "mask")
    torch.save(torch.zeros(32), mask / "mask_embedding.pt")
    with pytest.raises(DFlashExportError, match="separate mask embedding"):
        load_head(mask)
    with pytest.raises(ValueError, match="target_num_hidden_layers"):  # checked against the target once loaded
        load_head(src, target_config=tiny_llama(vocab=64, hidden=32, layers=2).config)
