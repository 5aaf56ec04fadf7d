"""Sampling transforms: ``probs`` against a float64 reference, ``SamplingConfig`` validation, and
``sample_from`` frequencies (Monte Carlo bound derived in ``exact_reference.frequency_mismatches``:
Bernstein per cell, union bound over cells, family-wise false-alarm rate alpha = 1e-6 per check).

Run: ``python -m pytest tests/decode/test_sampling.py -q``
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from eaglehead.decode import sampling
from eaglehead.decode.sampling import SamplingConfig, greedy_argmax, probs, sample_from, sample_inverse_cdf

from .exact_reference import frequency_mismatches, top_k_and_tail_mismatches

FLOAT32_EPS = 2.0**-24  # unit roundoff of float32


def reference_probs(logits: list[float], cfg: SamplingConfig) -> list[float]:
    """Float64 reference of one row: temperature, then top-k, then top-p (smallest prefix), renormalised.

    Written independently of the implementation: plain Python over a sorted list.
    """
    vocab = len(logits)
    if cfg.temperature == 0:
        best = max(logits)
        return [1.0 if i == logits.index(best) else 0.0 for i in range(vocab)]
    z = [x / cfg.temperature for x in logits]
    keep = [x > -math.inf for x in z]
    if cfg.top_k is not None and cfg.top_k < vocab:
        kth = sorted(z, reverse=True)[cfg.top_k - 1]
        keep = [k and x >= kth for k, x in zip(keep, z)]  # ties with the k-th value stay
    if cfg.top_p is not None and cfg.top_p < 1.0:
        w = _softmax64(z, keep)
        mass, kept = 0.0, set()
        for i in sorted(range(vocab), key=lambda i: -w[i]):
            if mass >= cfg.top_p:
                break
            kept.add(i)
            mass += w[i]
        keep = [k and i in kept for i, k in enumerate(keep)]
    return _softmax64(z, keep)


def _softmax64(z: list[float], keep: list[bool]) -> list[float]:
    top = max(x for x, k in zip(z, keep) if k)
    e = [math.exp(x - top) if k else 0.0 for x, k in zip(z, keep)]
    s = sum(e)
    return [x / s for x in e]


def _logits(seed: int, rows: int, vocab: int, scale: float = 2.0) -> torch.Tensor:
    """Random float32 logits in [-10, 10], distinct with overwhelming probability."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(rows, vocab, generator=g)).clamp(-10, 10)


