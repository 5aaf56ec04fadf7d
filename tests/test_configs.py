"""Every YAML in configs/ loads: training configs against TrainConfig, accelerate configs against
accelerate's own config class (and the DeepSpeed ones through its DeepSpeed plugin)."""

from pathlib import Path

import pytest
import yaml

from eaglehead.builtin.typed_config import load_config
from eaglehead.train.recipe import TrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DATA = sorted(CONFIGS.glob("*-data*.yaml"))  # chat data the target writes (eaglehead.datagen)
DRAFT_LM = sorted(CONFIGS.glob("*-draft-lm.yaml"))  # small draft LMs with a target's tokenizer (eaglehead.pretrain.draft_lm)
TRAIN = sorted(set(CONFIGS.glob("*.yaml")) - set(DATA) - set(DRAFT_LM))
ACCEL = sorted((CONFIGS / "accelerate").glob("*.yaml"))


def test_configs_exist():
    names = {p.name for p in TRAIN} | {p.name for p in ACCEL}
    assert {"smoke.yaml", "llama3.1-8b-instruct.yaml", "qwen3-8b.yaml"} <= names
    assert {"cpu.yaml", "cpu_ddp.yaml", "single_gpu.yaml", "multi_gpu.yaml", "zero2.yaml", "zero3.yaml",
            "multi_node.yaml"} <= names


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: p.name)
def test_training_config_loads_and_documents_its_launch_command(path):
    cfg = load_config(TrainConfig, path)
    assert cfg.rollout.depth >= 1 and cfg.optim.max_steps >= 1
    header = path.read_text().split("\n", 3)
    assert any("eaglehead" in line for line in header if line.startswith("#"))


@pytest.mark.parametrize("path", DATA, ids=lambda p: p.name)
def test_chat_data_config_loads_and_documents_its_command(path):
    from eaglehead.datagen.config import ChatDataConfig

    cfg = load_config(ChatDataConfig, path)
    s = cfg.synthesis
    assert s.magpie_prompts + s.stdlib_prompts + s.pydoc_prompts + s.category_prompts > 0
    assert any(line.startswith("#") and "eaglehead prepare --data-config" in line
               for line in path.read_text().splitlines())


@pytest.mark.parametrize("kind", ["data", "data-tasks"])
def test_the_smollm2_data_configs_still_resolve_to_the_shipped_datas_config(kind):
    """Rerunning a data config on a directory of the shipped data must resume it, not refuse it: what the config
    resolves to (fields added later at the value that wrote the data, e.g. ``sampler: exponential-race``, left out)
    equals the ``data_config.json`` shipped with the data."""
    import json

    from eaglehead.datagen.config import ChatDataConfig, shard_defining
    from eaglehead.demos.smollm2 import ASSETS, DATA_CONFIGS

    shipped = CONFIGS.parent / "builtin" / "assets" / ASSETS[kind] / "data_config.json"
    cfg = load_config(ChatDataConfig, DATA_CONFIGS[kind])
    assert json.dumps(shard_defining(cfg), indent=2, sort_keys=True) == shipped.read_text()
    cfg.sampler = "inverse-cdf"  # the default draws another stream: it must not pass for the shipped data's config
    assert json.dumps(shard_defining(cfg), indent=2, sort_keys=True) != shipped.read_text()


@pytest.mark.parametrize("path", DRAFT_LM, ids=lambda p: p.name)
def test_draft_lm_config_loads_and_documents_its_command(path):
    from eaglehead.pretrain.draft_lm import DraftLMConfig

    cfg = load_config(DraftLMConfig, path)
    assert cfg.steps >= 1 and cfg.target and cfg.data
    assert any(line.startswith("#") and f"python -m eaglehead.pretrain.draft_lm --config configs/{path.name}" in line
               for line in path.read_text().splitlines())


@pytest.mark.parametrize("path", ACCEL, ids=lambda p: p.name)
def test_accelerate_config_is_valid(path):
    from accelerate.commands.config.config_args import ClusterConfig

    cfg = ClusterConfig.from_yaml_file(str(path))
    assert cfg.num_processes >= 1
    comments = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert any("accelerate launch" in line for line in comments)  # the launch command is documented
    if cfg.distributed_type == "DEEPSPEED" or str(cfg.distributed_type).endswith("DEEPSPEED"):
        from accelerate.utils import DeepSpeedPlugin

        ds = yaml.safe_load(path.read_text())["deepspeed_config"]
        plugin = DeepSpeedPlugin(zero_stage=ds["zero_stage"], gradient_accumulation_steps=ds["gradient_accumulation_steps"],
                                 gradient_clipping=ds["gradient_clipping"])
        assert plugin.zero_stage == ds["zero_stage"] in (2, 3)
