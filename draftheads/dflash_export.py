"""The DFlash block drafter in the layouts vLLM 0.32 runs as ``"method": "dflash"``, and loading them back.

Two layouts, each ``config.json`` + ``model.safetensors`` (the drafter's own weights only: the target's
embedding and output layer are shared by vLLM, ``_maybe_share_embeddings``/``_maybe_share_lm_head``, as by us):

* ``zlab`` (z-lab's ``dflash/model.py``, SpecForge): a Qwen3 config with ``"architectures":
  ["DFlashDraftModel"]`` (vLLM's registry: ``qwen3_dflash.DFlashQwen3ForCausalLM``), ``block_size``,
  ``num_target_layers`` and ``dflash_config = {mask_token_id, target_layer_ids}``.
* ``speculators`` (``speculators_model_type: "dflash"``): the Qwen3 layer config under
  ``transformer_layer_config``; top-level ``mask_token_id``, ``block_size``, ``aux_hidden_state_layer_ids``.

Weight names are the module's own in both (``fc``, ``hidden_norm``, ``layers.{i}.self_attn.{q,k,v,o}_proj``,
``…{q,k}_norm``, ``…mlp.{gate,up,down}_proj``, the two layer norms, ``norm``): z-lab's names, which vLLM's
``DFlashQwen3Model`` loads (it stacks q/k/v and gate/up itself).

Layer ids. Ours are boundary ids (``output_hidden_states[k]``, the input of decoder layer ``k``). z-lab's
``target_layer_ids`` name a layer's *output* (``hidden_states[id + 1]``): ours minus one; vLLM adds the one back
(``get_eagle3_aux_layers_from_config``). The speculators ``aux_hidden_state_layer_ids`` are ours as they are
(vLLM's ``update_dflash`` subtracts one for ``dflash_config``). vLLM reads a top-level
``eagle_aux_hidden_state_layer_ids`` before either, so a config whose two lists disagree is refused. The last
boundary (``id == L``) is the final-normed state in Hugging Face's list but the un-normed last layer output in
vLLM's taps: not exportable.

Block attention. Our block attends non-causally to itself. vLLM resolves causality per layer from
``is_causal``, then ``dflash_config.causal``, then sliding ``layer_types``; the export writes
``dflash_config.causal: false`` and all-full ``layer_types``. For the speculators layout vLLM sets
``causal = not sliding_window_non_causal`` *for every layer*, and an absent key reads as true: the export writes
true (speculators' own default, false, would make vLLM run the block causally).

Block width. vLLM queries ``1 + num_speculative_tokens`` block slots; our drafter always runs ``block_size``.
The two compute the same drafts only at ``num_speculative_tokens == block_size - 1``
(:func:`vllm_speculative_config` writes that by default).

Usage::

    export_dflash(head, "out/dflash")                       # z-lab layout
    export_dflash(head, "out/dflash-spec", layout="speculators")
    head = load_head("out/dflash")                           # checkpoint.load_head detects both
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from eaglehead.builtin.devices import dtype_name

from .dflash import DFlashConfig, DFlashHead

EXPORT_LAYOUTS = ("zlab", "speculators")
ARCHITECTURE = "DFlashDraftModel"  # vLLM's registry name (model_executor/models/registry.py)
CONFIG_FILE, WEIGHTS_FILE, MASK_EMBEDDING_FILE = "config.json", "model.safetensors", "mask_embedding.pt"


class DFlashExportError(ValueError):
    """A DFlash drafter or checkpoint vLLM cannot run as our head computes it (or that our head cannot express)."""


# ---------------------------------------------------------------- export
def export_dflash(head: DFlashHead, out_dir: str | Path, *, layout: str = "zlab", overwrite: bool = False,
                  dtype: torch.dtype | None = None, speculative_tokens: int | None = None,
                  verifier_architectures: list[str] | None = None) -> Path:
    """Write ``head`` into ``out_dir`` in ``layout`` (``zlab`` or ``speculators``); returns the directory.
    ``speculative_tokens`` (speculators only; default ``block_size - 1``) is the proposal length vLLM defaults to."""
    if layout == "zlab":
        config = zlab_config_dict(head)
    elif layout == "speculators":
        config = speculators_dflash_config_dict(head, speculative_tokens=speculative_tokens,
                                                verifier_architectures=verifier_architectures)
    else:
        raise DFlashExportError(f"layout must be one of {list(EXPORT_LAYOUTS)}, got {layout!r}")
    if dtype is not None and not dtype.is_floating_point:
        raise DFlashExportError(f"dtype must be a floating dtype, got {dtype}")
    state = {k: v if dtype is None else v.to(dtype) for k, v in dflash_state_dict(head).items()}
    if any(t.is_meta for t in state.values()):
        raise DFlashExportError("cannot export a head on the meta device: materialise its weights first")
    _set_dtype(config, dtype_name(dtype or head.dtype))
    out = _prepare_dir(Path(out_dir), overwrite)
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out


def dflash_state_dict(head: DFlashHead) -> dict[str, torch.Tensor]:
    """Export keys -> tensors: the module's own names (z-lab's), nothing of the target."""
    return dict(head.state_dict())


def zlab_config_dict(head: DFlashHead) -> dict[str, Any]:
    """``config.json`` of the z-lab layout (vLLM ``DFlashDraftModel``)."""
    cfg = _check_exportable(head)
    return {"architectures": [ARCHITECTURE], **_qwen3_layer_dict(cfg), "block_size": cfg.block_size,
            "num_target_layers": cfg.target_num_hidden_layers, "target_hidden_size": cfg.target_hidden_size,
            "dflash_config": {"mask_token_id": cfg.mask_token_id,
                              "target_layer_ids": [i - 1 for i in cfg.fused_layer_ids],  # z-lab: a layer's output
                              "causal": False, "use_aux_hidden_state": True},
            "eaglehead": _provenance(cfg)}


def speculators_dflash_config_dict(head: DFlashHead, *, speculative_tokens: int | None = None,
                                   verifier_architectures: list[str] | None = None) -> dict[str, Any]:
    """``config.json`` of the speculators layout (``speculators_model_type: "dflash"``)."""
    cfg = _check_exportable(head)
    n = cfg.block_size - 1 if speculative_tokens is None else speculative_tokens
    _check_speculative_tokens(n, cfg)
    return {"architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash",
            "transformer_layer_config": _qwen3_layer_dict(cfg), "draft_vocab_size": cfg.target_vocab_size,
            "target_hidden_size": cfg.target_hidden_size, "block_size": cfg.block_size,
            "aux_hidden_state_layer_ids": list(cfg.fused_layer_ids), "mask_token_id": cfg.mask_token_id,
            "sliding_window_non_causal": True,  # vLLM: causal = not this, for every layer (absent reads true)
            "speculators_config": {
                "algorithm": "dflash",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": n, "verifier_accept_k": 1,
                                      "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": cfg.target_name_or_path or None,
                             "architectures": list(verifier_architectures or [])}},
            "eaglehead": _provenance(cfg)}


def vllm_speculative_config(head_dir: str | Path, block_size: int, num_speculative_tokens: int | None = None) -> dict:
    """vLLM's ``--speculative-config`` for an exported drafter; ``num_speculative_tokens`` defaults to
    ``block_size - 1``, the only length at which vLLM's block is the one the drafter was trained on."""
    n = block_size - 1 if num_speculative_tokens is None else num_speculative_tokens
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= block_size - 1:
        raise DFlashExportError(f"num_speculative_tokens={n!r}: a DFlash drafter of block_size {block_size} drafts "
                                f"1..{block_size - 1} tokens a round (vLLM would query {n!r} + 1 block slots)")
    return {"method": "dflash", "model": str(head_dir), "num_speculative_tokens": n}


