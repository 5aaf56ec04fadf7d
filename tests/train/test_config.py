"""The typed YAML loader: nested dataclasses, unknown keys, type checks, overrides, saving."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest
import yaml

from eaglehead.builtin.typed_config import changed_fields, config_from_dict, dump_config, flatten, load_config, save_config
from eaglehead.train.config import DataConfig, FeatureCacheConfig


@dataclass
class Optim:
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup: int = 0
    compile: bool = False
    note: Optional[str] = None  # noqa: UP045 -- typing.Optional must work as well as `X | None`


@dataclass
class Recipe:
    data: DataConfig
    optim: Optim = field(default_factory=Optim)
    feature_cache: FeatureCacheConfig = field(default_factory=FeatureCacheConfig)
    layer_ids: list[int] | None = None
    extra: Optim | None = None
    tags: dict[str, int] = field(default_factory=dict)


def write(tmp_path, text: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_loads_nested_yaml_and_converts_scientific_strings(tmp_path):
    # PyYAML reads `1e-4` (no dot) as a string; a float field accepts it.
    path = write(tmp_path, """
data:
  sources: [a.jsonl, b.jsonl]
  max_length: 512
optim:
  lr: 1e-4
  betas: [0.8, 1]
  schedule: constant
layer_ids: [2, 5, 8]
extra: {warmup: 3}
tags: {a: 1}
""")
    cfg = load_config(Recipe, path)
    assert cfg.data.sources == ["a.jsonl", "b.jsonl"] and cfg.data.max_length == 512
    assert cfg.data.format == "auto" and cfg.data.regenerate is False
    assert cfg.optim.lr == 1e-4 and isinstance(cfg.optim.lr, float)
    assert cfg.optim.betas == [0.8, 1.0] and all(isinstance(b, float) for b in cfg.optim.betas)
    assert cfg.optim.schedule == "constant"
    assert cfg.layer_ids == [2, 5, 8]
    assert cfg.extra == Optim(warmup=3)
    assert cfg.tags == {"a": 1}
    assert cfg.feature_cache == FeatureCacheConfig()


@pytest.mark.parametrize(
    "text, needles",
    [
        ("data: {sources: [x], bogus: 1}", ["unknown key 'data.bogus'", "recipe.yaml"]),
        ("data: {sources: [x]}\noptim: {lr: 0.1, betaz: [1]}", ["unknown key 'optim.betaz'"]),
        ("data: {sources: [x]}\nextra: {nope: 1}", ["unknown key 'extra.nope'"]),
        ("data: {sources: [x]}\noptim: {warmup: ten}", ["'optim.warmup'", "int", "'ten'"]),
        ("data: {sources: [x]}\noptim: {warmup: 1.5}", ["'optim.warmup'", "int", "1.5"]),
        ("data: {sources: [x]}\noptim: {warmup: true}", ["'optim.warmup'", "int", "True"]),
        ("data: {sources: [x]}\noptim: {compile: 1}", ["'optim.compile'", "bool", "1"]),
        ("data: {sources: [x]}\noptim: {lr: fast}", ["'optim.lr'", "float", "'fast'"]),
        ("data: {sources: [x]}\noptim: {schedule: linear}", ["'optim.schedule'", "'cosine'", "'linear'"]),
        ("data: {sources: [x]}\noptim: {betas: [0.9, x]}", ["'optim.betas[1]'", "float", "'x'"]),
        ("data: {sources: [x]}\noptim: {note: 3}", ["'optim.note'", "str or null", "3"]),
        ("data: {sources: [x]}\nlayer_ids: 3", ["'layer_ids'", "list of int"]),
        ("data: {sources: [x]}\noptim: 5", ["'optim'", "Optim"]),
        ("data: {sources: [x], format: json}", ["'data.format'", "'sharegpt'"]),
        ("optim: {lr: 0.1}", ["missing required key", "data"]),
        ("data: {format: text}", ["missing required key", "data.sources"]),
        ("data: {sources: [x], max_length: 0}", ["recipe.yaml", "data.max_length", "positive"]),
        ("data: {sources: [x]}\nfeature_cache: {shard_size: -1}", ["feature_cache.shard_size"]),
        ("data: {sources: [x], test_fraction: 1.5}", ["data.test_fraction"]),
        ("- a\n- b", ["top level must be a mapping"]),
    ],
)
def test_rejects_bad_configs_naming_the_key(tmp_path, text, needles):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as err:
        load_config(Recipe, path)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_overrides_are_yaml_scalars_and_checked(tmp_path):
    path = write(tmp_path, "data: {sources: [x]}\noptim: {note: hi}")
    cfg = load_config(
        Recipe, path,
        ["optim.lr=3e-4", "data.max_length=128", "optim.note=null", "layer_ids=[1, 2, 3]",
         "extra.warmup=7", "data.chat_template={{ x }}", "data.system_prompt=a=b", "tags.b=2"],
    )
    assert cfg.tags == {"b": 2} and cfg.data.chat_template == "{{ x }}"  # not YAML: kept as text
    assert cfg.optim.lr == 3e-4 and cfg.data.max_length == 128 and cfg.optim.note is None
    assert cfg.layer_ids == [1, 2, 3] and cfg.extra == Optim(warmup=7)
    assert cfg.data.system_prompt == "a=b"  # split on the first '=' only
    with pytest.raises(ValueError, match="unknown key 'optim.lrr'"):
        load_config(Recipe, path, ["optim.lrr=1"])
    with pytest.raises(ValueError, match="unknown key 'data.max_length.x'"):
        load_config(Recipe, path, ["data.max_length.x=1"])
    with pytest.raises(ValueError, match="key.sub=value"):
        load_config(Recipe, path, ["optim.lr"])
    with pytest.raises(ValueError, match="'data.max_length'.*int"):
        load_config(Recipe, path, ["data.max_length=long"])


def test_save_writes_every_resolved_field_and_round_trips(tmp_path):
    cfg = load_config(Recipe, write(tmp_path, "data: {sources: [x]}"), ["optim.lr=2e-5", "layer_ids=[1,2,3]"])
    out = tmp_path / "run" / "config.yaml"
    save_config(cfg, out)
    raw = yaml.safe_load(out.read_text())
    assert raw["optim"]["lr"] == 2e-5 and raw["data"]["max_length"] == 2048
    assert raw["feature_cache"] == {"dir": None, "shard_size": 64, "dtype": "bfloat16", "batch_size": 8}
    assert load_config(Recipe, out) == cfg
    assert config_from_dict(Recipe, dump_config(cfg)) == cfg
    with pytest.raises(ValueError, match="dataclass instance"):
        dump_config(Recipe)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="nothere.yaml"):
        load_config(Recipe, tmp_path / "nothere.yaml")


def test_changed_fields_compares_flattened_configs_and_reads_absent_keys_at_their_stated_value():
    old = flatten({"seed": 0, "head": {"fc_norm": False, "layers": [1, 2]}, "data": {"max_length": 512}})
    assert old == {"seed": 0, "head.fc_norm": False, "head.layers": [1, 2], "data.max_length": 512}
    new = flatten({"seed": 0, "head": {"fc_norm": True, "layers": [1, 2], "added": 3}, "data": {}})
    assert changed_fields(old, new) == [("data.max_length", 512, None), ("head.added", None, 3),
                                        ("head.fc_norm", False, True)]
    # a field the old config predates, at the value that reproduces the old behaviour, is no change
    assert changed_fields(old, new, absent={"head.added": 3, "data.max_length": 512}) == [("head.fc_norm", False, True)]
    assert changed_fields(old, dict(old)) == []
