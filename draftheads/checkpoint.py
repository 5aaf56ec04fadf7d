"""Save/load draft heads, and convert to and from the layouts SGLang and vLLM serve.

Three layouts, each ``config.json`` + ``model.safetensors``:

* ours (``save_pretrained``/``load_pretrained``): the resolved :class:`Eagle3Config` plus
  ``"eaglehead_head_type"``; keys are the module's parameter names (the EAGLE-3 keys).
* EAGLE-3 (``export_eagle3``): ``LlamaForCausalLMEagle3``, keys ``fc``/``midlayer.*``/``norm``/``lm_head``/
  ``d2t``/``t2d``; loaded by SGLang and vLLM.
* speculators (``export_speculators``): ``Eagle3Speculator`` for vLLM, keys ``layers.0.*`` instead of
  ``midlayer.*``.

An EAGLE 3.1 head adds ``fc_norm.{i}.weight`` (one per fused layer; the same key in both engine layouts) and
the top-level ``config.json`` keys ``"fc_norm": true`` / ``"norm_output": true``, which vLLM
(``llama_eagle3.py``, and ``update_eagle3`` for the speculators layout), SGLang, SpecForge and speculators
read. They are written only when on: absent means off everywhere.

A ``.gguf`` file (llama.cpp's EAGLE-3 head, :mod:`.gguf_head`) is loaded by ``load_head`` too (layout ``gguf``), and
so are the DFlash exports of :mod:`.dflash_export` (layout ``dflash``: z-lab's; ``speculators``: its DFlash type).

Layer ids: vLLM reads the top-level ``eagle_aux_hidden_state_layer_ids`` (first) in ``output_hidden_states``
indexing, ours. SGLang reads only ``eagle_config.eagle_aux_hidden_state_layer_ids`` and adds one to each id
(``set_eagle3_layers_to_capture``), so the export writes our ids minus one there: both engines then tap the
states the head was trained on. ``load_head`` reads them back the same way. Since SGLang PR #25454 its DeepSeek-V2
family adds one only when the first id is 1: with our first id 2 (``[2, L//2, L-3]``, every target of 7 layers or
more) the list written here starts at 1 and reads the same under both rules; any other first id cannot be written
so that both read it alike, and the provenance block says which rule it was written for
(``"sglang_layer_ids": "plus-one"``).

Usage::

    save_pretrained(head, "runs/x/head");  head = load_pretrained("runs/x/head")
    export_eagle3(head, "out/eagle3");     head = load_head("out/eagle3")   # any layout, detected
    head = load_head(path, target_config=target.config)                       # checked against a target
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from eaglehead.builtin.devices import dtype_name
from eaglehead.builtin.jsonio import read_json

from .config import Eagle3Config, target_dims
from .dflash import DFlashConfig, DFlashHead
from .dflash_export import dflash_layout, load_dflash_export
from .eagle1 import Eagle1Head
from .eagle3 import Eagle3Head
from .gguf_head import GGUF_SUFFIX, load_gguf_head
from .taps import default_layer_ids
from .vocab import check_vocab_mapping

HEAD_TYPES: dict[str, type[Eagle3Head]] = {"eagle3": Eagle3Head, "eagle1": Eagle1Head}
CONFIG_FILE, WEIGHTS_FILE, BIN_FILE = "config.json", "model.safetensors", "pytorch_model.bin"


# ---------------------------------------------------------------- our own layout
def save_pretrained(head: Eagle3Head, out_dir: str | Path, *, overwrite: bool = False) -> Path:
    out = _prepare_dir(out_dir, overwrite)
    _write(out, {"eaglehead_head_type": head.head_type, **head.config.to_dict()}, head.state_dict())
    return out


def load_pretrained(path: str | Path, map_location: str | torch.device = "cpu") -> Eagle3Head:
    """A head saved by :func:`save_pretrained` (our layout only; :func:`load_head` takes every layout)."""
    return load_head(path, map_location=map_location, layout="eaglehead")


# ---------------------------------------------------------------- EAGLE-3 / speculators export
def eagle3_config_dict(head: Eagle3Head) -> dict[str, Any]:
    """``config.json`` of the EAGLE-3 layout (SGLang ``LlamaForCausalLMEagle3``, vLLM ``Eagle3LlamaForCausalLM``)."""
    cfg = head.config
    _check_exportable(head)
    if cfg.norm_before_residual:
        raise ValueError("norm_before_residual=True: SGLang's EAGLE-3 layer cannot express it; use export_speculators")
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        **_llama_layer_dict(head),
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "norm_before_residual": cfg.norm_before_residual,
        **_eagle31_keys(cfg),
        "eagle_aux_hidden_state_layer_ids": list(cfg.fused_layer_ids),
        "eagle_config": {
            "use_aux_hidden_state": True,
            "eagle_aux_hidden_state_layer_ids": [i - 1 for i in cfg.fused_layer_ids],  # SGLang adds 1
        },
        "eaglehead": _provenance(head),
    }


def eagle3_state_dict(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """Export keys -> tensors (no copy; works on the meta device). Identical to the module's names."""
    return dict(head.state_dict())


