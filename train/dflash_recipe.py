"""The recipe's ``dflash:`` section and the drafter it builds (``head.type: dflash``).

``head.fused_layer_ids`` (default: five evenly spaced target layers, ``default_dflash_layer_ids``) and
``head.intermediate_size`` (default: the target's) apply as for the EAGLE heads; the rest is here::

    head: {type: dflash, fused_layer_ids: [2, 9, 15, 21, 28]}
    dflash: {num_layers: 2, block_size: 16, mask_token_id: 16, num_anchors: 8, gamma: 7.0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from eaglehead.builtin import models
from eaglehead.draftheads.dflash import DEFAULT_BLOCK_SIZE, DFlashConfig, DFlashHead

from .target_init import norm_gain


@dataclass
class DFlashSection:
    num_layers: int = 2  # drafter decoder layers
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per block: the last committed token + block_size - 1 MASKs
    # The token whose (frozen, shared) embedding fills the masked slots: default the tokenizer's mask token.
    mask_token_id: int | None = None
    num_anchors: int = 8  # blocks per training sequence
    gamma: float = 7.0  # slot k's loss weight exp(-(k-1)/gamma) (DFlash: 7 for block 16, 5 for 10, 4 for 8)
    labels: Literal["soft", "argmax"] = "soft"  # the target's distribution at a+k-1, or its top token

    def __post_init__(self):
        for name in ("num_layers", "block_size", "num_anchors"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"dflash.{name}: expected a positive integer, got {value!r}")
        if self.block_size < 2:
            raise ValueError(f"dflash.block_size: expected >= 2, got {self.block_size}")
        if not self.gamma > 0:
            raise ValueError(f"dflash.gamma: expected > 0, got {self.gamma}")


def resolve_mask_token(section: DFlashSection, tokenizer, vocab: int) -> int:
    """``dflash.mask_token_id``, else the tokenizer's mask token; a named error when neither exists."""
    mask = section.mask_token_id if section.mask_token_id is not None else getattr(tokenizer, "mask_token_id", None)
    if mask is None:
        raise ValueError("dflash.mask_token_id: the target's tokenizer has no mask token; set dflash.mask_token_id "
                         "to a token id the data never uses (e.g. an unused special token)")
    if not 0 <= mask < vocab:
        raise ValueError(f"dflash.mask_token_id: expected a token id in 0..{vocab - 1}, got {mask}")
    return int(mask)


def build_dflash_head(cfg, target, tokenizer) -> DFlashHead:
    """The drafter of ``cfg`` (a TrainConfig with ``head.type: dflash``) for ``target``; its final norm starts as
    the target's final RMSNorm gain (the drafter scores with the target's own output layer)."""
    import torch

    from eaglehead.draftheads.checkpoint import load_head

    if cfg.head.init_from:
        head = load_head(cfg.head.init_from, target_config=target.config)
        if not isinstance(head, DFlashHead):
            raise ValueError(f"head.init_from={cfg.head.init_from} is a {type(head).__name__}, not a DFlash drafter")
        return head
    section = cfg.dflash
    mask = resolve_mask_token(section, tokenizer, models.output_vocab_size(target))
    overrides = {"num_hidden_layers": section.num_layers, "block_size": section.block_size,
                 "fused_layer_ids": cfg.head.fused_layer_ids, "intermediate_size": cfg.head.intermediate_size,
                 "target_name_or_path": models.hub_name(cfg.model.target)}
    head = DFlashHead(DFlashConfig.from_target_config(target.config, mask_token_id=mask, **overrides))
    decoder = target.get_decoder() if hasattr(target, "get_decoder") else None
    gain = norm_gain(getattr(decoder, "norm", None)) if decoder is not None else None
    if gain is not None and gain.shape == head.norm.weight.shape:
        with torch.no_grad():
            head.norm.weight.copy_(gain.to(head.norm.weight))
    return head
