"""Exact rational reference of tree verification, for the tree distribution-contract tests.

Pure Python (``fractions.Fraction``, no torch), written straight from the rule in
:mod:`eaglehead.decode.tree`'s docstring, not from its vectorised code: at a node with target
distribution ``p`` try the children in order, accept ``c_j`` with probability ``r_j(c_j)`` (``r_1 = p``,
``r_{j+1} = normalize(r_j with c_j zeroed)``), descend on acceptance, and emit one token from the last
``r`` when every child is rejected (from ``p`` at a leaf).

A *shape* is a nested tuple: a node's shape is the tuple of its children's shapes (``()`` is a leaf), the
root's shape describes the whole tree. A *drafted tree* is a tuple of ``(token, subtree)`` pairs.
``tree_of(h)`` maps a committed prefix to the drafted tree of the next round. Trees of ``prefix -> dist``
(``Tree``) are those of :mod:`tests.decode.exact_reference`.

Usage::

    tree_of = topk_tree_of(draft, shape)               # children = the draft's top tokens, as EAGLE-2
    got = tree_committed_distribution(target, tree_of, n=4)
    assert got == target_distribution(target, n=4)
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction

from .exact_reference import Dist, Tree, normalize

Shape = tuple  # tuple[Shape, ...]
Drafted = tuple  # tuple[tuple[int, Drafted], ...]
TreeOf = Callable[[tuple[int, ...]], Drafted]


# --- shapes ---------------------------------------------------------------------------------------

def shapes(depth: int, width: int) -> list[Shape]:
    """Every ordered shape of depth <= ``depth`` whose nodes have 0..``width`` children."""
    if depth == 0:
        return [()]
    below = shapes(depth - 1, width)
    return [kids for m in range(width + 1) for kids in itertools.product(below, repeat=m)]


def shape_depth(shape: Shape) -> int:
    return 1 + max(map(shape_depth, shape)) if shape else 0


def shape_width(shape: Shape) -> int:
    return max([len(shape)] + [shape_width(s) for s in shape])


def level_shape(widths: tuple[int, ...]) -> Shape:
    """Every node at level ``l`` has ``widths[l]`` children (a full tree of per-level widths)."""
    return tuple(level_shape(widths[1:]) for _ in range(widths[0])) if widths else ()


def random_shape(rng: random.Random, depth: int, width: int) -> Shape:
    """A random shape of depth exactly ``depth`` (the first child carries the deep path)."""
    if depth == 0:
        return ()
    kids = [random_shape(rng, depth - 1, width)]
    kids += [random_shape(rng, rng.randrange(depth), width) for _ in range(rng.randrange(width))]
    rng.shuffle(kids)
    return tuple(kids)


def count_nodes(shape: Shape) -> int:
    return sum(1 + count_nodes(s) for s in shape)


# --- drafting: a prefix -> a drafted tree ---------------------------------------------------------

def top_tokens(dist: Dist, m: int) -> list[int]:
    """The ``m`` likeliest tokens of ``dist``, ties towards the lowest id (as a stable sort)."""
    return sorted(range(len(dist)), key=lambda x: (-dist[x], x))[:m]


def topk_tree_of(draft: Tree, shape: Shape) -> TreeOf:
    """Each node's children are the draft's top tokens after that node's path (deterministic, as EAGLE-2)."""
    def build(h: tuple[int, ...], sh: Shape) -> Drafted:
        toks = top_tokens(draft(h), len(sh))
        return tuple((x, build(h + (x,), s)) for x, s in zip(toks, sh))
    return lambda h: build(h, shape)


def random_tree_of(vocab: int, shape: Shape, seed: int, repeats: bool = False) -> TreeOf:
    """Children drawn from a prefix-seeded RNG (distinct unless ``repeats``): any deterministic drafter."""
    def build(h: tuple[int, ...], sh: Shape) -> Drafted:
        rng = random.Random(f"{seed}/{h}")
        toks = [rng.randrange(vocab) for _ in sh] if repeats else rng.sample(range(vocab), len(sh))
        return tuple((x, build(h + (x,), s)) for x, s in zip(toks, sh))
    return lambda h: build(h, shape)


def flatten(tree: Drafted) -> tuple[list[int], list[int], list[int]]:
    """``(tokens, parents, depths)`` in breadth-first order (parents precede children), as the torch layout."""
    tokens, parents, depths = [], [], []
    level = [(-1, tree)]
    depth = 1
    while level:
        nxt = []
        for parent, kids in level:
            for tok, sub in kids:
                tokens.append(tok)
                parents.append(parent)
                depths.append(depth)
                nxt.append((len(tokens) - 1, sub))
        level, depth = nxt, depth + 1
    return tokens, parents, depths


# --- the rule, exactly ----------------------------------------------------------------------------