def speculators_config_dict(head: Eagle3Head, *, speculative_tokens: int = 3,
                            verifier_architectures: list[str] | None = None) -> dict[str, Any]:
    """The ``config.json`` of vLLM's speculators layout (``speculators_model_type: "eagle3"``)."""
    cfg = head.config
    _check_exportable(head)
    if isinstance(speculative_tokens, bool) or not isinstance(speculative_tokens, int) or speculative_tokens < 1:
        raise ValueError(f"speculative_tokens must be a positive int, got {speculative_tokens!r}")
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": _llama_layer_dict(head),
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "norm_before_residual": cfg.norm_before_residual,  # vLLM assumes True when absent
        **_eagle31_keys(cfg),
        "eagle_aux_hidden_state_layer_ids": list(cfg.fused_layer_ids),
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": cfg.target_name_or_path or None,
                         "architectures": list(verifier_architectures or [])},
        },
        "torch_dtype": dtype_name(head.dtype),
        "eaglehead": _provenance(head),
    }


def speculators_state_dict(head: Eagle3Head) -> dict[str, torch.Tensor]:
    return {_rename(k, "midlayer.", "layers.0."): v for k, v in head.state_dict().items()}


def export_eagle3(head: Eagle3Head, out_dir: str | Path, *, overwrite: bool = False,
                  dtype: torch.dtype | None = None) -> Path:
    config = eagle3_config_dict(head)
    out = _prepare_dir(out_dir, overwrite)
    state = _cast(eagle3_state_dict(head), dtype)
    config["torch_dtype"] = dtype_name(dtype or head.dtype)
    _write(out, config, state)
    return out


def export_speculators(head: Eagle3Head, out_dir: str | Path, *, speculative_tokens: int = 3,
                       verifier_architectures: list[str] | None = None, overwrite: bool = False,
                       dtype: torch.dtype | None = None) -> Path:
    config = speculators_config_dict(head, speculative_tokens=speculative_tokens,
                                     verifier_architectures=verifier_architectures)
    out = _prepare_dir(out_dir, overwrite)
    config["torch_dtype"] = config["transformer_layer_config"]["torch_dtype"] = dtype_name(dtype or head.dtype)
    _write(out, config, _cast(speculators_state_dict(head), dtype))
    return out


# ---------------------------------------------------------------- load (every layout)
LAYOUTS = ("eaglehead", "eagle3", "speculators", "dflash")


def head_layout(config: dict[str, Any] | str | Path) -> str | None:
    """Which head layout a ``config.json`` (its dict, or the directory holding it) is: ``eaglehead``,
    ``speculators``, ``eagle3`` or ``dflash`` (z-lab's DFlash layout); ``gguf`` for a ``.gguf`` file; ``None`` when it is not a draft head (e.g. a
    causal LM)."""
    if not isinstance(config, dict):
        if Path(config).suffix == GGUF_SUFFIX and Path(config).is_file():
            return "gguf"
        if not (Path(config) / CONFIG_FILE).is_file():
            return None
        config = _read_config(Path(config))
    if "eaglehead_head_type" in config:
        return "eaglehead"
    if dflash_layout(config) is not None:
        return "dflash" if dflash_layout(config) == "zlab" else "speculators"
    if config.get("speculators_model_type") is not None:
        return "speculators"
    if any("Eagle3" in a for a in config.get("architectures") or []) or "eagle_config" in config \
            or "eagle_aux_hidden_state_layer_ids" in config:
        return "eagle3"
    return None


