"""Exact distribution contract of tree verification (``decode/tree.py``), and the tree layout helpers.

Part 1 checks the rule itself with exact rationals (``tree_reference``): the law of the first ``n``
committed tokens (over as many tree rounds as needed, the same tree shape every round, children chosen
by a deterministic drafter from the prefix) equals the target's ``n``-step law, ``n = depth + 1``.
Shapes covered (vocab 3 and 4, target trees of every edge-case kind of ``exact_reference``):
* every shape of depth <= 2 with 0..3 children per node (85),
* every shape of depth <= 3 with 0..2 children per node (183),
* depth 3 with width 3: every per-level-width profile (64 full trees, ``(w1, w2, w3)`` in 0..3),
  every shape whose root has one child (85) and 150 seeded random shapes of depth exactly 3,
so every (depth, width) combination up to 3 x 3 is covered, exhaustively up to 2 x 3 and 3 x 2.
EOS inside the tree and the length budget are checked against the target's law with EOS; the negative
control (deterministic top-k children verified with the chain's ``min(1, p/q)``) must be flagged.
Part 2 checks that the torch ``verify_tree`` is that rule where its output is deterministic (greedy
point masses, ties) and the layout helpers (ancestor mask, node selection, validation).

Run: ``python -m pytest tests/decode/test_tree_verify_exact.py -q``
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from eaglehead.decode.sampling import SamplingConfig, probs
from eaglehead.decode.tree import DraftTree, ancestor_mask, check_tree, select_nodes, verify_tree

from .exact_reference import PAIR_KINDS, SEED_P, SEED_Q, make_trees, mismatches, target_distribution
from .tree_reference import (chain_rule_round_outcomes, flatten, level_shape, random_shape, random_tree_of,
                             shape_depth, shape_width, shapes, target_distribution_eos, top_tokens,
                             topk_tree_of, tree_committed_distribution, tree_round_outcomes)

DEPTH2 = shapes(2, 3)
DEPTH3_NARROW = shapes(3, 2)
LEVELS = [level_shape(w) for w in itertools.product(range(4), repeat=3)]
ONE_CHILD = [(s,) for s in shapes(2, 3)]
RANDOM3 = [random_shape(random.Random(i), 3, 3) for i in range(150)]


def check(target, tree_of, n: int) -> list:
    return mismatches(tree_committed_distribution(target, tree_of, n), target_distribution(target, n))


def test_shape_families_cover_every_depth_width_pair() -> None:
    assert len(DEPTH2) == 85 and len(DEPTH3_NARROW) == 183
    covered = {(shape_depth(s), shape_width(s)) for s in DEPTH2 + DEPTH3_NARROW + LEVELS + ONE_CHILD + RANDOM3}
    assert covered == {(0, 0)} | {(d, w) for d in (1, 2, 3) for w in (1, 2, 3)}


@pytest.mark.parametrize("family", ["depth2", "depth3_narrow", "levels", "one_child", "random3"])
@pytest.mark.parametrize("vocab", [3, 4])
def test_committed_tokens_follow_target_exactly(family: str, vocab: int) -> None:
    """Top-k children of a draft tree (EAGLE-2 style), ``mixed`` targets: every prefix its own edge case."""
    family_shapes = {"depth2": DEPTH2, "depth3_narrow": DEPTH3_NARROW, "levels": LEVELS,
                     "one_child": ONE_CHILD, "random3": RANDOM3}[family]
    for i, shape in enumerate(family_shapes):
        target, draft = make_trees("mixed", vocab, seed=1000 * vocab + i)
        n = shape_depth(shape) + 1
        assert check(target, topk_tree_of(draft, shape), n) == [], (family, vocab, i, shape)


@pytest.mark.parametrize("kind", PAIR_KINDS)
def test_every_edge_case_kind_on_wide_trees(kind: str) -> None:
    """Each kind of (p, q) pair at every prefix: zeros of p at children, point masses, disjoint supports."""
    for i, widths in enumerate([(3, 2, 1), (1, 3, 3), (2, 2, 2), (3, 3, 0), (3, 1, 3)]):
        target, draft = make_trees(kind, 4, seed=i)
        assert check(target, topk_tree_of(draft, level_shape(widths)), 4) == [], (kind, widths)


def test_children_covering_the_support_and_repeated_siblings() -> None:
    """Vocab 3 with 3 children: the last child is accepted with certainty when reached; a repeated sibling
    token is never accepted twice (its mass was already zeroed)."""
    for seed in range(40):
        target, _ = make_trees("random", 3, seed)
        shape = level_shape((3, 2, 3))
        assert check(target, random_tree_of(3, shape, seed), 4) == [], seed
        assert check(target, random_tree_of(3, shape, seed, repeats=True), 4) == [], seed


@pytest.mark.parametrize("eos", [0, 2])
def test_eos_inside_the_tree_and_length_budget(eos: int) -> None:
    """A committed EOS ends the sequence, also mid-path; sequences are cut at n. The law equals sampling
    the target until EOS or n tokens, for every budget n from 1 to beyond the tree depth."""
    for seed in range(12):
        target, draft = make_trees("random", 4, seed)
        tree_of = topk_tree_of(draft, level_shape((2, 2, 2)))
        for n in (1, 2, 3, 5):
            got = tree_committed_distribution(target, tree_of, n, eos=eos)
            assert mismatches(got, target_distribution_eos(target, n, eos)) == [], (seed, n)
            assert all(len(s) <= n and (eos not in s[:-1]) for s in got)


def test_one_round_first_token_is_the_target_marginal() -> None:
    target, draft = make_trees("random", 4, seed=5)
    for shape in (level_shape((3,)), level_shape((2, 3)), level_shape((3, 3, 3))):
        first = [0] * 4
        for toks, pr in tree_round_outcomes(target, topk_tree_of(draft, shape)(())).items():
            assert 1 <= len(toks) <= shape_depth(shape) + 1
            first[toks[0]] += pr
        assert tuple(first) == target(())


# --- negative control -----------------------------------------------------------------------------

def _chain_rule(draft):
    return lambda target, tree, prefix: chain_rule_round_outcomes(target, draft, tree, prefix)


def test_negative_control_chain_rule_on_top_k_children_is_flagged() -> None:
    """The seed's p, q: the single child is argmax q = C, accepted w.p. min(1, 0.2 / 0.6) = 1/3 instead of 0.2."""
    target, draft = (lambda h: SEED_P), (lambda h: SEED_Q)
    tree_of = topk_tree_of(draft, level_shape((1,)))
    wrong = tree_committed_distribution(target, tree_of, 1, round_law=_chain_rule(draft))
    assert wrong[(2,)] != SEED_P[2] and mismatches(wrong, target_distribution(target, 1)) != []
    assert check(target, tree_of, 1) == []