def node_outcomes(p: Dist, children: list[int]) -> tuple[list[Fraction], Dist | None]:
    """Law at one node: ``(P(accept child j) for each j, residual distribution or None)``.

    ``P(no child accepted)`` is ``1 - sum``; the residual is ``None`` when that is 0.
    """
    r = normalize(p)
    alive, accept = Fraction(1), []
    for c in children:
        a = r[c]
        accept.append(alive * a)
        alive *= 1 - a
        if not alive:
            return accept + [Fraction(0)] * (len(children) - len(accept)), None
        r = normalize([0 if x == c else w for x, w in enumerate(r)])
    return accept, r


def tree_round_outcomes(target: Tree, tree: Drafted, prefix: tuple[int, ...] = ()) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the tokens one tree round commits after ``prefix`` (accepted path + one token)."""
    out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)

    def walk(path: tuple[int, ...], node: Drafted, mass: Fraction) -> None:
        accept, rest = node_outcomes(target(prefix + path), [c for c, _ in node])
        for (c, sub), a in zip(node, accept):
            if a:
                walk(path + (c,), sub, mass * a)
        if rest is not None:
            for y, r in enumerate(rest):
                if r:
                    out[path + (y,)] += mass * (1 - sum(accept)) * r

    walk((), tree, Fraction(1))
    return dict(out)


def chain_rule_round_outcomes(target: Tree, draft: Tree, tree: Drafted,
                              prefix: tuple[int, ...] = ()) -> dict[tuple[int, ...], Fraction]:
    """Negative control: the chain's ``min(1, r/q)`` with the draft's own ``q`` on deterministic children.

    Children are tried in order with ``r = p``; a rejection replaces ``r`` by ``normalize(max(r - q, 0))``
    (the rule that is exact only when the children are *sampled* from ``q``). Biased here.
    """
    out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)

    def walk(path: tuple[int, ...], node: Drafted, mass: Fraction) -> None:
        h = prefix + path
        r, q = normalize(target(h)), normalize(draft(h))
        for c, sub in node:
            a = Fraction(1) if r[c] >= q[c] else r[c] / q[c]
            if a:
                walk(path + (c,), sub, mass * a)
            mass *= 1 - a
            if not mass:
                return
            r = normalize([max(ri - qi, Fraction(0)) for ri, qi in zip(r, q)])
        for y, ry in enumerate(r):
            if ry:
                out[path + (y,)] += mass * ry

    walk((), tree, Fraction(1))
    return dict(out)


def tree_committed_distribution(target: Tree, tree_of: TreeOf, n: int, eos: int | None = None,
                                round_law: Callable | None = None) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the first ``n`` committed tokens from the empty prefix, over as many rounds as needed.

    With ``eos`` a committed EOS ends the sequence (nothing after it is committed); sequences are cut at
    ``n`` tokens (the length budget). ``round_law(target, tree, prefix)`` defaults to the rule.
    """
    round_law = round_law or tree_round_outcomes
    memo: dict[tuple[int, ...], dict[tuple[int, ...], Fraction]] = {}

    def cut(h: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
        h = h[:n]  # the budget first: an EOS beyond it is never committed
        if eos is not None and eos in h:
            return h[: h.index(eos) + 1], True
        return h, len(h) == n

    def from_prefix(prefix: tuple[int, ...]) -> dict[tuple[int, ...], Fraction]:
        if prefix not in memo:
            out: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
            for toks, pr in round_law(target, tree_of(prefix), prefix).items():
                h, finished = cut(prefix + toks)
                if finished:
                    out[h] += pr
                else:
                    for seq, pr2 in from_prefix(h).items():
                        out[seq] += pr * pr2
            memo[prefix] = dict(out)
        return memo[prefix]

    return from_prefix(())


def target_distribution_eos(target: Tree, n: int, eos: int | None, prefix: tuple[int, ...] = ()):
    """Exact law of sampling the target one token at a time until ``eos`` (included) or ``n`` tokens."""
    if n == 0:
        return {(): Fraction(1)}
    out: dict[tuple[int, ...], Fraction] = {}
    for y, py in enumerate(normalize(target(prefix))):
        if not py:
            continue
        rest = {(): Fraction(1)} if y == eos else target_distribution_eos(target, n - 1, eos, prefix + (y,))
        for seq, pr in rest.items():
            out[(y,) + seq] = py * pr
    return out


def verdict_law(p_rows: list[Dist], tokens: list[int], parents: list[int]) -> dict[tuple[int, int], Fraction]:
    """Exact law of ``(last reached p-row, emitted token)`` for one flat tree (what ``verify_tree`` returns).

    ``p_rows[0]`` is the root's row, ``p_rows[i + 1]`` node ``i``'s. The reached row identifies the path.
    """
    out: dict[tuple[int, int], Fraction] = defaultdict(Fraction)

    def walk(row: int, mass: Fraction) -> None:
        kids = [i for i, par in enumerate(parents) if par + 1 == row]
        accept, rest = node_outcomes(p_rows[row], [tokens[i] for i in kids])
        for i, a in zip(kids, accept):
            if a:
                walk(i + 1, mass * a)
        if rest is not None:
            for y, r in enumerate(rest):
                if r:
                    out[(row, y)] += mass * (1 - sum(accept)) * r

    walk(0, Fraction(1))
    return dict(out)
