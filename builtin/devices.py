"""Precision and device helpers every layer shares: the one dtype table, the one device sync, thread counts."""

from __future__ import annotations

import contextlib

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str | torch.dtype, device_type: str = "cpu", option: str = "--dtype") -> torch.dtype:
    """A dtype from its name; ``"auto"`` is bfloat16 on CUDA and float32 elsewhere. ``option`` names the
    setting in the error."""
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        return torch.bfloat16 if device_type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"{option} must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")


def cpu_info(path: str = "/proc/cpuinfo") -> dict:
    """``{"model": ..., "flags": [...]}``: the CPU's model name and which of ``SPEED_FLAGS`` (the flags that decide
    the fast path: what ``lscpu | grep -o 'avx512_bf16\\|amx...'`` shows) it has, read from /proc/cpuinfo; model
    None and no flags where it cannot be read."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return {"model": None, "flags": []}
    lines = text.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)
    flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
    return {"model": model, "flags": [f for f in SPEED_FLAGS if f in flags]}


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """Whether bfloat16 matmuls are fast on ``device``: CUDA, or a CPU whose flags show avx512_bf16 or amx_bf16
    (read from /proc/cpuinfo; False where it cannot be read)."""
    device = torch.device(device)
    if device.type == "cuda":
        return True
    flags = cpu_info()["flags"]
    return "avx512_bf16" in flags or "amx_bf16" in flags


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on CPU), so that a clock read after it is honest."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` torch intra-op threads (``None``: leave the count alone), then restore the
    previous count, also on error."""
    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
