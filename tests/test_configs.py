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
    assert {"smoke.yaml", "llama3.1-8b-instruct.yaml", "qwen3-8b.yaml", "qwen3-30b-a3b.yaml", "gpt-oss-20b.yaml",
            "gemma3-12b.yaml"} <= names
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


# The public config.json numbers of each recipe's target (read off the hub pages; no download here). Gemma 3's is
# its text_config, the part the head reads.
_LLAMA31 = dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, intermediate_size=14336, vocab_size=128256, rms_norm_eps=1e-5,
                max_position_embeddings=131072, tie_word_embeddings=False,
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
_QWEN3_8B = dict(model_type="qwen3", hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936, rms_norm_eps=1e-6,
                 max_position_embeddings=40960, tie_word_embeddings=False,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
TARGET_SHAPES = {
    "meta-llama/Llama-3.1-8B-Instruct": (_LLAMA31, [2, 16, 29]),
    "Qwen/Qwen3-8B": (_QWEN3_8B, [2, 18, 33]),
    "Qwen/Qwen3-30B-A3B": (dict(_QWEN3_8B, model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48,
                                num_key_value_heads=4, intermediate_size=6144, moe_intermediate_size=768,
                                num_experts=128, num_experts_per_tok=8), [2, 24, 45]),
    "openai/gpt-oss-20b": (dict(model_type="gpt_oss", hidden_size=2880, num_hidden_layers=24, num_attention_heads=64,
                                num_key_value_heads=8, head_dim=64, intermediate_size=2880, vocab_size=201088,
                                rms_norm_eps=1e-5, max_position_embeddings=131072, sliding_window=128,
                                num_local_experts=32, num_experts_per_tok=4, tie_word_embeddings=False,
                                layer_types=["sliding_attention", "full_attention"] * 12,
                                rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                                 "original_max_position_embeddings": 4096}), [2, 12, 21]),
    "google/gemma-3-12b-it": (dict(model_type="gemma3_text", hidden_size=3840, num_hidden_layers=48,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                                   intermediate_size=15360, vocab_size=262208, rms_norm_eps=1e-6,
                                   max_position_embeddings=131072, sliding_window=1024, query_pre_attn_scalar=256,
                                   tie_word_embeddings=True,
                                   layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 8,
                                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                       "rope_theta": 1000000.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10000.0}}), [2, 24, 45]),
}
FAMILY_RECIPES = {"llama3.1-8b-instruct.yaml", "qwen3-8b.yaml", "qwen3-30b-a3b.yaml", "gpt-oss-20b.yaml",
                  "gemma3-12b.yaml"}


@pytest.mark.parametrize("name", sorted(FAMILY_RECIPES))
def test_family_recipe_builds_its_head_from_the_real_targets_shapes(name):
    """The recipe's head section resolves against its target's real config (built offline by transformers' own
    config class): the fused ids are the engines' default boundaries, the head has the target's width and heads,
    and the target's RoPE (llama3, YaRN, Gemma's full-attention linear) is copied and computable."""
    import torch
    from transformers import AutoConfig

    from eaglehead.draftheads import Eagle3Config, Eagle3Head
    from eaglehead.draftheads.eagle3 import rope_frequencies
    from eaglehead.draftheads.taps import default_layer_ids

    cfg = load_config(TrainConfig, CONFIGS / name)
    shape, ids = TARGET_SHAPES[cfg.model.target]
    kwargs = dict(shape)
    hf = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    overrides = {k: v for k, v in (("fused_layer_ids", cfg.head.fused_layer_ids),
                                   ("intermediate_size", cfg.head.intermediate_size)) if v is not None}
    head_cfg = Eagle3Config.from_target_config(hf, draft_vocab_size=cfg.head.draft_vocab_size, **overrides)
    assert head_cfg.fused_layer_ids == ids == default_layer_ids(shape["num_hidden_layers"])
    assert (head_cfg.hidden_size, head_cfg.head_dim, head_cfg.num_key_value_heads) == (
        shape["hidden_size"], shape["head_dim"], shape["num_key_value_heads"])
    rope = shape["rope_parameters"].get("full_attention", shape["rope_parameters"])
    assert (head_cfg.rope_scaling or {}).get("rope_type", "default") == rope["rope_type"]
    assert head_cfg.rope_theta == rope["rope_theta"]
    with torch.device("meta"):
        head = Eagle3Head(head_cfg)
    assert head.fc.weight.shape == (shape["hidden_size"], 3 * shape["hidden_size"])
    assert head.lm_head.weight.shape == (32000, shape["hidden_size"])
    inv, scale = rope_frequencies(head_cfg.head_dim, head_cfg.rope_theta, head_cfg.rope_scaling,
                                  max_position_embeddings=head_cfg.max_position_embeddings)
    assert inv.shape == (shape["head_dim"] // 2,) and bool(torch.isfinite(inv).all()) and scale >= 1.0
    assert f"--config configs/{name}" in (CONFIGS / name).read_text().split("output_dir")[0]
