"""DFlash block drafters as GGUF files for llama.cpp's DFlash drafter (``--spec-type draft-dflash``).

Usage::

    export_dflash_gguf(head, "dflash.gguf", target="model.gguf")               # float16; tokenizer from the target
    export_dflash_gguf(head, "dflash.gguf", target="hf_model_dir", dtype="float32")

The file is what llama.cpp's loader reads for ``general.architecture = "dflash"`` (the llama.cpp the pinned
xllamacpp 2026.10.11549 embeds: ``src/models/dflash.cpp``, ``common/speculative.cpp``
``common_speculative_impl_draft_dflash``; its strings are in the wheel's ``xllamacpp.abi3.so``):

* ``dflash.target_layers`` (int32 array): llama.cpp reads the *input* of those target decoder layers
  (``llama_set_embeddings_layer_inp``; an id equal to the target's layer count is its pre-final-norm state):
  exactly our boundary ids (``fused_layer_ids``: id ``k`` = HF ``hidden_states[k]``), written as they are.
  z-lab's ``target_layer_ids`` are ours minus one. ``tests/builtin/test_llamacpp_dflash.py`` proves the
  convention by parity (ids shifted by one lose acceptance). Id ``L`` is refused: HF's ``hidden_states[L]``
  is final-normed, llama.cpp's is not.
* ``dflash.block_size`` (the trained block; llama.cpp clamps ``n_max`` to ``block_size - 1``),
  ``dflash.target_hidden_size``, ``dflash.attention.causal = false`` (the block attends to itself non-causally,
  as ours), the Qwen3 layer keys under ``dflash.*`` (``block_count`` = drafter layers), and the target's
  ``tokenizer.*`` keys with ``tokenizer.ggml.mask_token_id`` (llama.cpp's ``llama_vocab_mask``: the block's
  MASK token).
* Tensors ``fc.weight`` (``K*H -> H``), ``enc.output_norm.weight`` (our ``hidden_norm``), per layer
  ``blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up,
  ffn_down}.weight``, ``output_norm.weight`` (our final ``norm``). No ``token_embd``/``output``: llama.cpp uses
  the target's (``ctx_other``), raw embedding rows, as we do. RoPE is NEOX for this architecture (HF's
  rotate-half), so q/k rows are *not* permuted. Norms stay float32 in a float16/bfloat16 file.
* ``eaglehead.head_type`` and ``eaglehead.config`` (our config as JSON), which llama.cpp ignores.

What llama.cpp cannot run is refused with :class:`DFlashGGUFError`: a target whose graph does not expose its
layer inputs (the engine would abort), a tapped id at the target's last boundary, llama3 or YaRN RoPE scaling
(the DFlash loader reads no ``rope_freqs`` and YaRN is unproven here), a head that does not fit the target.

Block width. llama.cpp decodes ``[last, MASK x n_max]`` (``n_max + 1`` slots); our drafter always runs the
whole block. With non-causal attention the two draft the same tokens only at ``n_max = block_size - 1``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from eaglehead.builtin.gguf import GGUFError
from eaglehead.builtin.gguf_target import (KV, TensorOut, encode, float_qtype, write_gguf)

from .dflash import DFlashHead
from .gguf_head import HOOKED_ARCHITECTURES, layer_kv, target_facts

ARCH = "dflash"
DTYPES = ("float16", "float32", "bfloat16")
# Our parameter names (after "layers.N.") -> llama.cpp's names (after "blk.N.").
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_TENSORS = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight",
               "norm.weight": "output_norm.weight"}


class DFlashGGUFError(ValueError):
    """A DFlash drafter or target llama.cpp's DFlash drafter cannot run; the message names the parameter or file."""


def gguf_tensor_name(key: str) -> str:
    """llama.cpp's name of our state-dict key ``key`` (``KeyError`` for one it has no tensor for)."""
    if key in TOP_TENSORS:
        return TOP_TENSORS[key]
    prefix, layer, rest = key.split(".", 2)
    if prefix != "layers" or not layer.isdigit():
        raise KeyError(key)
    return f"blk.{layer}.{LAYER_TENSORS[rest]}"


# ---------------------------------------------------------------- export
def export_dflash_gguf(head: DFlashHead, path: str | Path, *, target: str | Path, dtype: str = "float16",
                       overwrite: bool = False, name: str | None = None) -> Path:
    """Write ``head`` as a DFlash GGUF for ``target`` (a ``.gguf`` file, whose tokenizer keys are copied, or a
    Hugging Face model directory with a byte-level BPE tokenizer). ``dtype``: float16 (default), float32 or
    bfloat16 for the matrices; norms stay float32."""
    if dtype not in DTYPES:
        raise DFlashGGUFError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    out = Path(path)
    if out.exists() and not overwrite:
        raise DFlashGGUFError(f"path {out} exists; pass overwrite=True to replace it")
    _check_head(head)
    facts = target_facts(target, error=DFlashGGUFError, drafter="DFlash")
    _check_against_target(head, facts)
    kv = _head_kv(head, facts, dtype, name)
    tensors = _head_tensors(head, dtype)
    n_params = sum(int(np.prod(t.shape)) for t in tensors)
    kv["general.size_label"] = (_size_label(n_params), _value_types().STRING, None)
    try:
        return write_gguf(out, ARCH, kv, tensors, overwrite=overwrite)
    except GGUFError as err:
        raise DFlashGGUFError(str(err)) from err


