"""Architecture config of an EAGLE-3 draft head, and how it is derived from a target's HF config.

Usage::

    from transformers import AutoConfig
    target_cfg = AutoConfig.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
    cfg = Eagle3Config.from_target_config(target_cfg, draft_vocab_size=32000)
    cfg.fused_layer_ids          # [2, 16, 29]: Hugging Face ``output_hidden_states`` indexing
    Eagle3Config.from_dict(cfg.to_dict()) == cfg

Layer ids use the indexing of :mod:`eaglehead.draftheads.taps` (id 0 = embedding output, id ``i`` = input
of decoder layer ``i``, id ``L`` = the final-normed state). The draft layer is always a Llama layer
(RMSNorm, SwiGLU, full-width RoPE), whatever the target's architecture is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from types import SimpleNamespace
from typing import Any

from .taps import default_layer_ids
from .vocab import DEFAULT_DRAFT_VOCAB_SIZE, resolve_draft_vocab_size

# RoPE variants the draft layer implements (eagle3.rope_frequencies, through transformers' ROPE_INIT_FUNCTIONS, as
# vLLM's get_rope and SGLang build them from the export); others are refused. Required keys, then optional ones:
# a key outside both is refused by name (a misspelt beta_fast would otherwise silently mean the default).
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")
_ROPE_REQUIRED = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "dynamic": ("factor",),
}
_ROPE_OPTIONAL = {
    "linear": (), "llama3": (), "dynamic": (),
    "yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
}


@dataclass
class Eagle3Config:
    """Shape of the draft head and of the target it reads.

    ``hidden_size`` must equal ``target_hidden_size``: the head embeds tokens with the target's own
    (frozen, unsaved) embedding, whose width is the target's. ``fused_layer_ids`` defaults to
    ``default_layer_ids(target_num_hidden_layers)``. ``norm_before_residual=False`` is the
    EAGLE/SpecForge layer (residual = un-normed fused hidden); ``True`` is speculators' variant.

    EAGLE 3.1 is ``fc_norm=True, norm_output=True`` (each alone is an ablation; both off = EAGLE-3):
    ``fc_norm`` puts an RMSNorm (width ``target_hidden_size``, one per fused layer) on each fused target
    feature before ``fc``; ``norm_output`` feeds the final-normed hidden, the one ``lm_head`` reads, to the
    next draft step instead of the pre-norm one. The names are the ``config.json`` keys vLLM, SGLang,
    SpecForge and speculators read.
    """

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    target_vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int | None = None
    head_dim: int | None = None
    fused_layer_ids: list[int] | None = None
    target_num_hidden_layers: int | None = None
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    norm_before_residual: bool = False
    target_name_or_path: str = ""
    fc_norm: bool = False
    norm_output: bool = False

    def __post_init__(self):
        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                     "target_vocab_size", "draft_vocab_size", "max_position_embeddings"):
            _check_positive_int(name, getattr(self, name))
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size
        _check_positive_int("target_hidden_size", self.target_hidden_size)
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"head_dim: hidden_size={self.hidden_size} is not divisible by "
                    f"num_attention_heads={self.num_attention_heads}; give head_dim explicitly"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        _check_positive_int("head_dim", self.head_dim)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.draft_vocab_size > self.target_vocab_size:
            raise ValueError(
                f"draft_vocab_size={self.draft_vocab_size} exceeds target_vocab_size={self.target_vocab_size}"
            )
        if self.hidden_size != self.target_hidden_size:
            raise ValueError(
                f"hidden_size={self.hidden_size} differs from target_hidden_size={self.target_hidden_size}: "
                "the head shares the target's token embedding, so its width must be the target's"
            )
        if self.target_num_hidden_layers is not None:
            _check_positive_int("target_num_hidden_layers", self.target_num_hidden_layers)
        if self.fused_layer_ids is None:
            if self.target_num_hidden_layers is None:
                raise ValueError("fused_layer_ids: give the ids or target_num_hidden_layers to derive them")
            self.fused_layer_ids = default_layer_ids(self.target_num_hidden_layers)
        if not isinstance(self.fused_layer_ids, (list, tuple)) or not self.fused_layer_ids:
            raise ValueError(f"fused_layer_ids must be a non-empty list of ints, got {self.fused_layer_ids!r}")
        self.fused_layer_ids = [_as_int("fused_layer_ids", i) for i in self.fused_layer_ids]
        top = self.target_num_hidden_layers
        bad = [i for i in self.fused_layer_ids if i < 0 or (top is not None and i > top)]
        if bad:
            raise ValueError(
                f"fused_layer_ids {self.fused_layer_ids}: {bad} out of range 0..{top if top is not None else 'L'} "
                "(output_hidden_states indexing)"
            )
        self.rope_theta = _positive_number("rope_theta", self.rope_theta)
        self.rope_scaling = normalise_rope_scaling(self.rope_scaling)
        self.rms_norm_eps = _positive_number("rms_norm_eps", self.rms_norm_eps)
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act: only 'silu' (SwiGLU, as in the engines' Llama MLP), got {self.hidden_act!r}")
        for name in ("norm_before_residual", "fc_norm", "norm_output"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.target_name_or_path, str):
            raise ValueError(f"target_name_or_path must be a str, got {self.target_name_or_path!r}")

    @property
    def fused_width(self) -> int:
        """Width of the fused target features fed to ``fc``: ``len(fused_layer_ids) * target_hidden_size``."""
        return len(self.fused_layer_ids) * self.target_hidden_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Eagle3Config:
        """Inverse of :meth:`to_dict`; an unknown key raises ``ValueError`` naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"Eagle3Config: unknown key(s) {unknown}")
        return cls(**d)

    @classmethod
    def from_target_config(cls, hf_config: Any, **overrides: Any) -> Eagle3Config:
        """Build a config whose layer has the target's width, heads, MLP size, RoPE and norm eps.

        Reads Llama/Qwen/Mistral (``hidden_size``, ``num_hidden_layers``, ...), GPT-2 (``n_embd``,
        ``n_layer``, ``n_head``, ``n_inner``, ``n_positions``) and GPT-NeoX attribute names; ``hf_config``
        may also be a plain dict. Defaults: ``draft_vocab_size = min(DEFAULT_DRAFT_VOCAB_SIZE, vocab)``, ``fused_layer_ids =
        default_layer_ids(L)``. A target RoPE this head cannot reproduce (e.g. yarn) raises unless
        ``rope_scaling`` is overridden. A partial rotary (Phi-3 style ``partial_rotary_factor``, GPT-NeoX
        ``rotary_pct``) is not copied: the draft layer is a Llama layer that rotates its full head, and the export
        writes no ``partial_rotary_factor``, so vLLM's and SGLang's Llama layer rotate the full head too.
        ``overrides`` replace any field (unknown names raise).
        """
        t = target_dims(hf_config)
        derived: dict[str, Any] = {
            "hidden_size": t["hidden_size"],
            "intermediate_size": t["intermediate_size"],
            "num_attention_heads": t["num_attention_heads"],
            "num_key_value_heads": t["num_key_value_heads"],
            "head_dim": t["head_dim"],
            "target_hidden_size": t["hidden_size"],
            "target_vocab_size": t["vocab_size"],
            "draft_vocab_size": resolve_draft_vocab_size(DEFAULT_DRAFT_VOCAB_SIZE, t["vocab_size"]),
            "target_num_hidden_layers": t["num_hidden_layers"],
            "max_position_embeddings": t["max_position_embeddings"],
            "rms_norm_eps": t["rms_norm_eps"],
            "rope_theta": t["rope_theta"],
            "rope_scaling": t["rope_scaling"],
            "target_name_or_path": t["name_or_path"],
        }
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"from_target_config: unknown override(s) {unknown}")
        derived.update(overrides)
        return cls(**derived)