def load_head(path: str | Path, *, target_config: Any = None, fused_layer_ids: list[int] | None = None,
              target_name_or_path: str | None = None, map_location: str | torch.device = "cpu",
              layout: str | None = None, check: bool = True) -> Eagle3Head:
    """Load a head directory in any of the three layouts, detected from its ``config.json`` (read once).

    Weights come from ``model.safetensors`` or else ``pytorch_model.bin`` (``weights_only=True``). For the
    EAGLE-3 and speculators layouts, layer ids, first found wins: ``fused_layer_ids``; our provenance
    block; top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM, ``output_hidden_states`` indexing);
    ``eagle_config`` ids plus one (SGLang); the engines' default ``[2, L//2, L-3]`` when ``target_config``
    gives ``L``. With ``target_config`` the head is checked once by :func:`check_compatible` (``check=False``
    when the caller checks it, as ``Eagle3Drafter`` does). ``layout`` demands one layout (``ValueError``
    otherwise). A DFlash export (layout ``dflash``, or ``speculators`` of type dflash) gives a ``DFlashHead``
    (:func:`.dflash_export.load_dflash_export`: its layer ids are in its config).
    """
    path = Path(path)
    if path.suffix == GGUF_SUFFIX:
        return _from_gguf(path, target_config, fused_layer_ids, target_name_or_path, map_location, layout, check)
    raw = _read_config(path)
    # The EAGLE-3 layout's config is a one-layer Llama config: anything unmarked is read as one (and
    # refused with the field that does not fit, e.g. a full LM's num_hidden_layers).
    found = head_layout(raw) or "eagle3"
    if layout is not None and found != layout:
        if layout == "eaglehead":
            raise ValueError(f"{path / CONFIG_FILE}: eaglehead_head_type must be one of {list(HEAD_TYPES)}, got "
                             f"{raw.get('eaglehead_head_type')!r}")
        raise ValueError(f"{path / CONFIG_FILE}: expected the {layout} layout, found {found}")
    if found == "eaglehead":
        head = _from_ours(raw, path, map_location)
    elif dflash_layout(raw) is not None:
        head = load_dflash_export(raw, path, target_config=target_config, fused_layer_ids=fused_layer_ids,
                                  target_name_or_path=target_name_or_path, map_location=map_location)
    else:
        head = _from_engine_layout(raw, found, path, target_config, fused_layer_ids, target_name_or_path, map_location)
    if check and target_config is not None:
        check_compatible(head.config, target_config)
    return head


def _from_gguf(path: Path, target_config, fused_layer_ids, target_name_or_path, map_location, layout,
               check) -> Eagle3Head:
    """A llama.cpp EAGLE-3 GGUF (:func:`.gguf_head.load_gguf_head`), checked like the other layouts."""
    if layout is not None and layout != "gguf":
        raise ValueError(f"{path}: expected the {layout} layout, found gguf")
    head = load_gguf_head(path, map_location=map_location, fused_layer_ids=fused_layer_ids,
                          target_name_or_path=target_name_or_path)
    if check and target_config is not None:
        check_compatible(head.config, target_config)
    return head


def _from_ours(raw: dict[str, Any], path: Path, map_location) -> Eagle3Head:
    cfg = dict(raw)
    head_type = cfg.pop("eaglehead_head_type", None)
    if head_type == DFlashHead.head_type:
        return _build(DFlashHead, DFlashConfig.from_dict(cfg), _read_state(path), path, map_location)
    if head_type not in HEAD_TYPES:
        raise ValueError(f"{path / CONFIG_FILE}: eaglehead_head_type must be one of {list(HEAD_TYPES)}, "
                         f"got {head_type!r}")
    return _build(HEAD_TYPES[head_type], Eagle3Config.from_dict(cfg), _read_state(path), path, map_location)