def _check_head(head: DFlashHead) -> None:
    if getattr(head, "head_type", None) != "dflash":
        raise DFlashGGUFError(f"head: head_type {getattr(head, 'head_type', None)!r} is not 'dflash' "
                              "(export EAGLE-3 heads with gguf_head.export_gguf)")
    if head.fc.weight.is_meta:
        raise DFlashGGUFError("head: its weights are on the meta device; materialise them first")
    kind = (head.config.rope_scaling or {}).get("rope_type")
    if kind in ("llama3", "yarn"):
        raise DFlashGGUFError(f"rope_scaling: rope_type {kind!r} cannot run in llama.cpp's DFlash drafter (its "
                              "loader reads no rope_freqs tensor for llama3, and YaRN is not proven against this "
                              "drafter here)")


def _check_against_target(head: DFlashHead, facts: dict[str, Any]) -> None:
    cfg, src, layers = head.config, facts["source"], facts["layers"]
    if facts["arch"] not in HOOKED_ARCHITECTURES:
        raise DFlashGGUFError(f"{src}: architecture {facts['arch']!r} does not expose its layer inputs to "
                              "llama.cpp's DFlash drafter, which would abort "
                              f"(supported: {list(HOOKED_ARCHITECTURES)})")
    for what, want, got in (("hidden_size (the target's, shared embedding)", cfg.hidden_size, facts["hidden"]),
                            ("target_vocab_size", cfg.target_vocab_size, facts["vocab"]),
                            ("target_num_hidden_layers", cfg.target_num_hidden_layers, layers)):
        if want != got:
            raise DFlashGGUFError(f"{src}: head expects {what} {want}, the target has {got}")
    bad = [i for i in cfg.fused_layer_ids if not 0 <= i < layers]
    if bad:
        raise DFlashGGUFError(f"fused_layer_ids {cfg.fused_layer_ids}: {bad} not in 0..{layers - 1}, the decoder "
                              f"layers of {src} whose input llama.cpp can tap (id {layers} is the final-normed "
                              "state in Hugging Face's hidden_states, the un-normed one in llama.cpp's)")
    if "tokenizer.ggml.tokens" not in facts["tokenizer"]:
        raise DFlashGGUFError(f"{src}: no tokenizer (tokenizer.ggml.tokens); llama.cpp reads the MASK token from it")


def _value_types():
    import gguf

    return gguf.GGUFValueType


def _head_kv(head: DFlashHead, facts: dict[str, Any], dtype: str, name: str | None) -> dict[str, KV]:
    cfg, T, a = head.config, _value_types(), ARCH
    kv: dict[str, KV] = {
        "general.type": ("model", T.STRING, None),
        "general.name": (name or f"eaglehead DFlash drafter for {cfg.target_name_or_path or 'its target'}",
                         T.STRING, None),
        **layer_kv(a, cfg, dtype, cfg.num_hidden_layers),
        f"{a}.attention.causal": (False, T.BOOL, None),
        f"{a}.target_layers": ([int(i) for i in cfg.fused_layer_ids], T.ARRAY, T.INT32),
        f"{a}.target_hidden_size": (cfg.target_hidden_size, T.UINT32, None),
        f"{a}.block_size": (cfg.block_size, T.UINT32, None),
    }
    kv.update(facts["tokenizer"])
    kv["tokenizer.ggml.mask_token_id"] = (int(cfg.mask_token_id), T.UINT32, None)
    kv["eaglehead.head_type"] = (head.head_type, T.STRING, None)
    kv["eaglehead.config"] = (json.dumps(cfg.to_dict(), sort_keys=True), T.STRING, None)
    return kv


def _head_tensors(head: DFlashHead, dtype: str) -> list[TensorOut]:
    state = {k: v.detach().float().cpu().numpy() for k, v in head.state_dict().items()}
    out = []
    for key in sorted(state, key=_tensor_order):
        w = state[key]
        qtype = float_qtype(dtype, w.ndim)
        out.append(TensorOut(gguf_tensor_name(key), w.shape, qtype, encode(w, qtype)))
    return out


def _tensor_order(key: str) -> tuple:
    """fc and the encoder norm first, then the layers in order, the final norm last."""
    if key.startswith("layers."):
        _, layer, rest = key.split(".", 2)
        return (1, int(layer), rest)
    return (0 if key != "norm.weight" else 2, 0, key)


def _size_label(n_params: int) -> str:
    import gguf

    return gguf.size_label(n_params, 0, 0, 0)
