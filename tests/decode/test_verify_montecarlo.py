"""Monte Carlo check of the torch ``verify_chain`` against the exact rational reference.

N copies of one case go in the batch dimension, so one vectorised call gives N independent draws.
The exact law comes from ``exact_reference`` applied to the exact values of the float32 tensors the
verifier sees, so float rounding of the inputs is not a tolerance: only sampling noise is.

Bound (``exact_reference.frequency_mismatches``): for a cell with exact probability ``pi`` and
count ``X ~ Binomial(N, pi)``, Bernstein's inequality gives
``P(|X/N - pi| >= t) <= 2 exp(-N t^2 / (2 pi (1 - pi) + 2 t / 3))``. With ``K`` cells of positive
probability and ``L = ln(2K / alpha)``, ``t = (L/3 + sqrt(L^2/9 + 2 N L pi (1 - pi))) / N`` makes
each cell's false-alarm probability <= alpha / K, so by the union bound a correct verifier fails a
check with probability <= alpha = 1e-6 (<= 1.1e-5 over the 11 checks in this file). With
N = 200_000 and pi = 0.2 the half-width is about 0.005, so the seed's wrong correction (off by 0.08)
is caught; ``test_checker_flags_resampling_from_p`` asserts exactly that. Cells of probability 0
must never be observed (deterministic). The seeds are fixed, so the outcome is reproducible.

Run: ``python -m pytest tests/decode/test_verify_montecarlo.py -q``
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction as F

import pytest
import torch

from eaglehead.decode.sampling import sample_from
from eaglehead.decode.verify import verify_chain

from .exact_reference import (
    SEED_P,
    SEED_Q,
    Dist,
    chain_outcome_probs,
    frequency_mismatches,
    make_trees,
    normalize,
    round_outcomes,
    single_step_output,
)

N = 200_000


def _tensor(rows: list[Dist]) -> torch.Tensor:
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float32)


def _exact(t: torch.Tensor) -> list[Dist]:
    """Exact rationals of the float32 values in ``t [rows, V]`` (what the verifier really sees)."""
    return [tuple(F(v) for v in row) for row in t.tolist()]


def _run_fixed(p_rows: list[Dist], q_rows: list[Dist], draft: list[int], seed: int):
    """``N`` verifications of one fixed draft; returns the float32 rows and the ``(n_acc, next)`` counts."""
    p, q = _tensor(p_rows), _tensor(q_rows)  # [gamma+1, V], [gamma, V]
    vocab = p.shape[-1]
    n_acc, nxt = verify_chain(
        p.expand(N, -1, -1), q.expand(N, -1, -1), torch.tensor(draft).expand(N, -1),
        generator=torch.Generator().manual_seed(seed),
    )
    assert n_acc.shape == nxt.shape == (N,)
    assert int(n_acc.min()) >= 0 and int(n_acc.max()) <= len(draft)
    assert int(nxt.min()) >= 0 and int(nxt.max()) < vocab
    flat = torch.bincount(n_acc * vocab + nxt, minlength=(len(draft) + 1) * vocab).tolist()
    counts = {(k // vocab, k % vocab): c for k, c in enumerate(flat)}
    return p, q, counts


def _rand_dist(rng: random.Random, vocab: int, zero: tuple[int, ...] = ()) -> Dist:
    w = [0 if i in zero else rng.randint(1, 9) for i in range(vocab)]
    return tuple(F(x, sum(w)) for x in w)


def _case(name: str) -> tuple[list[Dist], list[Dist], list[int]]:
    """``(p rows, q rows, draft)`` for one fixed-draft case."""
    rng = random.Random(name)
    if name == "seed_example":  # draft C: accepted w.p. 1/3, else residual (0.75, 0.25, 0)
        return [SEED_P, (F(1, 10), F(6, 10), F(3, 10))], [SEED_Q], [2]
    if name == "random_gamma3":
        p = [_rand_dist(rng, 5) for _ in range(4)]
        q = [_rand_dist(rng, 5) for _ in range(3)]
        return p, q, [rng.randrange(5) for _ in range(3)]
    if name == "residual_only_token":  # q(3) = 0 < p(3): token 3 only comes from the residual
        p = [_rand_dist(rng, 4) for _ in range(3)]
        q = [_rand_dist(rng, 4, zero=(3,)) for _ in range(2)]
        draft = [max(range(3), key=lambda x: q[i][x] - p[i][x]) for i in range(2)]  # likely rejected
        return p, q, draft
    if name == "target_zero_at_draft":  # p(d_2) = 0 < q(d_2): the chain never gets past row 1
        p = [_rand_dist(rng, 4), _rand_dist(rng, 4, zero=(1,)), _rand_dist(rng, 4)]
        q = [_rand_dist(rng, 4), _rand_dist(rng, 4)]
        return p, q, [0, 1]
    raise ValueError(name)


@pytest.mark.parametrize("name", ["seed_example", "random_gamma3", "residual_only_token",
                                  "target_zero_at_draft"])
def test_fixed_draft_joint_law_matches_exact(name: str) -> None:
    p_rows, q_rows, draft = _case(name)
    p, q, counts = _run_fixed(p_rows, q_rows, draft, seed=len(name))
    exact = chain_outcome_probs(_exact(p), _exact(q), draft)
    assert frequency_mismatches(counts, exact, N) == []
    if name == "residual_only_token":
        reach = sum(pr for (k, y), pr in exact.items() if y == 3 and k < len(draft))
        assert reach > F(1, 20) and sum(c for (k, y), c in counts.items() if y == 3 and k < len(draft)) > 0
    if name == "target_zero_at_draft":
        assert all(k <= 1 for (k, _), c in counts.items() if c)


def test_p_equal_q_accepts_every_draft() -> None:
    """alpha = 1: never a rejection (and nothing divided by q), bonus token from p_gamma."""
    rng = random.Random(5)
    rows = [_rand_dist(rng, 4, zero=(i % 4,)) for i in range(4)]
    p_rows, q_rows = rows, rows[:3]
    draft = [max(range(4), key=lambda x: rows[i][x]) for i in range(3)]
    p, q, counts = _run_fixed(p_rows, q_rows, draft, seed=3)
    assert all(k == 3 for (k, _), c in counts.items() if c)
    assert frequency_mismatches(counts, chain_outcome_probs(_exact(p), _exact(q), draft), N) == []


def _prefix_tables(tree, vocab: int, depth: int) -> list[torch.Tensor]:
    """``tables[i][j]`` = ``tree(prefix)`` for the length-``i`` prefix with base-``vocab`` index ``j``."""
    return [_tensor([tree(h) for h in itertools.product(range(vocab), repeat=i)]) for i in range(depth)]


@pytest.mark.parametrize("kind,vocab,gamma", [("random", 3, 2), ("mixed", 3, 2), ("q_misses_p", 4, 2),
                                              ("mixed", 3, 3)])
def test_drafted_round_matches_exact(kind: str, vocab: int, gamma: int) -> None:
    """End to end: drafts drawn with ``sample_from`` from conditional q, then ``verify_chain``.

    Cells are the committed token sequences of one round (lengths 1..gamma+1).
    """
    target, draft_tree = make_trees(kind, vocab, seed=1)
    p_tab = _prefix_tables(target, vocab, gamma + 1)  # p_tab[i]: [vocab^i, vocab]
    q_tab = _prefix_tables(draft_tree, vocab, gamma)
    gen = torch.Generator().manual_seed(gamma * 10 + vocab)

    idx = torch.zeros(N, dtype=torch.long)  # base-vocab index of the drafted prefix so far
    prefix_idx, drafts, q_rows = [idx], [], []
    for i in range(gamma):
        q_i = q_tab[i][idx]  # [N, vocab]
        d = sample_from(q_i, gen)
        idx = idx * vocab + d
        prefix_idx.append(idx)
        drafts.append(d)
        q_rows.append(q_i)
    p = torch.stack([p_tab[i][prefix_idx[i]] for i in range(gamma + 1)], dim=1)  # [N, gamma+1, vocab]
    n_acc, nxt = verify_chain(p, torch.stack(q_rows, 1), torch.stack(drafts, 1), generator=gen)

    # Committed draft[:A] + [y] -> one code: offset of its length, then its base-vocab index.
    offsets = [sum(vocab ** (j + 1) for j in range(k)) for k in range(gamma + 2)]
    kept = torch.stack(prefix_idx, 1).gather(1, n_acc[:, None]).squeeze(1)
    code = torch.tensor(offsets[:-1])[n_acc] + kept * vocab + nxt
    flat = torch.bincount(code, minlength=offsets[-1]).tolist()
    seqs = [s for k in range(1, gamma + 2) for s in itertools.product(range(vocab), repeat=k)]
    counts = dict(zip(seqs, flat))

    def exact_of(tab: list[torch.Tensor]):
        """Tree over the exact float32 values: row = base-vocab index of the prefix."""
        def row(h: tuple[int, ...]) -> Dist:
            j = sum(x * vocab ** (len(h) - 1 - i) for i, x in enumerate(h))
            return _exact(tab[len(h)][j][None])[0]
        return row

    exact = round_outcomes(exact_of(p_tab), exact_of(q_tab), exact_of(q_tab), gamma)
    assert frequency_mismatches(counts, exact, N) == []


def test_checker_flags_resampling_from_p() -> None:
    """Power: at this N the same check rejects the seed's wrong correction (0.4, 0.32, 0.28)."""
    q = _tensor([SEED_Q]).expand(N, -1)
    gen = torch.Generator().manual_seed(0)
    d = sample_from(q, gen)
    p = _tensor([SEED_P, SEED_P]).expand(N, -1, -1)
    n_acc, nxt = verify_chain(p, q[:, None], d[:, None], generator=gen)
    first = torch.where(n_acc == 1, d, nxt)
    counts = {(y,): c for y, c in enumerate(torch.bincount(first, minlength=3).tolist())}
    p_exact, q_exact = _exact(_tensor([SEED_P, SEED_Q]))
    right = dict(((y,), pr) for y, pr in enumerate(single_step_output(p_exact, q_exact)))
    wrong = dict(((y,), pr) for y, pr in enumerate(single_step_output(p_exact, q_exact, "target")))
    assert frequency_mismatches(counts, right, N) == []
    assert frequency_mismatches(counts, wrong, N) != []


