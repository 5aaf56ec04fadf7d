"""``head.fc_norm`` / ``head.norm_output`` in a training config build an EAGLE 3.1 head; bad values and a
mismatching ``head.init_from`` are refused naming the key."""

import pytest
import torch
import yaml

from eaglehead.builtin.typed_config import load_config
from eaglehead.draftheads import save_pretrained
from eaglehead.train import recipe as recipe_mod
from eaglehead.train.recipe import TrainConfig
from tests.tiny_models import save_tiny_target


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe31")
    save_tiny_target(root / "target")
    (root / "data.jsonl").write_text('{"text": "unused: build_head reads no data"}\n')
    return root


def config_file(root, head: dict, name="c"):
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(root / name), "model": {"target": str(root / "target")},
                                    "data": {"sources": [str(root / "data.jsonl")]},
                                    "head": {"draft_vocab_size": 1_000_000, **head}}))  # capped: the full vocabulary
    return path


def build(cfg):
    target, _ = recipe_mod.load_recipe_target(cfg.model, torch.device("cpu"))
    torch.manual_seed(0)
    return recipe_mod.build_head(cfg, target, None), target


@pytest.mark.parametrize("head_type", ["eagle3", "eagle1"])
def test_the_yaml_switches_build_an_eagle31_head(workspace, head_type):
    extra = {"fused_layer_ids": None} if head_type == "eagle1" else {}
    cfg = load_config(TrainConfig, config_file(workspace, {"type": head_type, "fc_norm": True, "norm_output": True,
                                                           **extra}))
    head, target = build(cfg)
    assert head.head_type == head_type and (head.config.fc_norm, head.config.norm_output) == (True, True)
    assert len(head.fc_norm) == len(head.config.fused_layer_ids)
    assert {k for k in head.state_dict() if k.startswith("fc_norm.")} == {
        f"fc_norm.{i}.weight" for i in range(len(head.config.fused_layer_ids))}
    # The defaults build the EAGLE-3 head, and an override switches one part on alone.
    plain, _ = build(load_config(TrainConfig, config_file(workspace, {"type": head_type, **extra})))
    assert plain.fc_norm is None and not plain.config.norm_output
    half, _ = build(load_config(TrainConfig, config_file(workspace, {"type": head_type, **extra}), ["head.fc_norm=true"]))
    assert (half.config.fc_norm, half.config.norm_output) == (True, False)


@pytest.mark.parametrize("key,value", [("fc_norm", "maybe"), ("norm_output", 1), ("fc_norm", None)])
def test_a_bad_value_is_refused_naming_the_key(workspace, key, value):
    with pytest.raises(ValueError, match=rf"key 'head\.{key}' expects bool, got {value!r}"):
        load_config(TrainConfig, config_file(workspace, {key: value}))
    with pytest.raises(ValueError, match=r"unknown key 'head\.fc_norms'"):
        load_config(TrainConfig, config_file(workspace, {}), ["head.fc_norms=true"])


def test_init_from_must_agree_with_the_switches(workspace):
    cfg = load_config(TrainConfig, config_file(workspace, {"fc_norm": True, "norm_output": True}))
    head, _ = build(cfg)
    save_pretrained(head, workspace / "head31")
    again, _ = build(load_config(TrainConfig, config_file(workspace, {
        "init_from": str(workspace / "head31"), "fc_norm": True, "norm_output": True})))
    assert again.config == head.config
    with pytest.raises(ValueError, match=r"head\.norm_output=False, but the head in head\.init_from=.*head31 has "
                                         r"norm_output=True; set head\.norm_output"):
        build(load_config(TrainConfig, config_file(workspace, {"init_from": str(workspace / "head31"),
                                                               "fc_norm": True})))
