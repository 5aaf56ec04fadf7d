"""EAGLE-1-style ablation baseline: the EAGLE-3 layer fed only the target's top feature.

Same module as :class:`Eagle3Head` with one fused layer id (normally ``L``, the final-normed state that
enters ``lm_head``), so ``fc`` maps ``H_t -> H``. By default ``draft_vocab_size == target_vocab_size``
(``d2t`` all zeros, ``t2d`` all true), as EAGLE-1 was published; a reduced draft vocabulary (as EAGLE-3's)
is allowed, which makes it an ablation of layer fusion alone.

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
        super().__init__(config)

    @classmethod
    def config_from_target(cls, hf_config, **overrides) -> Eagle3Config:
        """Like ``Eagle3Config.from_target_config`` with ``fused_layer_ids=[L]`` and, unless overridden,
        the full vocabulary."""
        dims = target_dims(hf_config)
        overrides.setdefault("fused_layer_ids", [dims["num_hidden_layers"]])
        overrides.setdefault("draft_vocab_size", dims["vocab_size"])
        return Eagle3Config.from_target_config(hf_config, **overrides)