@pytest.mark.parametrize("family", ["depth2", "levels"])
def test_negative_control_flagged_on_random_trees(family: str) -> None:
    family_shapes = {"depth2": DEPTH2, "levels": LEVELS}[family]
    flagged = 0
    for i, shape in enumerate(family_shapes):
        if not shape:
            continue  # no children: nothing to verify, both rules sample p
        target, draft = make_trees("random", 4, seed=i)
        n = shape_depth(shape) + 1
        got = tree_committed_distribution(target, topk_tree_of(draft, shape), n, round_law=_chain_rule(draft))
        flagged += mismatches(got, target_distribution(target, n)) != []
        assert check(target, topk_tree_of(draft, shape), n) == []
    assert flagged == sum(1 for s in family_shapes if s)  # biased on every tree that has a child


# --- torch verify_tree: deterministic structure ----------------------------------------------------

def _tensor_tree(drafted_rows: list, depth: int) -> DraftTree:
    flat = [flatten(t) for t in drafted_rows]
    return DraftTree(*(torch.tensor([f[k] for f in flat]) for k in range(3)), depth)


def _greedy_walk(argmax_of, tree) -> tuple[list[int], int]:
    """Longest path following the target's argmax, then the argmax after it."""
    path = []
    while True:
        y = argmax_of(tuple(path))
        nxt = [sub for tok, sub in tree if tok == y]
        if not nxt:
            return path, y
        path.append(y)
        tree = nxt[0]


