"""Exact rational reference of the linear-chain verifier, for the distribution-contract tests.

Pure Python (``fractions.Fraction``, no torch), written straight from the algorithm: draft token
``d_i ~ q_i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``; at the first rejection one
token is drawn from ``normalize(max(p_i - q_i, 0))``; after ``gamma`` acceptances a bonus token is drawn
from ``p_gamma``. Row ``i`` of ``p``/``q`` is conditioned on the committed prefix plus ``d_1..d_i``.

Usage (from a test module in ``tests/decode``)::

    from .exact_reference import committed_distribution, target_distribution
    got = committed_distribution(target, draft, draft, gamma=2, n=3)
    assert got == target_distribution(target, n=3)

``make_trees(kind, vocab, seed)`` builds the random conditional ``(target, draft)`` trees the tests
enumerate; ``frequency_mismatches`` compares Monte Carlo counts with an exact law under a stated
false-alarm rate.

A distribution is a tuple of ``Fraction`` over the vocabulary; a *tree* is a function
``prefix (tuple of token ids) -> distribution``. Rows may be unnormalised (exact images of float32
tensors): ratios use the raw values, exactly like the torch verifier, and every *sampling* step
normalises, like ``sample_from``.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

Dist = tuple[Fraction, ...]
Tree = Callable[[tuple[int, ...]], Dist]


def normalize(weights: Sequence[Fraction]) -> Dist:
    """``weights / sum(weights)``; ``ValueError`` when there is no positive mass."""
    total = sum(weights, Fraction(0))
    if total <= 0 or any(w < 0 for w in weights):
        raise ValueError(f"weights must be non-negative with positive sum, got {tuple(weights)}")
    return tuple(Fraction(w) / total for w in weights)


def acceptance(p: Dist, q: Dist, x: int) -> Fraction:
    """``min(1, p(x) / q(x))`` for a token drawn from ``q``; certain acceptance never divides."""
    if q[x] <= 0:
        raise ValueError(f"draft token {x} has q(x) = {q[x]}; it cannot have been drawn from q")
    return Fraction(1) if p[x] >= q[x] else Fraction(p[x]) / q[x]


def residual(p: Dist, q: Dist) -> Dist:
    """``normalize(max(p - q, 0))``: the target mass the accepted drafts have not paid out yet."""
    return normalize([max(pi - qi, Fraction(0)) for pi, qi in zip(p, q)])


def single_step_output(p: Dist, q: Dist, after_reject: str = "residual") -> Dist:
    """Output law of one verified position with ``x ~ q`` (the three-token worked example).

    ``after_reject="target"`` is the wrong correction "resample from p after rejection".
    """
    if after_reject not in ("residual", "target"):
        raise ValueError(f"after_reject must be 'residual' or 'target', got {after_reject!r}")
    q = normalize(q)
    out = [Fraction(0)] * len(p)
    rejected = Fraction(0)
    for x, qx in enumerate(q):
        if qx:
            a = acceptance(p, q, x)
            out[x] += qx * a
            rejected += qx * (1 - a)
    if rejected:
        fix = residual(p, q) if after_reject == "residual" else normalize(p)
        out = [o + rejected * f for o, f in zip(out, fix)]
    return tuple(out)


def chain_outcome_probs(
    p_rows: Sequence[Dist], q_rows: Sequence[Dist], draft: Sequence[int]
) -> dict[tuple[int, int], Fraction]:
    """Exact law of ``(n_accepted, next_token)`` for a *fixed* draft (what ``verify_chain`` returns).

    ``p_rows``: ``gamma + 1`` rows; ``q_rows`` and ``draft``: ``gamma`` each. Cells of probability 0
    are omitted.
    """
    gamma = len(draft)
    if len(q_rows) != gamma or len(p_rows) != gamma + 1:
        raise ValueError(f"need gamma+1 p rows and gamma q rows for gamma={gamma}, "
                         f"got {len(p_rows)} and {len(q_rows)}")
    out: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
    alive = Fraction(1)  # probability that the first i drafts were all accepted
    for i, x in enumerate(draft):
        a = acceptance(p_rows[i], q_rows[i], x)
        if a != 1:
            for y, r in enumerate(residual(p_rows[i], q_rows[i])):
                if r:
                    out[(i, y)] += alive * (1 - a) * r
        alive *= a
        if not alive:
            return dict(out)
    for y, py in enumerate(normalize(p_rows[gamma])):
        if py:
            out[(gamma, y)] += alive * py
    return dict(out)


def round_outcomes(
    target: Tree, propose: Tree, record: Tree, gamma: int, prefix: tuple[int, ...] = ()
) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the tokens one round commits after ``prefix`` (``1..gamma+1`` of them).

    Enumerates every draft path and every acceptance/residual branch. ``propose(h)`` is the law the
    drafter actually samples from at prefix ``h``; ``record(h)`` is the ``q`` handed to the verifier.
    A correct drafter has ``propose is record``; they differ only in negative controls. Drafts after
    the first rejection are never looked at, so they are marginalised out by not enumerating them.
    """
    out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)

    def walk(drafted: tuple[int, ...], mass: Fraction) -> None:
        h = prefix + drafted
        p = target(h)
        if len(drafted) == gamma:
            for y, py in enumerate(normalize(p)):
                if py:
                    out[drafted + (y,)] += mass * py
            return
        q = record(h)
        fix: Dist | None = None  # residual, computed once per node and only if a rejection can occur
        for x, sx in enumerate(normalize(propose(h))):
            if not sx:
                continue
            a = acceptance(p, q, x)
            if a:
                walk(drafted + (x,), mass * sx * a)
            if a != 1:
                fix = fix or residual(p, q)
                for y, r in enumerate(fix):
                    if r:
                        out[drafted + (y,)] += mass * sx * (1 - a) * r

    walk((), Fraction(1))
    return dict(out)


