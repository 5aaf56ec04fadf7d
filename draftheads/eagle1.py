"""EAGLE-1-style ablation baseline: the EAGLE-3 layer fed only the target's top feature, full vocabulary.

Same module as :class:`Eagle3Head` with one fused layer id (normally ``L``, the final-normed state that
enters ``lm_head``), so ``fc`` maps ``H_t -> H``, and ``draft_vocab_size == target_vocab_size`` (``d2t`` all
zeros, ``t2d`` all true).

Usage::

    head = Eagle1Head(Eagle1Head.config_from_target(target.config))
"""

from __future__ import annotations

from .config import Eagle3Config, target_dims
from .eagle3 import Eagle3Head


class Eagle1Head(Eagle3Head):
    head_type = "eagle1"

    def __init__(self, config: Eagle3Config):
        if len(config.fused_layer_ids) != 1:
            raise ValueError(f"fused_layer_ids: an eagle1 head reads exactly one layer, got {config.fused_layer_ids}")
        if config.draft_vocab_size != config.target_vocab_size:
            raise ValueError(
                f"draft_vocab_size={config.draft_vocab_size}: an eagle1 head uses the full target vocabulary "
                f"({config.target_vocab_size})"
            )
        super().__init__(config)

    @classmethod
    def config_from_target(cls, hf_config, **overrides) -> Eagle3Config:
        """Like ``Eagle3Config.from_target_config`` with ``fused_layer_ids=[L]`` and the full vocabulary."""
        dims = target_dims(hf_config)
        overrides.setdefault("fused_layer_ids", [dims["num_hidden_layers"]])
        overrides.setdefault("draft_vocab_size", dims["vocab_size"])
        return Eagle3Config.from_target_config(hf_config, **overrides)