def _from_engine_layout(raw: dict[str, Any], layout: str, path: Path, target_config, fused_layer_ids,
                        target_name_or_path, map_location) -> Eagle3Head:
    """A head from the EAGLE-3 (SGLang/vLLM) or speculators layout."""
    if layout == "speculators":
        if raw["speculators_model_type"] != "eagle3":
            raise ValueError(f"{path / CONFIG_FILE}: speculators_model_type "
                             f"{raw['speculators_model_type']!r} is not 'eagle3'")
        layer = raw.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise ValueError(f"{path / CONFIG_FILE}: transformer_layer_config must be a dict")
        norm_before_residual = raw.get("norm_before_residual", True)
        name = ((raw.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path") or ""
    else:
        layer, norm_before_residual, name = raw, raw.get("norm_before_residual", False), ""
    if layer.get("num_hidden_layers", 1) != 1:
        raise ValueError(f"{path / CONFIG_FILE}: num_hidden_layers must be 1, got {layer.get('num_hidden_layers')}")
    prov = raw.get("eaglehead") or {}
    target_layers = prov.get("target_num_hidden_layers")
    if target_config is not None and target_layers is None:
        target_layers = target_dims(target_config)["num_hidden_layers"]
    ids = fused_layer_ids or prov.get("fused_layer_ids") or raw.get("eagle_aux_hidden_state_layer_ids")
    sglang_ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not ids and sglang_ids:
        ids = [int(i) + 1 for i in sglang_ids]
    if not ids and target_layers is not None:
        ids = default_layer_ids(target_layers)
    if not ids:
        raise ValueError(f"{path / CONFIG_FILE}: no eagle_aux_hidden_state_layer_ids; "
                         "pass fused_layer_ids or target_config")
    rope = layer.get("rope_parameters") or layer.get("rope_scaling") or {}
    config = Eagle3Config(
        hidden_size=_need(layer, "hidden_size", path), intermediate_size=_need(layer, "intermediate_size", path),
        num_attention_heads=_need(layer, "num_attention_heads", path),
        num_key_value_heads=layer.get("num_key_value_heads") or layer["num_attention_heads"],
        head_dim=layer.get("head_dim"),
        target_vocab_size=_need(layer, "vocab_size", path),
        draft_vocab_size=raw.get("draft_vocab_size") or layer.get("draft_vocab_size") or layer["vocab_size"],
        target_hidden_size=raw.get("target_hidden_size") or layer["hidden_size"],
        fused_layer_ids=list(ids), target_num_hidden_layers=target_layers,
        rope_theta=rope.get("rope_theta") or layer.get("rope_theta") or 10000.0,
        rope_scaling={k: v for k, v in rope.items() if k != "rope_theta"} or None,
        max_position_embeddings=layer.get("max_position_embeddings", 2048),
        rms_norm_eps=layer.get("rms_norm_eps", 1e-6), hidden_act=layer.get("hidden_act", "silu"),
        norm_before_residual=norm_before_residual,
        target_name_or_path=target_name_or_path or prov.get("target_name_or_path") or name,
        **_eagle31_from(raw, path),
    )
    state = {_rename(k, "layers.0.", "midlayer."): v for k, v in _read_state(path).items()}
    _complete_vocab_maps(state, config, path)
    return _build(HEAD_TYPES.get(prov.get("head_type"), Eagle3Head), config, state, path, map_location)


def check_compatible(head_config: Eagle3Config | Eagle3Head, target_hf_config: Any) -> None:
    """Raise ``ValueError`` (naming the field and both values) if the head cannot draft for this target."""
    cfg = head_config.config if isinstance(head_config, (Eagle3Head, DFlashHead)) else head_config
    t = target_dims(target_hf_config)
    if t["hidden_size"] != cfg.target_hidden_size:
        raise ValueError(f"target_hidden_size: head expects {cfg.target_hidden_size}, target has {t['hidden_size']}")
    if t["vocab_size"] != cfg.target_vocab_size:
        raise ValueError(f"target_vocab_size: head expects {cfg.target_vocab_size}, "
                         f"target has vocab_size {t['vocab_size']}")
    layers = t["num_hidden_layers"]
    if cfg.target_num_hidden_layers is not None and cfg.target_num_hidden_layers != layers:
        raise ValueError(f"target_num_hidden_layers: head expects {cfg.target_num_hidden_layers}, target has {layers}")
    bad = [i for i in cfg.fused_layer_ids if not 0 <= i <= layers]
    if bad:
        raise ValueError(f"fused_layer_ids {cfg.fused_layer_ids}: {bad} out of range 0..{layers} for this target")


# ---------------------------------------------------------------- helpers
def _llama_layer_dict(head: Eagle3Head) -> dict[str, Any]:
    cfg = head.config
    return {
        "model_type": "llama", "num_hidden_layers": 1, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim, "hidden_act": cfg.hidden_act,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": cfg.rope_scaling,
        # transformers 5 (and vLLM's get_rope, which reads config.rope_parameters) take the whole RoPE from this
        # one dict; rope_theta/rope_scaling above stay for SGLang and transformers 4 readers. Same values.
        "rope_parameters": {"rope_type": "default", **(cfg.rope_scaling or {}), "rope_theta": cfg.rope_theta},
        "max_position_embeddings": cfg.max_position_embeddings, "vocab_size": cfg.target_vocab_size,
        "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False,  # SGLang would otherwise use embed_tokens as lm_head
        "torch_dtype": dtype_name(head.dtype),
    }


def _eagle31_keys(cfg: Eagle3Config) -> dict[str, bool]:
    """The EAGLE 3.1 switches that are on, as the engines' top-level ``config.json`` keys. An off switch is left
    out rather than written false: SpecForge before its PR #879 reads an absent ``norm_output`` as the EAGLE-3
    output but a written ``false`` as "no final norm before lm_head"."""
    return {name: True for name in ("fc_norm", "norm_output") if getattr(cfg, name)}


def _eagle31_from(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """``fc_norm`` / ``norm_output`` of an engine-layout ``config.json`` (top level, as vLLM and SGLang read
    them; absent = off). ``norm_before_fc`` (one RMSNorm over the whole concatenation, weight ``input_norm``,
    gpt-oss style) is a different norm this head does not have: refused by name."""
    if raw.get("norm_before_fc") or (raw.get("eagle_config") or {}).get("norm_before_fc"):
        raise ValueError(f"{path / CONFIG_FILE}: norm_before_fc is true (one RMSNorm over the concatenated features, "
                         "weight input_norm): Eagle3Head has no such norm (fc_norm, one norm per fused layer, it has)")
    return {name: False if raw.get(name) is None else raw[name] for name in ("fc_norm", "norm_output")}


def _check_exportable(head: Eagle3Head) -> None:
    cfg = head.config
    if len(cfg.fused_layer_ids) != 3:
        raise ValueError(f"fused_layer_ids {cfg.fused_layer_ids}: the engines build fc for exactly 3 fused layers")
    top = cfg.target_num_hidden_layers
    if top is not None and max(cfg.fused_layer_ids) >= top:
        raise ValueError(
            f"fused_layer_ids {cfg.fused_layer_ids}: id {top} (the final-normed state) cannot be tapped by the engines"
        )


def _provenance(head: Eagle3Head) -> dict[str, Any]:
    cfg = head.config
    return {"head_type": head.head_type, "fused_layer_ids": list(cfg.fused_layer_ids),
            # both SGLang rules (always +1; +1 only when the first id is 1) read ids-1 alike iff the first id is 2
            "sglang_layer_ids": "either" if cfg.fused_layer_ids[0] == 2 else "plus-one",
            "target_num_hidden_layers": cfg.target_num_hidden_layers, "target_name_or_path": cfg.target_name_or_path}


def _complete_vocab_maps(state: dict[str, torch.Tensor], cfg: Eagle3Config, path: Path) -> None:
    """Fill an absent ``d2t``/``t2d`` from the other one, or both for a full-vocabulary head."""
    vd, vt = cfg.draft_vocab_size, cfg.target_vocab_size
    if "d2t" not in state and "t2d" in state and state["t2d"].shape == (vt,) and state["t2d"].dtype == torch.bool:
        ids = torch.nonzero(state["t2d"]).flatten()
        if ids.numel() == vd:
            state["d2t"] = ids - torch.arange(vd)
    if "t2d" not in state and "d2t" in state and state["d2t"].shape == (vd,) and state["d2t"].dtype == torch.int64:
        t2d = torch.zeros(vt, dtype=torch.bool)
        ids = state["d2t"] + torch.arange(vd)
        if bool(((ids >= 0) & (ids < vt)).all()):
            t2d[ids] = True
            state["t2d"] = t2d
    if "d2t" not in state and "t2d" not in state and vd == vt:
        state["d2t"], state["t2d"] = torch.zeros(vd, dtype=torch.int64), torch.ones(vt, dtype=torch.bool)


def _build(cls: type[Eagle3Head], cfg: Eagle3Config, state: dict[str, torch.Tensor], path: Path,
           map_location) -> Eagle3Head:
    with torch.device("meta"):
        head = cls(cfg)
    expected = head.state_dict()
    source = path / (WEIGHTS_FILE if (path / WEIGHTS_FILE).exists() else BIN_FILE)
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(f"{source}: missing key(s) {missing}")
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        hint = " (the head uses the target's token embedding; embed_tokens is never loaded)" if any(
            "embed_tokens" in k for k in unexpected) else ""
        raise ValueError(f"{source}: unexpected key(s) {unexpected}{hint}")
    # Weights share one floating dtype (the most common one names the expectation in the message).
    main_dtype = Counter(v.dtype for k, v in state.items() if k not in ("d2t", "t2d")).most_common(1)[0][0]
    for key, want in expected.items():
        got = state[key]
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"{source}: {key} has shape {list(got.shape)}, "
                             f"expected {list(want.shape)} from the config")
        if key in ("d2t", "t2d"):
            if got.dtype != want.dtype:
                raise ValueError(f"{source}: {key} has dtype {got.dtype}, expected {want.dtype}")
        elif not got.dtype.is_floating_point or got.dtype != main_dtype:
            raise ValueError(f"{source}: {key} has dtype {got.dtype}, "
                             f"expected the floating dtype of the other weights ({main_dtype})")
    if "d2t" in expected:
        check_vocab_mapping(state["d2t"], state["t2d"], cfg.draft_vocab_size, cfg.target_vocab_size)
    head.load_state_dict(state, strict=True, assign=True)
    return head.to(map_location)


def _read_config(path: Path) -> dict[str, Any]:
    return read_json(path / CONFIG_FILE, expect=dict)


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    if (path / WEIGHTS_FILE).is_file():
        return load_file(str(path / WEIGHTS_FILE))
    if (path / BIN_FILE).is_file():
        state = torch.load(path / BIN_FILE, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ValueError(f"{path / BIN_FILE}: expected a dict of tensors")
        return state
    raise ValueError(f"{path}: neither {WEIGHTS_FILE} nor {BIN_FILE} found (sharded checkpoints are not supported)")


def _prepare_dir(out_dir: str | Path, overwrite: bool) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {out} exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ValueError(f"out_dir {out} is not empty; pass overwrite=True to replace its checkpoint files")
        for name in (CONFIG_FILE, WEIGHTS_FILE, BIN_FILE):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _write(out: Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    if any(t.is_meta for t in state.values()):
        raise ValueError("cannot save a head on the meta device: materialise its weights first")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    if dtype is None:
        return state
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    return {k: (v if k in ("d2t", "t2d") else v.to(dtype)) for k, v in state.items()}


def _rename(key: str, old: str, new: str) -> str:
    return new + key[len(old):] if key.startswith(old) else key


def _need(cfg: dict[str, Any], key: str, path: Path) -> Any:
    if key not in cfg:
        raise ValueError(f"{path / CONFIG_FILE}: missing key {key!r}")
    return cfg[key]
