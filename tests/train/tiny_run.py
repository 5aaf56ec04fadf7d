"""A tiny recipe run on a local target, for tests that need real checkpoints and snapshots (a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.tiny_models import save_tiny_target

CONVS = [
    ("add two numbers", "def add(a, b):\n    return a + b\n"),
    ("loop to ten", "for i in range(10):\n    print(i)\n"),
    ("a fox", "The quick brown fox jumps over the lazy dog."),
    ("a stack", "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"),
]


def make_workspace(root: Path) -> Path:
    """``root/target`` (a tiny Llama and its tokenizer) and ``root/data.jsonl`` (four conversations)."""
    save_tiny_target(root / "target")
    with (root / "data.jsonl").open("w") as f:
        for q, a in CONVS:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n")
    return root


def write_config(root: Path, name: str, **extra) -> Path:
    """A recipe YAML training into ``root/name``: 4 steps of 2 sequences, depth 2, a checkpoint every 2 steps;
    ``extra`` sets dotted keys (``optim.max_steps=6``)."""
    cfg = {
        "output_dir": str(root / name),
        "model": {"target": str(root / "target")},
        "data": {"sources": [str(root / "data.jsonl")], "max_length": 64},
        "head": {"draft_vocab_size": 100000, "intermediate_size": 32},
        "rollout": {"depth": 2},
        "optim": {"max_steps": 4, "micro_batch_size": 2, "warmup_steps": 1, "lr": 3e-3},
        "log_every": 1,
        "save_every": 2,
        "export": False,
    }
    return write_yaml(root / f"{name}.yaml", cfg, extra)


def write_yaml(path: Path, cfg: dict, extra: dict) -> Path:
    """``cfg`` with each dotted key of ``extra`` (``optim.max_steps``) set, written as YAML to ``path``."""
    for key, value in extra.items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_killed_after(path: Path, step: int, monkeypatch) -> None:
    """Train the config at ``path`` until its step-``step`` checkpoint is written, then die as a kill would
    (a ``KeyboardInterrupt``); checkpoints are saved normally again afterwards."""
    import pytest

    from eaglehead.builtin.typed_config import load_config
    from eaglehead.train import recipe as recipe_mod
    from eaglehead.train.recipe import TrainConfig
    from eaglehead.train.trainer import train

    real_save = recipe_mod.CheckpointStore.save

    def save_then_die(self, accelerator, at, state, config):
        out = real_save(self, accelerator, at, state, config)
        if at == step:
            raise KeyboardInterrupt(f"simulated kill after the step-{step} checkpoint")
        return out

    with monkeypatch.context() as mp:
        mp.setattr(recipe_mod.CheckpointStore, "save", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            train(load_config(TrainConfig, path))
