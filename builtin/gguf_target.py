"""GGUF files for llama.cpp, written with the ``gguf`` package: float copies of quantized targets, tiny
Llama targets from Hugging Face models, copies with edits, and the target facts an EAGLE-3 export needs.

Usage::

    f32 = float_gguf_path(smollm2_gguf_path(), "float32")     # cached, dequantized, all metadata copied
    write_llama_gguf(model, tokenizer, "tiny.gguf")             # a HF Llama laid out as llama.cpp's converter does
    target = read_target_gguf("model.gguf")                    # architecture, layers, widths, tokenizer metadata
    rewrite_gguf(src, dst, kv={"eagle3.target_layers": ...})    # the same file with some values replaced

Tensor layout (llama.cpp's ``convert_hf_to_gguf.py`` for ``LlamaForCausalLM``): names ``token_embd``,
``blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}``,
``output_norm``, ``output`` (absent when the embedding is tied); the rows of ``attn_q``/``attn_k`` are
permuted per head (``llama_permute``) because llama.cpp's Llama uses the interleaved RoPE layout. In a
float16 file 1-D tensors (the norms) stay float32, as the converter writes them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eaglehead.builtin.gguf import GGUF_MAGIC, GGUFError
from eaglehead.builtin.paths import cache_root
from eaglehead.builtin.shipped import file_sha256

# (value, value type, element type of an array): what GGUFWriter.add_key_value takes.
KV = tuple[Any, Any, Any]
FLOAT_DTYPES = ("float32", "float16")
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5  # llama.cpp's token types


@dataclass
class TensorOut:
    """One tensor to write: ``shape`` in numpy (row-major) order, ``data`` the array or a function that
    makes it when its turn comes (so a large file is never held in memory at once)."""

    name: str
    shape: tuple[int, ...]
    qtype: Any  # gguf.GGMLQuantizationType
    data: np.ndarray | Callable[[], np.ndarray]


@dataclass(frozen=True)
class GGUFTarget:
    """What an EAGLE-3 export reads from a target GGUF (``read_target_gguf``)."""

    path: Path
    architecture: str
    block_count: int
    hidden_size: int
    vocab_size: int
    tokenizer: dict[str, KV]  # every ``tokenizer.*`` key, with its types


# ---------------------------------------------------------------- reading
def open_gguf(path: str | Path, what: str = "GGUF file"):
    """A ``gguf.GGUFReader`` for ``path``; ``GGUFError`` naming the file when it is missing, not GGUF,
    truncated or corrupt. ``what`` names the parameter in messages (e.g. ``"target"``)."""
    import gguf

    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"{what} {path}: no such file")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise GGUFError(f"{what} {path}: not a GGUF file (it does not start with {GGUF_MAGIC!r})")
    try:
        reader = gguf.GGUFReader(path)
        end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    except Exception as err:  # the reader fails in many ways on a cut or damaged file
        raise GGUFError(f"{what} {path}: truncated or corrupt GGUF ({type(err).__name__}: {err})") from err
    size = path.stat().st_size
    if end > size:
        raise GGUFError(f"{what} {path}: truncated: the tensor data needs {end} bytes, the file has {size}")
    return reader


def gguf_fields(reader) -> dict[str, KV]:
    """Every key/value of a file except the header counts and ``general.architecture`` (the writer
    writes those itself), with the types needed to write them back unchanged."""
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        out[key] = (field.contents(), field.types[0], sub)
    return out


def field_value(reader, key: str, path: Path | str, what: str = "GGUF file") -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise GGUFError(f"{what} {path}: metadata key {key!r} is missing")
    return field.contents()


def read_target_gguf(path: str | Path, what: str = "target") -> GGUFTarget:
    reader = open_gguf(path, what)
    arch = field_value(reader, "general.architecture", path, what)
    tokenizer = {k: v for k, v in gguf_fields(reader).items() if k.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in tokenizer:
        raise GGUFError(f"{what} {path}: no tokenizer (metadata key 'tokenizer.ggml.tokens' is missing)")
    return GGUFTarget(path=Path(path), architecture=str(arch),
                      block_count=int(field_value(reader, f"{arch}.block_count", path, what)),
                      hidden_size=int(field_value(reader, f"{arch}.embedding_length", path, what)),
                      vocab_size=len(tokenizer["tokenizer.ggml.tokens"][0]), tokenizer=tokenizer)


# ---------------------------------------------------------------- writing
def write_gguf(out_path: str | Path, arch: str, kv: dict[str, KV], tensors: list[TensorOut], *,
               overwrite: bool = False) -> Path:
    """Write a GGUF atomically (a temporary file beside ``out_path``, renamed into place when complete).
    An existing ``out_path`` is an error unless ``overwrite``."""
    import gguf

    out = Path(out_path)
    if out.exists() and not overwrite:
        raise GGUFError(f"out_path {out} exists; pass overwrite=True to replace it")
    if out.is_dir():
        raise GGUFError(f"out_path {out} is a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(tmp, arch)
        if "general.alignment" in kv:
            writer.data_alignment = int(kv["general.alignment"][0])
        for key, (value, vtype, sub) in kv.items():
            writer.add_key_value(key, value, vtype, sub)
        sizes = []
        for t in tensors:
            block, type_size = gguf.GGML_QUANT_SIZES[t.qtype]
            sizes.append(int(np.prod(t.shape, dtype=np.int64)) // block * type_size)
            # float32 as the nominal numpy dtype: with raw_dtype given, the writer keeps the shape as is.
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), sizes[-1], raw_dtype=t.qtype)
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t, nbytes in zip(tensors, sizes):
            data = np.ascontiguousarray(t.data() if callable(t.data) else t.data)
            if data.nbytes != nbytes:
                raise GGUFError(f"{out}: tensor {t.name} has {data.nbytes} bytes, expected {nbytes} for "
                                f"{t.qtype.name} {list(t.shape)}")
            writer.write_tensor_data(data)
        writer.close()
        tmp.chmod(0o644)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def encode(array: np.ndarray, qtype) -> np.ndarray:
    """``array`` (any float dtype) as the bytes/array a ``qtype`` tensor holds (F32, F16, BF16, ...)."""
    import gguf

    return gguf.quants.quantize(np.asarray(array, dtype=np.float32), qtype)


def float_qtype(dtype: str, ndim: int):
    """The converter's rule: 1-D tensors stay F32; the rest take the file's dtype."""
    import gguf

    table = {"float32": gguf.GGMLQuantizationType.F32, "float16": gguf.GGMLQuantizationType.F16,
             "bfloat16": gguf.GGMLQuantizationType.BF16}
    return table["float32" if ndim <= 1 else dtype]


def file_type(dtype: str) -> int:
    import gguf

    return {"float32": gguf.LlamaFileType.ALL_F32, "float16": gguf.LlamaFileType.MOSTLY_F16,
            "bfloat16": gguf.LlamaFileType.MOSTLY_BF16}[dtype]


def rewrite_gguf(src: str | Path, out_path: str | Path, *, kv: dict[str, Any] | None = None,
                 tensors: dict[str, np.ndarray] | None = None, overwrite: bool = False) -> Path:
    """``src`` copied with some values replaced: ``kv`` maps a key to a new value (same types as the
    original; ``None`` removes the key), ``tensors`` a tensor name to a new array of the same shape (written
    in the original's type). Everything else is copied byte for byte."""
    reader = open_gguf(src, "src")
    fields = gguf_fields(reader)
    for key, value in (kv or {}).items():
        if key not in fields:
            raise GGUFError(f"src {src}: no metadata key {key!r} to replace")
        if value is None:
            del fields[key]
        else:
            fields[key] = (value, *fields[key][1:])
    unknown = sorted(set(tensors or {}) - {t.name for t in reader.tensors})
    if unknown:
        raise GGUFError(f"src {src}: no tensor(s) {unknown} to replace")

    def spec(t) -> TensorOut:
        shape = tuple(int(n) for n in reversed(t.shape))
        if t.name in (tensors or {}):
            new = np.asarray(tensors[t.name])
            if new.shape != shape:
                raise GGUFError(f"tensors[{t.name!r}]: shape {list(new.shape)}, expected {list(shape)}")
            return TensorOut(t.name, shape, t.tensor_type, lambda: _as_type(new, t.tensor_type))
        return TensorOut(t.name, shape, t.tensor_type, lambda: t.data)

    arch = field_value(reader, "general.architecture", src, "src")
    return write_gguf(out_path, arch, fields, [spec(t) for t in reader.tensors], overwrite=overwrite)


def _as_type(array: np.ndarray, qtype) -> np.ndarray:
    import gguf

    ints = {gguf.GGMLQuantizationType.I8: np.int8, gguf.GGMLQuantizationType.I16: np.int16,
            gguf.GGMLQuantizationType.I32: np.int32, gguf.GGMLQuantizationType.I64: np.int64}
    return array.astype(ints[qtype]) if qtype in ints else encode(array, qtype)


# ---------------------------------------------------------------- float copies of quantized files
def write_float_gguf(src_gguf: str | Path, out_path: str | Path, dtype: str = "float32", *,
                     overwrite: bool = False) -> Path:
    """``src_gguf`` dequantized (``gguf.quants.dequantize``) to ``dtype`` (float32, or float16 with 1-D
    tensors kept float32), every key copied and ``general.file_type`` set to match."""
    import gguf

    if dtype not in FLOAT_DTYPES:
        raise GGUFError(f"dtype must be one of {list(FLOAT_DTYPES)}, got {dtype!r}")
    reader = open_gguf(src_gguf, "src_gguf")
    fields = gguf_fields(reader)
    fields["general.file_type"] = (int(file_type(dtype)), gguf.GGUFValueType.UINT32, None)
    integer = {gguf.GGMLQuantizationType.I8, gguf.GGMLQuantizationType.I16, gguf.GGMLQuantizationType.I32,
               gguf.GGMLQuantizationType.I64}

    def spec(t) -> TensorOut:
        shape = tuple(int(n) for n in reversed(t.shape))
        if t.tensor_type in integer:  # index tensors are not weights: copied as they are
            return TensorOut(t.name, shape, t.tensor_type, lambda: t.data)
        qtype = float_qtype(dtype, len(shape))
        return TensorOut(t.name, shape, qtype,
                         lambda: encode(gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape), qtype))

    arch = field_value(reader, "general.architecture", src_gguf, "src_gguf")
    return write_gguf(out_path, arch, fields, [spec(t) for t in reader.tensors], overwrite=overwrite)