CONFIGS = [
    SamplingConfig(),
    SamplingConfig(temperature=0),
    SamplingConfig(temperature=0.5),
    SamplingConfig(temperature=2.0, top_k=5),
    SamplingConfig(temperature=0.7, top_p=0.9),
    SamplingConfig(temperature=1.3, top_k=10, top_p=0.6),
    SamplingConfig(top_k=1),
    SamplingConfig(top_k=100),
    SamplingConfig(top_p=1.0),
    SamplingConfig(top_p=1e-9),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_rows_are_float32_distributions(cfg: SamplingConfig) -> None:
    logits = _logits(1, 32, 64)
    logits[::3, 5] = float("-inf")  # masked entries are legal
    out = probs(logits, cfg)
    assert out.dtype == torch.float32 and out.shape == logits.shape
    assert bool((out >= 0).all()) and bool(out.isfinite().all())
    # A float32 sum of V terms each within 1 ulp carries at most ~2 V eps relative error.
    assert float((out.sum(-1) - 1).abs().max()) <= 2 * 64 * FLOAT32_EPS
    assert bool((out[::3, 5] == 0).all())


def test_greedy_is_point_mass_with_lowest_id_on_ties() -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [-1.0, 0.0, -2.0, 0.0]])
    out = probs(logits, SamplingConfig(temperature=0))
    assert out.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    # top-k/top-p do not matter under greedy
    assert torch.equal(probs(logits, SamplingConfig(temperature=0, top_k=3, top_p=0.1)), out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("vocab", [49152, 4096, 1000, 100])  # chunks of 1024, 1024, 8 (plain), 4 (plain)
def test_greedy_argmax_is_the_first_maximum(dtype: torch.dtype, vocab: int) -> None:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(2, 5, vocab, generator=g).to(dtype)
    x[0, 0] = 1.0  # a whole row tied: id 0
    x[0, 1, vocab // 2:] = 50.0  # a tie across chunks: the first one
    x[0, 2, -1] = 50.0  # the last id alone
    x[0, 3, 3] = x[0, 3, vocab - 7] = 60.0  # first and last chunk tie
    x[1, 0] = float("-inf")
    x[1, 0, vocab - 2] = -1e4
    x[1, 1] = torch.round(x[1, 1].float() * 2).to(dtype)  # many ties
    want = x.float().argmax(-1)
    assert torch.equal(greedy_argmax(x), want)
    assert torch.equal(greedy_argmax(x[:, 1]), want[:, 1])  # [B, V], a non-contiguous slice
    assert greedy_argmax(x)[0, :4].tolist() == [0, vocab // 2, vocab - 1, 3]


def _close_to_reference(logits: torch.Tensor, cfg: SamplingConfig, rtol: float) -> None:
    """Support must match exactly; kept probabilities within ``rtol`` of the float64 reference."""
    out = probs(logits, cfg).double()
    ref = torch.tensor([reference_probs(row, cfg) for row in logits.double().tolist()], dtype=torch.float64)
    assert torch.equal(out > 0, ref > 0), cfg
    torch.testing.assert_close(out, ref, rtol=rtol, atol=0.0)


# Temperature: z = x / T has |z| <= 10 / 0.25 = 40, so its float32 rounding moves the exponent by at
# most 40 * eps ~ 2.4e-6 absolutely (twice that for z_i - max); exp adds ~1 ulp and the float32 sum of
# 64 terms at most 64 eps ~ 3.8e-6 relative. Together < 1.5e-5; rtol = 2e-5 is the stated tolerance.
TEMPERATURE_RTOL = 2e-5


@pytest.mark.parametrize("temperature", [0.25, 0.5, 1.0, 1.7, 4.0, 100.0])
def test_temperature_matches_float64_softmax(temperature: float) -> None:
    cfg = SamplingConfig(temperature=temperature)
    _close_to_reference(_logits(2, 64, 64, scale=3.0), cfg, TEMPERATURE_RTOL)


def test_tiny_positive_temperature_is_finite() -> None:
    """A valid positive temperature must not overflow logits / T into inf - inf = NaN.

    The float64 reference at T = 1e-45 is a point mass at the (unique) maximum.
    """
    logits = torch.tensor([[1.0, 2.0, -3.0], [0.5, -0.5, 0.25]])
    for temperature in (1e-30, 1e-40, 1e-45):
        out = probs(logits, SamplingConfig(temperature=temperature))
        assert out.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], (temperature, out)


@pytest.mark.parametrize("k", [1, 2, 7, 31, 32, 50])
def test_top_k_keeps_exactly_k(k: int) -> None:
    logits = _logits(3, 16, 32)
    out = probs(logits, SamplingConfig(top_k=k))
    assert ((out > 0).sum(-1) == min(k, 32)).all()
    _close_to_reference(logits, SamplingConfig(top_k=k), TEMPERATURE_RTOL)


def test_top_k_keeps_ties_at_the_kth_value() -> None:
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    out = probs(logits, SamplingConfig(top_k=2))
    assert (out > 0).tolist() == [[True, True, True, True, False], [True] * 5]


def _midpoint_top_p(row: list[float], cfg: SamplingConfig, k: int) -> float:
    """A top_p strictly between the k-th and (k+1)-th cumulative mass (float64), far from both."""
    w = sorted(reference_probs(row, cfg), reverse=True)
    lo, hi = sum(w[:k]), sum(w[: k + 1])
    assert hi - lo > 1e-4  # a margin 1000x the float32 rounding of the cumulative sums
    return (lo + hi) / 2


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.6, None), (1.5, 12)])
def test_top_p_keeps_smallest_prefix_reaching_p(temperature: float, top_k: int | None) -> None:
    """With top_p between the k-th and (k+1)-th cumulative masses, exactly k + 1 tokens survive."""
    logits = _logits(4, 24, 32)
    base = SamplingConfig(temperature=temperature, top_k=top_k)
    for r, row in enumerate(logits.tolist()):
        k = r % 6  # 0..5 tokens strictly below top_p, then the one that reaches it
        cfg = SamplingConfig(temperature=temperature, top_k=top_k, top_p=_midpoint_top_p(row, base, k))
        out = probs(logits[r : r + 1], cfg)
        assert int((out > 0).sum()) == k + 1, (r, cfg)
        _close_to_reference(logits[r : r + 1], cfg, TEMPERATURE_RTOL)


def test_top_p_tiny_keeps_the_top_token() -> None:
    logits = _logits(5, 8, 16)
    out = probs(logits, SamplingConfig(top_p=1e-9))
    assert torch.equal(out, torch.nn.functional.one_hot(logits.argmax(-1), 16).float())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cfg", [SamplingConfig(), SamplingConfig(temperature=0),
                                 SamplingConfig(temperature=0.8, top_k=6, top_p=0.9)], ids=repr)
def test_half_precision_logits_give_float32_probs(dtype: torch.dtype, cfg: SamplingConfig) -> None:
    low = _logits(6, 8, 32).to(dtype)
    out = probs(low, cfg)
    assert out.dtype == torch.float32
    assert torch.equal(out, probs(low.float(), cfg))  # same as upcasting first: no half arithmetic