@pytest.mark.parametrize("widths", [(1,), (3,), (2, 2), (1, 1, 1, 1), (3, 2, 2), (2, 3, 1, 2)])
def test_greedy_point_masses_follow_the_argmax_path(widths) -> None:
    """One-hot p (greedy): accept while a child is the target argmax, then emit that argmax."""
    vocab, bsz = 5, 48
    shape = level_shape(widths)
    seen = set()
    for trial in range(3):
        rows = [random_tree_of(vocab, shape, seed=100 * trial + b)(()) for b in range(bsz)]
        tree = _tensor_tree(rows, len(widths))
        check_tree(tree)
        g = torch.Generator().manual_seed(trial)
        # Target argmax per tree row: the tree's own token with prob 0.7, so deep paths occur.
        argmax = torch.randint(vocab, (bsz, tree.n_nodes + 1), generator=g)
        children = [[i for i, par in enumerate(tree.parents[b].tolist()) if par + 1 == r]
                    for b in range(bsz) for r in range(tree.n_nodes + 1)]
        for b in range(bsz):
            for r in range(tree.n_nodes + 1):
                kids = children[b * (tree.n_nodes + 1) + r]
                if kids and float(torch.rand(1, generator=g)) < 0.7:
                    argmax[b, r] = tree.tokens[b, kids[int(torch.randint(len(kids), (1,), generator=g))]]
        p = torch.nn.functional.one_hot(argmax, vocab).float()
        v = verify_tree(p, tree, torch.Generator().manual_seed(7))
        for b in range(bsz):
            row_of = {(): 0}
            for i, (par, tok) in enumerate(zip(tree.parents[b].tolist(), tree.tokens[b].tolist())):
                parent_path = next(k for k, r in row_of.items() if r == par + 1)
                row_of[parent_path + (tok,)] = i + 1
            path, y = _greedy_walk(lambda h, b=b, row_of=row_of, am=argmax: int(am[b, row_of[h]]), rows[b])
            a = int(v.accepted[b])
            assert a == len(path) and v.path_tokens[b, :a].tolist() == path and int(v.next_token[b]) == y
            assert v.path[b, a:].tolist() == [-1] * (len(widths) - a)
            seen.add(a)
    assert seen == set(range(len(widths) + 1))  # first, middle and no rejection, and full depth


def test_greedy_from_tied_logits_breaks_ties_to_lowest_id() -> None:
    """Greedy ``probs`` with many ties: the accepted child and emitted token are the lowest-id argmax."""
    gen = torch.Generator().manual_seed(3)
    vocab, bsz = 4, 64
    rows = [random_tree_of(vocab, level_shape((3, 2)), seed=b)(()) for b in range(bsz)]
    tree = _tensor_tree(rows, 2)
    logits = torch.randint(0, 2, (bsz, tree.n_nodes + 1, vocab), generator=gen).float()
    v = verify_tree(probs(logits, SamplingConfig(temperature=0)), tree, gen)
    lowest = [[r.index(max(r)) for r in seq] for seq in logits.tolist()]
    for b in range(bsz):
        row_of = {(): 0}
        for i, (tok, par) in enumerate(zip(tree.tokens[b].tolist(), tree.parents[b].tolist())):
            parent_path = next(k for k, r in row_of.items() if r == par + 1)
            row_of[parent_path + (tok,)] = i + 1
        path, y = _greedy_walk(lambda h, b=b, row_of=row_of: lowest[b][row_of[h]], rows[b])
        assert v.path_tokens[b, : int(v.accepted[b])].tolist() == path and int(v.next_token[b]) == y


def test_empty_tree_samples_the_root_row() -> None:
    p = torch.nn.functional.one_hot(torch.tensor([[2], [0], [1]]), 3).float()  # [3, 1, 3]
    v = verify_tree(p, DraftTree.empty(3))
    assert v.accepted.tolist() == [0, 0, 0] and v.next_token.tolist() == [2, 0, 1] and v.path.shape == (3, 0)


# --- layout helpers --------------------------------------------------------------------------------

def test_ancestor_mask_matches_parent_walk() -> None:
    for seed in range(8):
        shape = random_shape(random.Random(seed), 4, 3)
        rows = [random_tree_of(6, shape, seed=seed + b)(()) for b in range(2)]  # same structure, B = 2
        tree = _tensor_tree(rows, 4)
        anc = ancestor_mask(tree.parents, 4)  # [2, N+1, N+1]
        assert anc.shape == (2, tree.n_nodes + 1, tree.n_nodes + 1)
        for i in range(tree.n_nodes + 1):
            expect, j = {i, 0}, i
            while j > 0:
                j = int(tree.parents[0, j - 1]) + 1
                expect.add(j)
            for b in range(2):
                assert set(torch.nonzero(anc[b, i]).flatten().tolist()) == expect