# ---------------------------------------------------------------- load (the hook checkpoint.load_head calls)
def dflash_layout(config: dict[str, Any]) -> str | None:
    """``"zlab"`` or ``"speculators"`` for a DFlash export's ``config.json`` dict, else None."""
    if config.get("speculators_model_type") in ("dflash", "dflash2"):
        return "speculators"
    if "dflash_config" in config or any(str(a).startswith("DFlash") for a in config.get("architectures") or []):
        return "zlab"
    return None


def load_dflash_export(raw: dict[str, Any], path: Path, *, target_config: Any = None,
                       fused_layer_ids: list[int] | None = None, target_name_or_path: str | None = None,
                       map_location: str | torch.device = "cpu") -> DFlashHead:
    """A :class:`DFlashHead` from an exported directory whose ``config.json`` (already read) is ``raw``.
    Refuses (``DFlashExportError``, naming the key) what the head cannot compute as vLLM would."""
    where = path / CONFIG_FILE
    layout = dflash_layout(raw)
    if layout is None:
        raise DFlashExportError(f"{where}: not a DFlash export (no dflash_config, no DFlash architecture)")
    layer, knobs = _split(raw, layout, where)
    _refuse_unsupported(layer, knobs, raw, path)
    prov = raw.get("eaglehead") or {}
    target_layers = raw.get("num_target_layers") or prov.get("target_num_hidden_layers")
    if target_layers is None and target_config is not None:
        target_layers = getattr(getattr(target_config, "text_config", target_config), "num_hidden_layers", None)
    if target_layers is None:
        raise DFlashExportError(f"{where}: no num_target_layers; pass target_config")
    config = DFlashConfig(
        hidden_size=_need(layer, "hidden_size", where), intermediate_size=_need(layer, "intermediate_size", where),
        num_attention_heads=_need(layer, "num_attention_heads", where),
        num_key_value_heads=layer.get("num_key_value_heads") or layer["num_attention_heads"],
        head_dim=layer.get("head_dim") or layer["hidden_size"] // layer["num_attention_heads"],
        num_hidden_layers=_need(layer, "num_hidden_layers", where), target_num_hidden_layers=int(target_layers),
        target_vocab_size=_need(layer, "vocab_size", where),
        fused_layer_ids=list(fused_layer_ids or knobs["fused_layer_ids"]), mask_token_id=knobs["mask_token_id"],
        block_size=knobs["block_size"], rms_norm_eps=layer.get("rms_norm_eps", 1e-6), **_rope_from(layer, where),
        max_position_embeddings=layer.get("max_position_embeddings", 2048),
        hidden_act=layer.get("hidden_act", "silu"),
        target_name_or_path=target_name_or_path or prov.get("target_name_or_path") or knobs["verifier"])
    return _assemble(config, _read_state(path), path / WEIGHTS_FILE, map_location)


