"""Sampling transforms shared by target and drafter.

The verifier is exact only if the recorded proposal ``q`` is the distribution the draft token was
actually drawn from, so target and drafter both go through :func:`probs` and :func:`sample_from`.
:func:`sample_inverse_cdf` draws from the same law with one uniform per row instead of one exponential per
vocabulary entry (the chat-data sampler uses it: far cheaper on a CPU at a large vocabulary).
Temperature 0 is greedy: a point mass at the argmax, ties broken towards the lowest token id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """Temperature, top-k and top-p applied (in that order) before renormalising.

    ``temperature=0`` means greedy decoding; ``top_k``/``top_p`` are then irrelevant.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None:
            p = self.top_p
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
                raise ValueError(f"top_p must be None or in (0, 1], got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def check_finite(logits: torch.Tensor, name: str = "logits") -> None:
    """Raise ``ValueError`` if ``logits`` holds NaN or +inf (``-inf`` is a legal mask value).

    This costs one host sync; callers in the hot loop fold it into the sync they already pay.
    """
    bad = torch.isnan(logits) | (logits == float("inf"))
    if bool(bad.any()):
        raise ValueError(f"{name} contain NaN or +inf values (shape {tuple(logits.shape)})")


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.float().argmax(-1)`` (the first maximum: the lowest id wins ties), computed in two
    vectorised passes: the maximum of each chunk of ``c`` entries (a power of two <= 1024 dividing ``V``),
    then the first chunk holding the row's maximum and the first maximum inside it. On a CPU ``argmax`` over
    a large vocabulary scans scalar by scalar: 17 bfloat16 rows of 49,152 cost 0.29 ms as float32 and 1.5 ms
    in place, the chunked form 0.12 ms (2 idle threads; ``BENCHMARKS.md``, "bfloat16 on a CPU without AMX").
    A vocabulary with no such divisor >= 64 takes the plain form."""
    v = logits.shape[-1]
    c = min(1024, v & -v)  # the largest power of two dividing v, at most 1024
    if c < 64 or v < 2 * c:
        return logits.float().argmax(-1)
    lead = logits.shape[:-1]
    blocks = logits.reshape(-1, v // c, c)  # [R, V/c, c]
    j = blocks.amax(-1).float().argmax(-1)  # [R] the first chunk holding the maximum (NaN counts as one)
    inner = blocks[torch.arange(blocks.shape[0], device=logits.device), j].float().argmax(-1)
    return (j * c + inner).reshape(lead)


def probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Turn ``logits [..., V]`` into the sampling distribution ``[..., V]`` (float32, rows sum to 1)."""
    logits = logits.float()
    if config.greedy:
        idx = greedy_argmax(logits)[..., None]  # first maximum: lowest id wins ties
        return torch.zeros_like(logits).scatter_(-1, idx, 1.0)
    # Shift by the row maximum first: a tiny temperature then cannot overflow to inf - inf = NaN.
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / config.temperature
    vocab = logits.shape[-1]
    if config.top_k is not None and config.top_k < vocab:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p is not None and config.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_p = torch.softmax(sorted_logits, dim=-1)
        # Mass strictly before each token; keep a token while that mass is < top_p, so the
        # smallest prefix reaching top_p is kept and the top token always survives.
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        drop_sorted = before >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample_from(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one index per row from non-negative ``weights [..., V]`` (need not be normalised).

    Exponential race: ``argmax_i w_i / E_i`` with ``E_i ~ Exp(1)`` picks ``i`` with probability
    ``w_i / sum(w)``. It needs no normalisation and no host sync. Computed in log space
    (``log w_i - log E_i``) so subnormal or huge weights neither underflow to a tie at 0 nor overflow
    to inf; zero weights score -inf and are never chosen while any weight is positive.
    """
    e = torch.empty_like(weights, dtype=torch.float32).exponential_(1.0, generator=generator)
    e = e.clamp_min(torch.finfo(torch.float32).tiny)  # an exact 0 draw would score +inf for every weight
    return (weights.float().log() - e.log()).argmax(dim=-1)


def sample_inverse_cdf(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one index per row from non-negative ``weights [..., V]`` by inverting the cumulative sum.

    One uniform per row instead of :func:`sample_from`'s one exponential per vocabulary entry: on a CPU
    at batch 32 and a 49152-token vocabulary ~2 ms against 52-69 ms (``BENCHMARKS.md``, regeneration). The
    cumulative sum is float64, so each index is drawn with probability ``w_i / sum(w)`` to ~1e-12; an index
    of zero weight is never drawn (its interval is empty, and a uniform rounding up to the total maps to
    the last index of positive weight). Draws a different stream than :func:`sample_from` for one seed.
    """
    cdf = weights.cumsum(-1, dtype=torch.float64)
    total = cdf[..., -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=weights.device) * total
    idx = torch.searchsorted(cdf, u, right=True)
    # the first index whose cumulative sum reaches the total: the last of positive weight
    last = torch.searchsorted(cdf, total.contiguous(), right=False)
    return torch.minimum(idx, last).squeeze(-1)