def test_select_nodes_keeps_ancestors_and_breaks_ties_by_candidate_order() -> None:
    # Candidates: 2 root children, then 4 grandchildren; ties everywhere (scores 0 and -1).
    scores = torch.tensor([[0.0, -1.0, 0.0, 0.0, -1.0, -1.0]])
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10]])
    parents = torch.tensor([[-1, -1, 0, 0, 1, 1]])
    depths = torch.tensor([[1, 1, 2, 2, 2, 2]])
    expected = [(1, [0]), (2, [0, 2]), (3, [0, 2, 3]), (4, [0, 1, 2, 3]), (5, [0, 1, 2, 3, 4]), (9, list(range(6)))]
    for n, keep in expected:
        tree = select_nodes(scores, tokens, parents, depths, n, depth=2)
        assert tree.tokens[0].tolist() == [5 + k for k in keep], n
        check_tree(tree)  # ancestors kept, parents first, depths consistent


def test_top_tokens_reference_breaks_ties_to_lowest_id() -> None:
    assert top_tokens((1, 3, 3, 0), 3) == [1, 2, 0]


@pytest.mark.parametrize("parents,depths,message", [
    ([[-1, 2, 0]], [[1, 2, 2]], "parents must be -1 or the index of an earlier node"),
    ([[-1, 0, 0]], [[1, 2, 3]], "depths must be parent depth"),
    ([[-1, 0, 1]], [[1, 2, 3]], "<= depth 2"),
])
def test_check_tree_rejects_bad_layouts(parents, depths, message) -> None:
    tree = DraftTree(torch.zeros(1, 3, dtype=torch.long), torch.tensor(parents), torch.tensor(depths), 2)
    with pytest.raises(ValueError, match=message):
        check_tree(tree)


def test_bad_shapes_raise_with_parameter_names() -> None:
    z = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="share one shape"):
        DraftTree(z, z[:, :2], z, 1)
    with pytest.raises(ValueError, match="depth must be an integer >= 0"):
        DraftTree(z, z, z, -1)
    with pytest.raises(ValueError, match=r"p must be \[B, N\+1, V\] = \[2, 4, V\]"):
        verify_tree(torch.rand(2, 3, 5), DraftTree(z, z - 1, z + 1, 1))


@pytest.mark.parametrize("widths", [(1,), (3,), (2, 2), (3, 2, 2), (2, 3, 1, 2)])
def test_greedy_fast_path_gives_verify_trees_verdict(widths) -> None:
    """``verify_tree_greedy`` on the target's logits = ``verify_tree`` on the greedy one-hot ``p``: the same
    accepted depth, path (node indices), path tokens and next token, on trees with repeated sibling tokens
    and tied logits (the first matching child in node order, the lowest-id argmax); the empty tree too."""
    from eaglehead.decode.tree import verify_tree_greedy

    gen = torch.Generator().manual_seed(5)
    vocab, bsz = 3, 48  # a small vocabulary: children match the argmax often, so paths go deep
    seen = set()
    for trial in range(4):
        rows = [random_tree_of(vocab, level_shape(widths), seed=1000 * trial + b, repeats=True)(())
                for b in range(bsz)]
        tree = _tensor_tree(rows, len(widths))
        logits = torch.randint(0, 2, (bsz, tree.n_nodes + 1, vocab), generator=gen).float()
        want = verify_tree(probs(logits, SamplingConfig(temperature=0)), tree, torch.Generator().manual_seed(trial))
        got = verify_tree_greedy(logits, tree)
        for name in ("accepted", "path", "next_token", "path_tokens"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        seen.update(got.accepted.tolist())
    assert seen == set(range(len(widths) + 1))
    logits = torch.randn(3, 1, 7, generator=gen)
    assert torch.equal(verify_tree_greedy(logits, DraftTree.empty(3)).next_token, logits[:, 0].argmax(-1))
    with pytest.raises(ValueError, match=r"logits must be \[B, N\+1, V\]"):
        verify_tree_greedy(torch.zeros(3, 2, 7), DraftTree.empty(3))