def float_gguf_path(src: str | Path, dtype: str = "float32") -> Path:
    """The cached float copy of ``src``: ``cache_root()/gguf-float/<stem>-<sha256[:16]>-<dtype>.gguf``,
    written on first use (atomically, so a file that exists is complete)."""
    if dtype not in FLOAT_DTYPES:
        raise GGUFError(f"dtype must be one of {list(FLOAT_DTYPES)}, got {dtype!r}")
    src = Path(src).expanduser().resolve()
    if not src.is_file():  # the content is checked when the copy is built, not on every cached call
        raise GGUFError(f"src {src}: no such file")
    out = cache_root() / "gguf-float" / f"{src.stem}-{file_sha256(src)[:16]}-{dtype}.gguf"
    if not out.is_file():
        # overwrite=True: a concurrent builder of the same file renames identical content into place.
        write_float_gguf(src, out, dtype, overwrite=True)
    return out


# ---------------------------------------------------------------- tiny targets from Hugging Face
def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q/k projection reordered per head from HF's rotate-half to llama.cpp's interleaved
    RoPE layout (``LlamaModel.permute`` in llama.cpp's converter); ``n_head`` = heads of that projection."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of :func:`llama_permute`."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_kv(tokenizer, vocab_size: int | None = None) -> dict[str, KV]:
    """The ``tokenizer.*`` metadata of a Hugging Face fast tokenizer with a byte-level BPE model (the
    ``gpt2`` tokenizer model of llama.cpp), padded with unused tokens to ``vocab_size`` rows.

    The pre-tokenizer is written as ``gpt-2`` for a plain ``ByteLevel`` one and ``default`` otherwise:
    llama.cpp's converter recognises known tokenizers by a hash this function does not compute, so text
    llama.cpp tokenizes itself may split differently; token-id prompts are unaffected."""
    import gguf

    T = gguf.GGUFValueType
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise GGUFError(f"tokenizer: {type(tokenizer).__name__} is not a fast (tokenizers) tokenizer")
    spec = json.loads(backend.to_str())
    if spec["model"]["type"] != "BPE":
        raise GGUFError(f"tokenizer: model type {spec['model']['type']!r}; only byte-level BPE is supported")
    n = len(tokenizer)
    vocab_size = n if vocab_size is None else vocab_size
    if vocab_size < n:
        raise GGUFError(f"vocab_size {vocab_size} is smaller than the tokenizer's {n} tokens")
    special = {i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    added = set(tokenizer.added_tokens_decoder)
    tokens = tokenizer.convert_ids_to_tokens(list(range(n))) + [f"[PAD{i}]" for i in range(n, vocab_size)]
    types = [TOKEN_CONTROL if i in special else TOKEN_USER_DEFINED if i in added else TOKEN_NORMAL
             for i in range(n)] + [TOKEN_UNUSED] * (vocab_size - n)
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    if not merges:
        raise GGUFError("tokenizer: the BPE model has no merges; llama.cpp's gpt2 tokenizer requires them")
    pre = spec.get("pre_tokenizer") or {}
    kv: dict[str, KV] = {
        "tokenizer.ggml.model": ("gpt2", T.STRING, None),
        "tokenizer.ggml.pre": ("gpt-2" if pre.get("type") == "ByteLevel" else "default", T.STRING, None),
        "tokenizer.ggml.tokens": (tokens, T.ARRAY, T.STRING),
        "tokenizer.ggml.token_type": (types, T.ARRAY, T.INT32),
        "tokenizer.ggml.merges": (merges, T.ARRAY, T.STRING),
    }
    for name in ("bos", "eos", "unk", "pad"):
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        if token_id is not None:
            key = {"unk": "unknown", "pad": "padding"}.get(name, name)
            kv[f"tokenizer.ggml.{key}_token_id"] = (int(token_id), T.UINT32, None)
    kv["tokenizer.ggml.add_bos_token"] = (bool(getattr(tokenizer, "add_bos_token", False)), T.BOOL, None)
    if isinstance(getattr(tokenizer, "chat_template", None), str):
        kv["tokenizer.chat_template"] = (tokenizer.chat_template, T.STRING, None)
    return kv


def write_llama_gguf(model, tokenizer, out_path: str | Path, *, dtype: str = "float32",
                     overwrite: bool = False) -> Path:
    """A Hugging Face ``LlamaForCausalLM`` (plain RoPE) and its BPE tokenizer as the GGUF llama.cpp's
    converter writes (``general.architecture = "llama"``)."""
    import gguf

    cfg = model.config
    if getattr(cfg, "model_type", None) != "llama":
        raise GGUFError(f"model: expected a Llama (model_type 'llama'), got {getattr(cfg, 'model_type', None)!r}")
    if dtype not in FLOAT_DTYPES:
        raise GGUFError(f"dtype must be one of {list(FLOAT_DTYPES)}, got {dtype!r}")
    # transformers 5 keeps theta and type in rope_parameters (rope_scaling aliases it); 4.x in rope_scaling.
    rope = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise GGUFError(f"model: RoPE scaling {rope} is not supported here (plain RoPE only)")
    T, a = gguf.GGUFValueType, "llama"
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    meta = {
        "general.type": ("model", T.STRING, None), "general.name": ("eaglehead llama", T.STRING, None),
        f"{a}.block_count": (cfg.num_hidden_layers, T.UINT32, None),
        f"{a}.context_length": (cfg.max_position_embeddings, T.UINT32, None),
        f"{a}.embedding_length": (cfg.hidden_size, T.UINT32, None),
        f"{a}.feed_forward_length": (cfg.intermediate_size, T.UINT32, None),
        f"{a}.attention.head_count": (heads, T.UINT32, None),
        f"{a}.attention.head_count_kv": (kv_heads, T.UINT32, None),
        f"{a}.rope.freq_base": (float(rope.get("rope_theta") or getattr(cfg, "rope_theta", 10000.0)), T.FLOAT32, None),
        f"{a}.attention.layer_norm_rms_epsilon": (float(cfg.rms_norm_eps), T.FLOAT32, None),
        f"{a}.attention.key_length": (head_dim, T.UINT32, None),
        f"{a}.attention.value_length": (head_dim, T.UINT32, None),
        "general.file_type": (int(file_type(dtype)), T.UINT32, None),
        f"{a}.vocab_size": (cfg.vocab_size, T.UINT32, None),
        f"{a}.rope.dimension_count": (head_dim, T.UINT32, None),
        "general.quantization_version": (2, T.UINT32, None),
        **tokenizer_kv(tokenizer, cfg.vocab_size),
    }
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    out = [("token_embd.weight", state["model.embed_tokens.weight"])]
    for i in range(cfg.num_hidden_layers):
        for hf, ours in names.items():
            w = state[f"model.layers.{i}.{hf}.weight"]
            if ours in ("attn_q", "attn_k"):
                w = llama_permute(w, heads if ours == "attn_q" else kv_heads)
            out.append((f"blk.{i}.{ours}.weight", w))
    out.append(("output_norm.weight", state["model.norm.weight"]))
    if not cfg.tie_word_embeddings:
        out.append(("output.weight", state["lm_head.weight"]))
    tensors = [TensorOut(name, w.shape, float_qtype(dtype, w.ndim), encode(w, float_qtype(dtype, w.ndim)))
               for name, w in out]
    return write_gguf(out_path, a, meta, tensors, overwrite=overwrite)