# ---------------------------------------------------------------- helpers
def _check_exportable(head: DFlashHead) -> DFlashConfig:
    if not isinstance(head, DFlashHead):
        raise DFlashExportError(f"export_dflash takes a DFlashHead, got {type(head).__name__}")
    cfg = head.config
    top = cfg.target_num_hidden_layers
    if top in cfg.fused_layer_ids:
        raise DFlashExportError(
            f"fused_layer_ids {cfg.fused_layer_ids}: id {top} is the target's final-normed state in "
            f"output_hidden_states, but vLLM taps layer {top - 1}'s output before the final norm")
    return cfg


def _check_speculative_tokens(n: Any, cfg: DFlashConfig) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cfg.block_size - 1:
        raise DFlashExportError(f"speculative_tokens={n!r}: expected 1..{cfg.block_size - 1} "
                                f"(block_size {cfg.block_size} minus the last committed token)")


def _qwen3_layer_dict(cfg: DFlashConfig) -> dict[str, Any]:
    n = cfg.num_hidden_layers
    return {
        "model_type": "qwen3", "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": n, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim, "hidden_act": cfg.hidden_act,
        "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": cfg.target_vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings, "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        # vLLM's get_rope reads rope_parameters (transformers 5), and without a theta there defaults to 1e6
        "rope_parameters": {"rope_type": "default", **(cfg.rope_scaling or {}), "rope_theta": cfg.rope_theta},
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": n,
        "layer_types": ["full_attention"] * n,
    }


