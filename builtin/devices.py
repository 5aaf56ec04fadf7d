"""Precision and device helpers every layer shares: the one dtype table and the one device sync."""

from __future__ import annotations

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


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def sync(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on CPU), so that a clock read after it is honest."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