INVALID = [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": "1.0"}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": -0.2}, "top_p"),
    ({"top_p": float("nan")}, "top_p"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": -3}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_k": True}, "top_k"),
]


@pytest.mark.parametrize("kwargs,field", INVALID, ids=[repr(k) for k, _ in INVALID])
def test_invalid_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**kwargs)


def test_boundary_configs_are_valid() -> None:
    assert SamplingConfig(temperature=0).greedy and not SamplingConfig(temperature=1e-3).greedy
    SamplingConfig(top_p=1.0)
    SamplingConfig(top_k=1)


# --- sample_from ----------------------------------------------------------------------------------

N = 200_000
WEIGHTS = [
    [0.0, 1.0, 2.0, 3.0, 0.0, 4.0],  # unnormalised, zeros inside
    [5.0, 0.0, 0.0, 0.0, 0.0, 1e-2],  # one small but positive weight
    [0.25, 0.25, 0.25, 0.25, 0.0, 0.0],  # already normalised
]


SAMPLERS = [sample_from, sample_inverse_cdf]


def _check_frequencies(weights: torch.Tensor, seed: int, sampler=sample_from) -> None:
    """``weights [rows, V]``: N draws per row (N copies in a leading batch dim) vs ``w / sum(w)``."""
    rows, vocab = weights.shape
    draws = sampler(weights.expand(N, rows, vocab), torch.Generator().manual_seed(seed))
    assert draws.shape == (N, rows) and draws.dtype == torch.long
    for r in range(rows):
        exact_w = [Fraction(w) for w in weights[r].tolist()]
        law = {(i,): w / sum(exact_w) for i, w in enumerate(exact_w)}
        counts = {(i,): c for i, c in enumerate(torch.bincount(draws[:, r], minlength=vocab).tolist())}
        assert frequency_mismatches(counts, law, N) == [], (r, weights[r])


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sample_from_matches_normalised_weights(sampler) -> None:
    _check_frequencies(torch.tensor(WEIGHTS), seed=0, sampler=sampler)


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("scale", [1e-30, 1e-6, 1e6, 1e30])
def test_sample_from_ignores_the_scale_of_the_weights(scale: float, sampler) -> None:
    _check_frequencies(torch.tensor(WEIGHTS) * scale, seed=1, sampler=sampler)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sample_from_never_picks_subnormal_rounded_zero_weights(sampler) -> None:
    """A row whose only positive weight is subnormal must still pick it (w / E must not underflow)."""
    s = torch.nextafter(torch.tensor(0.0), torch.tensor(1.0)).item()
    weights = torch.tensor([[0.0, 0.0, s], [0.0, 4 * s, 0.0], [1e-39, 0.0, 0.0]])
    draws = sampler(weights.expand(20_000, -1, -1), torch.Generator().manual_seed(2))
    assert draws[:, 0].unique().tolist() == [2] and draws[:, 1].unique().tolist() == [1]
    assert draws[:, 2].unique().tolist() == [0]


def test_inverse_cdf_maps_a_uniform_at_the_total_to_the_last_positive_weight(monkeypatch) -> None:
    """u * total can round up to the total: the draw must then be the last index of positive weight, never a
    trailing zero-weight index (nor an index past the vocabulary)."""
    monkeypatch.setattr(sampling.torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw["dtype"]))
    weights = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0], [1.0, 0.0, 1.0, 0.0]])
    assert sample_inverse_cdf(weights).tolist() == [1, 3, 2]


def test_inverse_cdf_maps_a_zero_uniform_to_the_first_positive_weight(monkeypatch) -> None:
    """``torch.rand`` can return exactly 0: leading zero weights (an empty interval at 0) must be skipped."""
    monkeypatch.setattr(sampling.torch, "rand", lambda shape, **kw: torch.zeros(shape, dtype=kw["dtype"]))
    weights = torch.tensor([[0.0, 0.0, 2.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    assert sample_inverse_cdf(weights).tolist() == [2, 0]


def test_inverse_cdf_on_a_real_vocabulary_matches_the_probabilities() -> None:
    """A 49152-way row (SmolLM2's vocabulary) at temperature 0.7, drawn through the float32 softmax as the
    chat-data sampler does: the 8 likeliest tokens and the tail as one cell, against float64 probabilities."""
    logits = torch.randn(49152, generator=torch.Generator().manual_seed(4)) * 3
    p = probs(logits[None], SamplingConfig(temperature=0.7))[0]
    n, gen = 8_000, torch.Generator().manual_seed(5)
    draws = torch.cat([sample_inverse_cdf(p.expand(1000, -1), gen) for _ in range(n // 1000)])
    exact = torch.softmax(logits.double() / 0.7, -1)
    assert top_k_and_tail_mismatches(draws.tolist(), exact.tolist(), k=8) == []