# --- float rounding edges -------------------------------------------------------------------------

def _softmax_rows(seed: int, rows: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(rows, vocab, generator=g)
    logits[:, 0] = float("-inf")  # an exact zero of p in every row
    return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("nudge", ["up", "down", "mixed"])
def test_one_ulp_apart_stays_finite_and_in_support(nudge: str) -> None:
    """q = p up to one ulp per entry: no NaN, no out-of-range id, never a token with p = 0."""
    gamma, vocab, n = 3, 8, 50_000
    p = _softmax_rows(1, gamma + 1, vocab)  # [gamma+1, vocab]
    up, down = torch.nextafter(p, torch.ones_like(p)), torch.nextafter(p, torch.zeros_like(p))
    if nudge == "up":  # zeros of p become the smallest subnormal in q
        q = up[:gamma]
    elif nudge == "down":  # p(x) > q(x) wherever q(x) > 0: acceptance is certain
        q = down[:gamma]
    else:
        coin = torch.rand(gamma, vocab, generator=torch.Generator().manual_seed(2)) < 0.5
        q = torch.where(coin, up[:gamma], down[:gamma])
    gen = torch.Generator().manual_seed(3)
    qb = q.expand(n, -1, -1)
    d = sample_from(qb, gen)  # [n, gamma]
    n_acc, nxt = verify_chain(p.expand(n, -1, -1), qb, d, generator=gen)
    assert int(nxt.min()) >= 0 and int(nxt.max()) < vocab
    assert bool((p[n_acc, nxt] > 0).all())
    if nudge == "down":
        assert bool((n_acc == gamma).all())
    else:  # rejection needs u within ~1e-7 of 1: essentially every chain is fully accepted
        assert float((n_acc == gamma).float().mean()) > 0.999


def test_subnormal_draft_mass_with_zero_target_is_rejected_and_falls_back() -> None:
    """p(x) = 0, q(x) = smallest subnormal, q = p elsewhere: certain rejection, empty residual.

    In exact arithmetic the renormalised residual is proportional to p, so the fallback to p is the
    right law; the verifier must not divide by the zero residual mass.
    """
    p0 = _softmax_rows(4, 2, 6)  # p0[:, 0] == 0
    q0 = p0[:1].clone()
    q0[0, 0] = torch.nextafter(torch.tensor(0.0), torch.tensor(1.0))
    _, _, counts = _run_fixed(_exact(p0), _exact(q0), [0], seed=9)
    assert sum(c for (k, _), c in counts.items() if k != 0) == 0
    fallback = {(0, y): pr for y, pr in enumerate(normalize(_exact(p0[:1])[0]))}
    assert frequency_mismatches(counts, fallback, N) == []


def test_residual_with_only_subnormal_mass_stays_in_support() -> None:
    """Residual max(p - q, 0) is a single subnormal: the next token must be that one, never p = 0.

    p = (0, 0, 1, 2s), q = (0, s, 1, s) with s the smallest subnormal; draft 1 has p = 0, so it is
    always rejected and the residual is the point mass at token 3. Token 0 has p = 0 and must never
    be emitted.
    """
    s = torch.nextafter(torch.tensor(0.0), torch.tensor(1.0)).item()
    n = 50_000
    p = torch.tensor([[0.0, 0.0, 1.0, 2 * s], [0.0, 0.0, 1.0, 0.0]]).expand(n, -1, -1)
    q = torch.tensor([[0.0, s, 1.0, s]]).expand(n, -1, -1)
    n_acc, nxt = verify_chain(p, q, torch.ones(n, 1, dtype=torch.long), torch.Generator().manual_seed(0))
    assert bool((n_acc == 0).all())
    assert bool((p[0, 0, nxt] > 0).all()), torch.bincount(nxt, minlength=4).tolist()


def test_half_precision_inputs_match_their_float32_values() -> None:
    """bf16/fp16 p and q are verified as the float32 numbers they represent (same draws)."""
    p = _softmax_rows(6, 3, 5)
    q = _softmax_rows(7, 2, 5)
    d = torch.tensor([[1, 2]]).expand(4096, -1)
    for dtype in (torch.bfloat16, torch.float16):
        ph, qh = p.to(dtype).expand(4096, -1, -1), q.to(dtype).expand(4096, -1, -1)
        a = verify_chain(ph, qh, d, torch.Generator().manual_seed(1))
        b = verify_chain(ph.float(), qh.float(), d, torch.Generator().manual_seed(1))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_same_generator_seed_reproduces_draws() -> None:
    p = _softmax_rows(8, 4, 7).expand(1000, -1, -1)
    q = _softmax_rows(9, 3, 7).expand(1000, -1, -1)
    d = sample_from(q, torch.Generator().manual_seed(0))
    a = verify_chain(p, q, d, torch.Generator().manual_seed(42))
    b = verify_chain(p, q, d, torch.Generator().manual_seed(42))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert len(set(a[0].tolist())) > 1  # the draws are random, not constant