def target_dims(hf_config: Any) -> dict[str, Any]:
    """The target facts the head depends on, read across HF naming schemes (see ``from_target_config``)."""
    cfg = SimpleNamespace(**hf_config) if isinstance(hf_config, dict) else hf_config
    hidden = _first(cfg, ("hidden_size", "n_embd", "d_model"))
    layers = _first(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    heads = _first(cfg, ("num_attention_heads", "n_head"))
    vocab = _first(cfg, ("vocab_size",))
    for name, value in (("hidden_size", hidden), ("num_hidden_layers", layers),
                        ("num_attention_heads", heads), ("vocab_size", vocab)):
        if value is None:
            raise ValueError(f"target config {type(hf_config).__name__} has no {name} (or an alias of it)")
    kv_heads = _first(cfg, ("num_key_value_heads",)) or heads
    head_dim = _first(cfg, ("head_dim",))
    if head_dim is None and hidden % heads == 0:
        head_dim = hidden // heads
    inter = _first(cfg, ("intermediate_size", "n_inner", "ffn_dim")) or 4 * hidden
    max_pos = _first(cfg, ("max_position_embeddings", "n_positions", "n_ctx")) or 2048
    eps = _first(cfg, ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")) or 1e-6
    theta, scaling = _target_rope(cfg)
    name = getattr(cfg, "_name_or_path", None) or getattr(cfg, "name_or_path", None) or ""
    return {
        "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": inter,
        "vocab_size": vocab, "max_position_embeddings": max_pos, "rms_norm_eps": eps,
        "rope_theta": theta, "rope_scaling": scaling, "name_or_path": str(name),
    }


def _target_rope(cfg: Any) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling) from transformers 5 ``rope_parameters`` or 4.x ``rope_theta``/``rope_scaling``."""
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        # Per-layer-type RoPE (e.g. sliding/full): the draft layer is a full-attention layer.
        params = params.get("full_attention") or next(iter(params.values()))
    scaling = dict(params) if isinstance(params, dict) else dict(getattr(cfg, "rope_scaling", None) or {})
    theta = scaling.pop("rope_theta", None) or getattr(cfg, "rope_theta", None) or getattr(cfg, "rotary_emb_base", None)
    scaling.pop("partial_rotary_factor", None)
    return float(theta or 10000.0), (scaling or None)


def normalise_rope_scaling(scaling: dict[str, Any] | None) -> dict[str, Any] | None:
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_scaling must be a dict or None, got {scaling!r}")
    out = dict(scaling)
    rope_type = out.pop("type", None)
    rope_type = out.get("rope_type", rope_type) or "default"
    out["rope_type"] = rope_type
    out.pop("rope_theta", None)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"rope_scaling: rope_type {rope_type!r} is not supported (supported: {list(SUPPORTED_ROPE_TYPES)}); "
            "override rope_scaling=None to use plain RoPE in the draft layer"
        )
    if rope_type == "default":
        return None
    missing = [k for k in _ROPE_REQUIRED[rope_type] if k not in out]
    if missing:
        raise ValueError(f"rope_scaling: {rope_type} scaling needs {missing}, got keys {sorted(out)}")
    known = {"rope_type", *_ROPE_REQUIRED[rope_type], *_ROPE_OPTIONAL[rope_type]}
    unknown = sorted(set(out) - known)
    if unknown:
        raise ValueError(f"rope_scaling: unknown key(s) {unknown} for {rope_type} scaling (known: {sorted(known)})")
    if "truncate" in out and not isinstance(out["truncate"], bool):
        raise ValueError(f"rope_scaling['truncate'] must be a bool, got {out['truncate']!r}")
    for k in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor"):
        if out.get(k) is not None:
            _positive_number(f"rope_scaling[{k!r}]", out[k])
    for k in _ROPE_REQUIRED[rope_type]:
        _positive_number(f"rope_scaling[{k!r}]", out[k])
    if rope_type == "llama3" and out["low_freq_factor"] >= out["high_freq_factor"]:
        raise ValueError("rope_scaling: llama3 needs low_freq_factor < high_freq_factor")
    return out


def _first(cfg: Any, names: tuple[str, ...]) -> Any:
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return None


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must contain ints, got {value!r}")
    return int(value)


def _positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
