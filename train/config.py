"""The data side's config sections, shared by the training recipe and ``eaglehead prepare``.

The loader (typed YAML, unknown keys rejected, overrides) is :mod:`eaglehead.builtin.typed_config`::

    cfg = load_config(TrainConfig, "configs/demo.yaml", ["data.max_length=4096"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .chat_rows import THINKING_MARKERS, check_flag, check_thinking_markers

__all__ = ["DataConfig", "FeatureCacheConfig"]


@dataclass
class DataConfig:
    """Where the conversations come from and how they become token ids plus a loss mask.

    ``sources``: local ``.json``/``.jsonl``/``.parquet`` files, local dataset folders, or hub dataset
    names (``datasets.load_dataset``); all are concatenated. ``format``: ``auto`` picks per source from
    its columns (``conversations`` = ShareGPT, ``messages`` = OpenAI style, ``text`` = plain text).
    """

    sources: list[str]
    format: Literal["auto", "sharegpt", "messages", "text"] = "auto"
    split: str = "train"  # split to read from hub datasets and dataset folders
    max_samples: int | None = None  # keep the first N conversations (quick runs)
    max_length: int = 2048  # tokens per sequence after the chat template; longer ones are truncated
    chat_template: str | None = None  # Jinja string or path to a .jinja file; None = tokenizer's own
    system_prompt: str | None = None  # prepended where a conversation has no system message
    # auto: one row per conversation when the chat template is prefix-stable, a row per assistant turn when it
    # rewrites earlier turns (Qwen3, GPT-OSS, DeepSeek-R1: train/chat_rows.py); whole: refuse such a template;
    # per_turn: always a row per assistant turn
    turn_rows: Literal["auto", "whole", "per_turn"] = "auto"
    # Reasoning targets (train/chat_rows.py): false takes the loss off the thinking spans of assistant turns (from
    # the opening marker through the closing one, both included; one never closed, an answer cut at the length
    # limit, to the end of the turn); the rest of each answer keeps it. true: rows as before
    thinking_loss: bool = True
    thinking_markers: list[str] = field(default_factory=lambda: list(THINKING_MARKERS))  # [opening, closing]
    last_turn_only: bool = False  # true: only the last assistant turn of each conversation carries loss
    regenerate: bool = False  # replace assistant turns by the target's own generations
    regen_temperature: float = 0.0  # 0 = greedy
    regen_max_new_tokens: int = 1024
    regen_batch_size: int = 16
    # Passed to the chat template as ``enable_thinking`` when the target answers (Qwen3-style reasoning targets):
    # null leaves the template's default; true/false is refused for a template that never reads the variable
    regen_enable_thinking: bool | None = None
    num_proc: int = 1  # worker processes for tokenisation
    test_fraction: float = 0.0  # held-out share for evaluation (0 = no test split)
    seed: int = 0  # for the train/test split and regeneration sampling

    def __post_init__(self):
        if not self.sources:
            raise ValueError("sources: give at least one data file, folder or hub dataset name")
        for name in ("max_length", "regen_max_new_tokens", "regen_batch_size", "num_proc"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)}")
        if self.max_samples is not None and self.max_samples < 1:
            raise ValueError(f"max_samples: expected a positive integer or null, got {self.max_samples}")
        if self.regen_temperature < 0:
            raise ValueError(f"regen_temperature: expected >= 0, got {self.regen_temperature}")
        if self.regen_enable_thinking is not None and not isinstance(self.regen_enable_thinking, bool):
            raise ValueError(f"regen_enable_thinking: expected null, true or false, got {self.regen_enable_thinking!r}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"test_fraction: expected a value in [0, 1), got {self.test_fraction}")
        check_flag(self.thinking_loss, "thinking_loss")
        check_flag(self.last_turn_only, "last_turn_only")
        check_thinking_markers(self.thinking_markers, "thinking_markers")


@dataclass
class FeatureCacheConfig:
    """Offline target features: written once by ``eaglehead prepare``; ``dir: null`` = online mode.

    A shard holds ``shard_size`` sequences and is built in memory before it is written, so it needs
    about ``shard_size * mean_length * 4 * H * bytes(dtype)`` of host memory (H = target hidden size).
    """

    dir: str | None = None
    shard_size: int = 64
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    batch_size: int = 8  # sequences per target forward while caching

    def __post_init__(self):
        for name in ("shard_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)}")
