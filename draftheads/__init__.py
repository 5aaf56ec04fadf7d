"""Draft-head modules, their config, the draft vocabulary and checkpoint formats (imports only eaglehead.builtin)."""

from .checkpoint import (
    check_compatible,
    eagle3_config_dict,
    eagle3_state_dict,
    export_eagle3,
    export_speculators,
    head_layout,
    load_head,
    load_pretrained,
    save_pretrained,
    speculators_config_dict,
    speculators_state_dict,
)
from .config import Eagle3Config, target_dims
from .eagle1 import Eagle1Head
from .eagle3 import (
    DraftKVCache,
    Eagle3Head,
    apply_rope,
    attend,
    causal_mask,
    positions_from_mask,
    rope_cos_sin,
    rope_inv_freq,
)
from .taps import Capture, FeatureTaps, default_layer_ids
from .vocab import build_draft_vocab, check_vocab_mapping, coverage, draft_vocab_from_ids

__all__ = [
    "Capture", "DraftKVCache", "Eagle1Head", "Eagle3Config", "Eagle3Head", "FeatureTaps", "apply_rope", "attend",
    "build_draft_vocab", "causal_mask", "check_compatible", "check_vocab_mapping", "coverage", "default_layer_ids",
    "draft_vocab_from_ids", "eagle3_config_dict", "eagle3_state_dict", "export_eagle3", "export_speculators",
    "head_layout", "load_head", "load_pretrained", "positions_from_mask", "rope_cos_sin", "rope_inv_freq", "save_pretrained",
    "speculators_config_dict", "speculators_state_dict", "target_dims",
]
