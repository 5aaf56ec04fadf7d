"""Turn a ``.gguf`` file into a plain Hugging Face model directory, once, and reuse it.

    from eaglehead.builtin.gguf import gguf_to_hf_dir
    model_dir = gguf_to_hf_dir("SmolLM2-135M-Instruct.Q4_1.gguf")   # then from_pretrained(model_dir)

transformers reads a GGUF through ``from_pretrained(dir, gguf_file=name)`` and dequantizes it to the
float dtype asked for, which costs tens of seconds every time (the tokenizer alone ~10 s for a 49k
vocabulary). Here that happens once: the dequantized weights (safetensors), the tokenizer (with the
chat template), config and generation config are saved under
``cache_root()/gguf/<stem>-<sha256[:16]>-<dtype>``, keyed by the file's content. The directory is
built beside its final place and renamed into it; ``eaglehead-gguf.json``, written last, marks it
complete, and a directory without it is removed and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from tqdm.auto import tqdm

from eaglehead.builtin.devices import DTYPES
from eaglehead.builtin.paths import cache_root

MARKER = "eaglehead-gguf.json"
GGUF_MAGIC = b"GGUF"
# Tokenizer, config and filesystem slack on top of the weights when checking free space.
EXTRA_BYTES = 64 * 2**20


class GGUFError(ValueError):
    """A GGUF file that cannot be converted; the message names the file and the reason."""


def gguf_to_hf_dir(path: str | Path, dtype_name: str = "float32", *, progress: bool = True) -> Path:
    """The cached Hugging Face directory holding ``path``'s model in ``dtype_name``; built on first use."""
    if dtype_name not in DTYPES:
        raise ValueError(f"dtype {dtype_name!r} is not one of {sorted(DTYPES)}")
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise GGUFError(f"{path}: no such GGUF file")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (it does not start with {GGUF_MAGIC!r})")

    stages = ["hash", "check", "tokenizer", "model", "save"]
    bar = tqdm(total=len(stages), desc=f"gguf {path.name}", unit="stage", file=sys.stderr,
               disable=not progress)
    try:
        bar.set_postfix_str("hash")
        sha256 = _sha256(path)
        out = cache_root() / "gguf" / f"{path.stem}-{sha256[:16]}-{dtype_name}"
        bar.update()
        if _is_complete(out, sha256, dtype_name):
            bar.set_postfix_str("cached")
            bar.update(len(stages) - 1)
            return out
        if out.exists():
            print(f"eaglehead: {out} has no completion marker ({MARKER}); removing and rebuilding it",
                  file=sys.stderr)
            shutil.rmtree(out)

        bar.set_postfix_str("check")
        n_elements = _check_file(path)
        _check_disk_space(out, n_elements * DTYPES[dtype_name].itemsize + EXTRA_BYTES)
        bar.update()

        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; the finished cache entry is an ordinary directory
        try:
            _convert(path, tmp, DTYPES[dtype_name], bar)
            marker = {"source": str(path), "sha256": sha256, "dtype": dtype_name,
                      "transformers_version": _version("transformers"), "gguf_version": _version("gguf")}
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            try:
                os.replace(tmp, out)
            except OSError:
                # Another process finished the same conversion first: keep its copy.
                if not _is_complete(out, sha256, dtype_name):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out
    finally:
        bar.close()


def _convert(path: Path, out: Path, dtype: torch.dtype, bar) -> None:
    """Load ``path`` through transformers, dequantized to ``dtype``, and save it as a plain directory."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Ask for dense weights explicitly: for the architectures transformers can keep in GGUF blocks a
    # packed model would not be saveable.
    quant = {}
    if hasattr(transformers, "GgufConfig"):
        quant["quantization_config"] = transformers.GgufConfig(dequantize=True)
    where = {"pretrained_model_name_or_path": path.parent, "gguf_file": path.name}
    try:
        bar.set_postfix_str("tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(**where)
        bar.update()
        bar.set_postfix_str("model")
        model = AutoModelForCausalLM.from_pretrained(**where, dtype=dtype, **quant)
        bar.update()
    except Exception as err:  # transformers raises many kinds on a file it cannot parse
        raise GGUFError(f"{path}: transformers could not load it ({type(err).__name__}: {err})") from err
    bar.set_postfix_str("save")
    # The weights are dense now; without the GGUF quantizer attached the model saves as plain safetensors.
    model.config.quantization_config = None
    model.hf_quantizer = None
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    bar.update()


def _check_file(path: Path) -> int:
    """Parse the header and tensor infos; return the number of weight elements. Raises GGUFError on a
    truncated or corrupt file or an architecture transformers cannot load."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        arch = reader.fields["general.architecture"].contents()
        end = max(t.data_offset + t.n_bytes for t in reader.tensors)
    except KeyError:
        raise GGUFError(f"{path}: the header has no 'general.architecture'") from None
    except Exception as err:  # the reader fails in many ways on a cut or damaged file
        raise GGUFError(f"{path}: truncated or corrupt GGUF ({type(err).__name__}: {err})") from err
    size = path.stat().st_size
    if end > size:
        raise GGUFError(f"{path}: truncated: the tensor data needs {end} bytes, the file has {size}")
    supported = supported_architectures()
    if arch not in supported:
        raise GGUFError(f"{path}: architecture {arch!r} cannot be loaded by transformers "
                        f"{_version('transformers')}; supported: {', '.join(supported)}")
    return sum(int(t.n_elements) for t in reader.tensors)


def supported_architectures() -> list[str]:
    """``general.architecture`` values the installed transformers turns into a model."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}  # config sections, not models
    try:  # transformers >= 5.2x: a second loader for newer architectures
        from transformers.integrations.gguf import GGUF_ARCHS

        names |= set(GGUF_ARCHS)
    except ImportError:
        pass
    return sorted(names)


def _check_disk_space(out: Path, needed: int) -> None:
    existing = next(p for p in (out, *out.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise GGUFError(f"not enough free disk space for {out}: needs about {needed} bytes, "
                        f"{free} free on {existing}")


def _is_complete(out: Path, sha256: str, dtype_name: str) -> bool:
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("sha256") == sha256 and marker.get("dtype") == dtype_name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)
