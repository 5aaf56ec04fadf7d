"""Linear layers through oneDNN with their weights packed once: the CPU decode path's matrix products.

    from eaglehead.decode.packed_linear import pack_linears
    n = pack_linears(target)          # every nn.Linear on the CPU in float32 / bfloat16; returns how many
    n = pack_linears(drafter.head)    # the draft head's too

Why: ``F.linear`` in float32 on a CPU runs MKL's sgemm (or sgemv for one row), which packs the weight on every
call and, on a CPU that MKL does not treat as its own (AMD), runs without AVX-512; a speculative round's
verification forward of a few tokens then costs 1.5-1.7x a one-token forward. oneDNN's inner-product with the
weight reordered once into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight`` /
``_linear_pointwise``, what Inductor's weight freezing emits on CPU, and the serving engines' CPU backends do
the same with their own packed GEMMs) makes both the one-token and the few-token forward cheaper. bfloat16
``F.linear`` already runs oneDNN, but reorders the weight per call. The numbers and the command: BENCHMARKS.md
("Packed linear layers on the CPU").

The packed layer keeps the original ``weight`` / ``bias`` parameters (same objects: tied weights stay tied,
``state_dict`` keys do not change, code that reads ``.weight`` works) and uses the packed copy only where it
is valid: CPU input of the weight's dtype, no gradient needed, and the weight not changed since it was packed
(in place, replaced or moved; it is packed again then). Anything else runs ``F.linear``. The packed copy is
extra memory (one more copy of each packed weight): fine for the models a CPU decodes, but it is why this is
applied where decoding is timed (``eaglehead eval``, ``eaglehead generate``), not to models being trained.
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

PACKED_DTYPES = (torch.float32, torch.bfloat16)


def _ops_available() -> bool:
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise"))


@cache
def packed_dtypes() -> tuple[torch.dtype, ...]:
    """The dtypes this torch build packs on this CPU: float32 wherever oneDNN is built in, bfloat16 where the
    CPU runs oneDNN's bfloat16 kernels natively; ``()`` without oneDNN. Fixed for the process (cached)."""
    if not _ops_available():
        return ()
    bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return PACKED_DTYPES if bf16 is not None and bf16() else (torch.float32,)


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


def _signature(weight: torch.Tensor) -> tuple:
    """What identifies the weight's current values: a change of any of these means the packed copy is stale."""
    return weight.data_ptr(), weight._version, weight.dtype, weight.device, tuple(weight.shape)


class PackedLinear(nn.Module):
    """An ``nn.Linear`` whose no-grad CPU forward runs oneDNN on a packed copy of its weight (module docstring)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameter objects: ties and state_dict keys unchanged
        self.bias = linear.bias
        self._packed: torch.Tensor | None = None
        self._packed_for: tuple | None = None

    def _packed_weight(self) -> torch.Tensor:
        sig = _signature(self.weight)
        if self._packed is None or self._packed_for != sig:
            self._packed, self._packed_for = _pack(self.weight), sig
        return self._packed

    def _fast_path(self, x: torch.Tensor) -> bool:
        w, b = self.weight, self.bias
        return (x.device.type == "cpu" and w.device.type == "cpu" and x.dtype == w.dtype
                and w.dtype in packed_dtypes() and (b is None or b.dtype == w.dtype)
                and x.dim() >= 1 and x.shape[-1] == self.in_features and x.numel() > 0
                and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or
                                                      (b is not None and b.requires_grad))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fast_path(x):
            return F.linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.detach()
        lead = x.shape[:-1]
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, self.in_features).contiguous(), self._packed_weight(),
                                               bias, "none", [], "")
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` (exactly that class: subclasses such as quantized layers are left alone) on
    the CPU whose weight dtype :func:`packed_dtypes` allows by a :class:`PackedLinear`, in place. Returns how
    many were replaced (0 where oneDNN is missing, on another device, or when ``module`` is already packed).
    The weights are packed here, once, so the first timed forward does not pay for it."""
    dtypes = packed_dtypes()
    if not dtypes:
        return 0
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype in dtypes:
                packed = PackedLinear(child)
                with torch.no_grad():
                    packed._packed_weight()
                setattr(parent, name, packed)
                count += 1
    return count