def committed_distribution(
    target: Tree, propose: Tree, record: Tree, gamma: int, n: int
) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the first ``n`` committed tokens from the empty prefix.

    Runs further rounds from each new prefix while fewer than ``n`` tokens are committed, and cuts the
    last round's tokens at ``n``.
    """
    memo: dict[tuple[int, ...], dict[tuple[int, ...], Fraction]] = {}

    def from_prefix(prefix: tuple[int, ...]) -> dict[tuple[int, ...], Fraction]:
        if prefix in memo:
            return memo[prefix]
        out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
        for tokens, pr in round_outcomes(target, propose, record, gamma, prefix).items():
            h = prefix + tokens
            if len(h) >= n:
                out[h[:n]] += pr
            else:
                for seq, pr2 in from_prefix(h).items():
                    out[seq] += pr * pr2
        memo[prefix] = dict(out)
        return memo[prefix]

    return from_prefix(())


def target_distribution(
    target: Tree, n: int, prefix: tuple[int, ...] = ()
) -> dict[tuple[int, ...], Fraction]:
    """Exact law of ``n`` tokens sampled one at a time from ``target`` (the law to preserve)."""
    if n == 0:
        return {(): Fraction(1)}
    out: dict[tuple[int, ...], Fraction] = {}
    for y, py in enumerate(normalize(target(prefix))):
        if py:
            for seq, pr in target_distribution(target, n - 1, prefix + (y,)).items():
                out[(y,) + seq] = py * pr
    return out


def mismatches(
    got: Mapping[tuple, Fraction], expected: Mapping[tuple, Fraction]
) -> list[tuple[tuple, Fraction, Fraction]]:
    """Cells where two exact laws differ, as ``(cell, got, expected)``; empty means identical."""
    cells = sorted(set(got) | set(expected))
    return [(c, got.get(c, Fraction(0)), expected.get(c, Fraction(0)))
            for c in cells if got.get(c, Fraction(0)) != expected.get(c, Fraction(0))]


def bernstein_halfwidth(prob: float, n: int, log_term: float) -> float:
    """Half-width ``t`` with ``P(|X/n - prob| >= t) <= 2 exp(-log_term)`` for ``X ~ Binomial(n, prob)``.

    Bernstein: ``P(|X/n - prob| >= t) <= 2 exp(-n t^2 / (2 s2 + 2t/3))``
    with ``s2 = prob (1 - prob)``. Setting the right side to ``2 exp(-L)`` and solving the quadratic
    ``n t^2 - (2L/3) t - 2 L s2 = 0`` gives ``t = (L/3 + sqrt(L^2/9 + 2 n L s2)) / n``.
    """
    s2 = prob * (1.0 - prob)
    return (log_term / 3.0 + math.sqrt(log_term**2 / 9.0 + 2.0 * n * log_term * s2)) / n


def frequency_mismatches(
    counts: Mapping[tuple, int], probs: Mapping[tuple, Fraction], n: int, alpha: float = 1e-6
) -> list[str]:
    """Cells whose empirical frequency is incompatible with the exact ``probs``; empty means consistent.

    A cell of probability 0 that was observed at all is a certain error (no statistics involved).
    Every cell with probability > 0 gets the Bernstein half-width at ``L = ln(2K / alpha)``, ``K`` the
    number of such cells; by the union bound a correct sampler is flagged with probability <= alpha.
    """
    positive = {c: float(pr) for c, pr in probs.items() if pr > 0}
    log_term = math.log(2 * max(len(positive), 1) / alpha)
    bad = [f"cell {c}: observed {k} times but has probability 0"
           for c, k in sorted(counts.items()) if k and c not in positive]
    for c, pr in sorted(positive.items()):
        freq = counts.get(c, 0) / n
        t = bernstein_halfwidth(pr, n, log_term)
        if abs(freq - pr) >= t:
            bad.append(f"cell {c}: frequency {freq:.6f}, exact {pr:.6f}, allowed +-{t:.6f}")
    return bad



def top_k_and_tail_mismatches(draws: Sequence[int], exact: Sequence[float], k: int) -> list[str]:
    """:func:`frequency_mismatches` of token ``draws`` against ``exact`` (float64) probabilities, with the ``k``
    likeliest tokens as cells and every other token pooled in one tail cell ``(-1,)``: a large vocabulary
    checked on the cells a sample of ``len(draws)`` can resolve."""
    top = sorted(range(len(exact)), key=exact.__getitem__, reverse=True)[:k]
    law = {(i,): Fraction(exact[i]) for i in top}
    law[(-1,)] = 1 - sum(law.values())
    seen = Counter(draws)
    counts = {(i,): seen[i] for i in top}
    counts[(-1,)] = len(draws) - sum(counts.values())
    return frequency_mismatches(counts, law, len(draws))

# --- test cases: the seed's example and random conditional trees ----------------------------------

SEED_P = (Fraction(1, 2), Fraction(3, 10), Fraction(1, 5))  # the worked example: p over (A, B, C)
SEED_Q = (Fraction(1, 5), Fraction(1, 5), Fraction(3, 5))  # and the draft's q

PAIR_KINDS = ["random", "equal", "q_misses_p", "p_misses_q", "point_p", "point_q", "point_both",
              "disjoint"]


def _random_dist(rng: random.Random, vocab: int, zero: int | None = None, force: int | None = None) -> Dist:
    """Small-denominator rational distribution; ``zero`` gets no mass, ``force`` gets some."""
    while True:
        w = [rng.randint(0, 4) for _ in range(vocab)]
        if zero is not None:
            w[zero] = 0
        if force is not None:
            w[force] = max(w[force], 1)
        if sum(w):
            return normalize([Fraction(x) for x in w])


def _point(vocab: int, x: int) -> Dist:
    return tuple(Fraction(int(i == x)) for i in range(vocab))


def _pair(rng: random.Random, vocab: int, kind: str) -> tuple[Dist, Dist]:
    """One ``(p, q)`` at a prefix; every kind is an edge case of the verifier's contract."""
    if kind == "mixed":
        kind = rng.choice(PAIR_KINDS)
    if kind == "random":  # zeros appear often: q(x)=0<p(x) and p(x)=0<q(x) both occur
        return _random_dist(rng, vocab), _random_dist(rng, vocab)
    if kind == "equal":  # alpha = 1: no rejection, the residual is never evaluated
        p = _random_dist(rng, vocab)
        return p, p
    if kind == "q_misses_p":  # token 0 is reachable only through the residual
        return _random_dist(rng, vocab, force=0), _random_dist(rng, vocab, zero=0)
    if kind == "p_misses_q":  # token 0 is drafted but can never be accepted
        return _random_dist(rng, vocab, zero=0), _random_dist(rng, vocab, force=0)
    if kind == "point_p":
        return _point(vocab, rng.randrange(vocab)), _random_dist(rng, vocab)
    if kind == "point_q":
        return _random_dist(rng, vocab), _point(vocab, rng.randrange(vocab))
    if kind == "point_both":  # greedy target and greedy drafter
        return _point(vocab, rng.randrange(vocab)), _point(vocab, rng.randrange(vocab))
    if kind == "disjoint":  # alpha = 0: every draft is rejected
        split = rng.randrange(1, vocab)
        p = normalize([Fraction(rng.randint(1, 3)) if i < split else Fraction(0) for i in range(vocab)])
        q = normalize([Fraction(0) if i < split else Fraction(rng.randint(1, 3)) for i in range(vocab)])
        return p, q
    raise ValueError(f"unknown kind {kind!r}")


def make_trees(kind: str, vocab: int, seed: int) -> tuple[Tree, Tree]:
    """``(target, draft)`` trees; each prefix gets its own ``(p, q)`` from a prefix-seeded RNG."""
    cache: dict[tuple[int, ...], tuple[Dist, Dist]] = {}

    def pair(h: tuple[int, ...]) -> tuple[Dist, Dist]:
        if h not in cache:
            cache[h] = _pair(random.Random(f"{kind}/{vocab}/{seed}/{h}"), vocab, kind)
        return cache[h]

    return (lambda h: pair(h)[0]), (lambda h: pair(h)[1])


def greedy_of(tree: Tree) -> Tree:
    """Point mass at the argmax of ``tree(h)``, ties to the lowest id."""
    def point(h: tuple[int, ...]) -> Dist:
        d = tree(h)
        return _point(len(d), d.index(max(d)))
    return point