def _provenance(cfg: DFlashConfig) -> dict[str, Any]:
    return {"head_type": DFlashHead.head_type, "fused_layer_ids": list(cfg.fused_layer_ids),
            "target_num_hidden_layers": cfg.target_num_hidden_layers, "target_name_or_path": cfg.target_name_or_path}


def _set_dtype(config: dict[str, Any], name: str) -> None:
    config["torch_dtype"] = name
    if "transformer_layer_config" in config:
        config["transformer_layer_config"]["torch_dtype"] = name


def _split(raw: dict[str, Any], layout: str, where: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Qwen3 layer config, the DFlash knobs: fused_layer_ids ours, mask_token_id, block_size, verifier)."""
    if layout == "speculators":
        if raw["speculators_model_type"] != "dflash":
            raise DFlashExportError(f"{where}: speculators_model_type {raw['speculators_model_type']!r}: only "
                                    "'dflash' (dflash2 adds a convolution and a selector head DFlashHead lacks)")
        layer = raw.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise DFlashExportError(f"{where}: transformer_layer_config must be a dict")
        ids = _need(raw, "aux_hidden_state_layer_ids", where)
        verifier = ((raw.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path") or ""
        knobs = {"fused_layer_ids": list(ids), "mask_token_id": _need(raw, "mask_token_id", where),
                 "block_size": _need(raw, "block_size", where), "verifier": verifier}
        return layer, knobs
    dcfg = raw.get("dflash_config") or {}
    archs = raw.get("architectures") or []
    if archs != [ARCHITECTURE]:
        raise DFlashExportError(f"{where}: architectures {archs}: only [{ARCHITECTURE!r}] is DFlashHead's model")
    if "target_layer_ids" not in dcfg or "mask_token_id" not in dcfg:
        raise DFlashExportError(f"{where}: dflash_config needs target_layer_ids and mask_token_id (vLLM would "
                                "otherwise tap its default layers and mask with token 0)")
    ids = [int(i) + 1 for i in dcfg["target_layer_ids"]]
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    if top is not None and list(top) != ids:
        raise DFlashExportError(f"{where}: eagle_aux_hidden_state_layer_ids {top} (which vLLM taps first) disagree "
                                f"with dflash_config.target_layer_ids {dcfg['target_layer_ids']} (+1 = {ids})")
    return raw, {"fused_layer_ids": ids, "mask_token_id": dcfg["mask_token_id"],
                 "block_size": _need(raw, "block_size", where), "verifier": ""}


def _refuse_unsupported(layer: dict[str, Any], knobs: dict[str, Any], raw: dict[str, Any], path: Path) -> None:
    """Every config switch of vLLM's ``qwen3_dflash.py`` that makes it compute something DFlashHead does not."""
    where = path / CONFIG_FILE
    dcfg = raw.get("dflash_config") or {}
    causal = [name for name, on in (
        ("is_causal", layer.get("is_causal") or raw.get("is_causal")), ("dflash_config.causal", dcfg.get("causal")),
        ("sliding_window_non_causal=false", raw.get("sliding_window_non_causal") is False)) if on]
    if causal:
        raise DFlashExportError(f"{where}: {causal[0]}: vLLM would run the block causally; DFlashHead's block "
                                "attention is non-causal")
    layer_types = layer.get("layer_types") or []
    sliding = [k for k, on in (("dflash_config.use_swa", dcfg.get("use_swa")),
                               ("use_sliding_window", layer.get("use_sliding_window")),
                               ("layer_types", any(t != "full_attention" for t in layer_types))) if on]
    if sliding:
        raise DFlashExportError(f"{where}: {sliding[0]}: sliding-window layers; DFlashHead attends to the whole context")
    switches = {"attention_bias": layer.get("attention_bias"), "dflash_config.attention_sink_bias":
                dcfg.get("attention_sink_bias") or layer.get("add_swa_attention_sink_bias"),
                "dflash_config.attention_value_scale": dcfg.get("attention_value_scale") is not None,
                "is_neox_style=false": layer.get("is_neox_style", True) is False,
                "use_aux_hidden_state=false": dcfg.get("use_aux_hidden_state", True) is False,
                "sample_from_anchor": dcfg.get("sample_from_anchor") or raw.get("sample_from_anchor"),
                "has_own_lm_head": layer.get("has_own_lm_head")}
    on = [k for k, v in switches.items() if v]
    if on:
        raise DFlashExportError(f"{where}: {on[0]} is set: DFlashHead has no such variant")
    draft_vocab = raw.get("draft_vocab_size") or layer.get("draft_vocab_size")
    if draft_vocab not in (None, layer.get("vocab_size")):
        raise DFlashExportError(f"{where}: draft_vocab_size {draft_vocab} != vocab_size {layer.get('vocab_size')}: "
                                "DFlashHead scores the target's whole vocabulary")
    hidden = raw.get("target_hidden_size") or layer.get("target_hidden_size")
    if hidden not in (None, layer.get("hidden_size")):
        raise DFlashExportError(f"{where}: target_hidden_size {hidden} != hidden_size {layer.get('hidden_size')}")
    if (path / MASK_EMBEDDING_FILE).exists():
        raise DFlashExportError(f"{path / MASK_EMBEDDING_FILE}: a separate mask embedding (vLLM uses it for "
                                f"mask token {knobs['mask_token_id']}); DFlashHead uses the target's table row")


def _rope_from(layer: dict[str, Any], where: Path) -> dict[str, Any]:
    rope = dict(layer.get("rope_parameters") or layer.get("rope_scaling") or {})
    theta = rope.pop("rope_theta", None) or layer.get("rope_theta")
    if theta is None:
        raise DFlashExportError(f"{where}: no rope_theta (vLLM would default it to 1e6, transformers to 1e4)")
    return {"rope_theta": float(theta), "rope_scaling": rope or None}


def _assemble(config: DFlashConfig, state: dict[str, torch.Tensor], source: Path, map_location) -> DFlashHead:
    with torch.device("meta"):
        head = DFlashHead(config)
    expected = head.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        shared = [k for k in unexpected if "embed_tokens" in k or "lm_head" in k]
        hint = f" ({shared}: DFlashHead shares the target's embedding and output layer)" if shared else ""
        raise DFlashExportError(f"{source}: missing key(s) {missing}, unexpected key(s) {unexpected}{hint}")
    main = Counter(v.dtype for v in state.values()).most_common(1)[0][0]
    for key, want in expected.items():
        got = state[key]
        if tuple(got.shape) != tuple(want.shape):
            raise DFlashExportError(f"{source}: {key} has shape {list(got.shape)}, expected {list(want.shape)}")
        if not got.dtype.is_floating_point or got.dtype != main:
            raise DFlashExportError(f"{source}: {key} has dtype {got.dtype}, expected {main} like the others")
    head.load_state_dict(state, strict=True, assign=True)
    return head.to(map_location)


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    if not (path / WEIGHTS_FILE).is_file():
        raise DFlashExportError(f"{path}: no {WEIGHTS_FILE} (sharded checkpoints are not supported)")
    return load_file(str(path / WEIGHTS_FILE))


def _prepare_dir(out: Path, overwrite: bool) -> Path:
    if out.exists() and not out.is_dir():
        raise DFlashExportError(f"out_dir {out} exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise DFlashExportError(f"out_dir {out} is not empty; pass overwrite=True to replace its checkpoint files")
        for name in (CONFIG_FILE, WEIGHTS_FILE, MASK_EMBEDDING_FILE):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _need(cfg: dict[str, Any], key: str, where: Path) -> Any:
    if key not in cfg:
        raise DFlashExportError(f"{where}: missing key {key!r}")
    return cfg[key]
