"""Monte Carlo check of the torch ``verify_tree`` against the exact rational reference.

N copies of one (tree, p) case go in the batch dimension, so one vectorised call gives N independent
verifications. The exact law of ``(last reached p-row, emitted token)`` (the reached row identifies the
accepted path) comes from ``tree_reference.verdict_law`` applied to the exact values of the float32
tensors the verifier sees, so float rounding of the inputs is not a tolerance: only sampling noise is.

Bound (``exact_reference.frequency_mismatches``): with ``K`` cells of positive probability and
``L = ln(2K / alpha)``, a cell of probability ``pi`` may deviate by ``t = (L/3 + sqrt(L^2/9 + 2 N L pi
(1 - pi))) / N`` (Bernstein), so a correct verifier fails a check with probability <= alpha = 1e-6 (union
bound). Cells of probability 0 must never be observed. At N = 200_000 and pi = 0.2, t ~ 0.005.

Negative control (``test_chain_rule_control_is_flagged_at_the_same_seed_and_n``): deterministic top-k
children of the draft's softmax ``q`` verified with the chain's ``min(1, r/q)`` (and residual
``max(r - q, 0)``) must fail the same check at the same seed and N at which ``verify_tree`` passes.

Run: ``python -m pytest tests/decode/test_tree_verify_montecarlo.py -q``
"""

from __future__ import annotations

import random
from fractions import Fraction as F

import pytest
import torch

from eaglehead.decode.sampling import sample_from
from eaglehead.decode.tree import DraftTree, check_tree, verify_tree

from .exact_reference import frequency_mismatches
from .tree_reference import flatten, level_shape, random_tree_of, top_tokens, verdict_law

N = 200_000


def _exact(t: torch.Tensor) -> list:
    """Exact rationals of the float32 values in ``t [rows, V]`` (what the verifier really sees)."""
    return [tuple(F(v) for v in row) for row in t.tolist()]


def _rand_rows(rng: random.Random, rows: int, vocab: int, zero_frac: float = 0.0) -> torch.Tensor:
    """``[rows, vocab]`` float32 distributions; each entry is zeroed with ``zero_frac`` (top-p-like holes)."""
    out = []
    for _ in range(rows):
        w = [0 if rng.random() < zero_frac else rng.randint(1, 9) for _ in range(vocab)]
        if not any(w):
            w[rng.randrange(vocab)] = 1
        out.append([x / sum(w) for x in w])
    return torch.tensor(out, dtype=torch.float32)


def _counts(tree: DraftTree, verdict, vocab: int) -> dict[tuple[int, int], int]:
    """Counts of ``(reached p-row, token)`` over the batch."""
    a = verdict.accepted
    last = verdict.path.gather(1, (a - 1).clamp_min(0)[:, None]).squeeze(1)
    row = torch.where(a > 0, last + 1, 0)
    flat = torch.bincount(row * vocab + verdict.next_token, minlength=(tree.n_nodes + 1) * vocab).tolist()
    return {(k // vocab, k % vocab): c for k, c in enumerate(flat)}


def _batched(tokens, parents, depths, depth: int) -> DraftTree:
    def rep(x):
        return torch.tensor(x).expand(N, -1)
    tree = DraftTree(rep(tokens), rep(parents), rep(depths), depth)
    check_tree(DraftTree(*(torch.tensor([x]) for x in (tokens, parents, depths)), depth))
    return tree


def _case(name: str):
    """``(tree tokens, parents, depths, depth, p [N+1, V])`` for one fixed tree."""
    rng = random.Random(name)
    if name == "eagle_like_3x2":  # full binary tree of depth 3 over vocab 6
        toks, pars, deps = flatten(random_tree_of(6, level_shape((2, 2, 2)), seed=1)(()))
        return toks, pars, deps, 3, _rand_rows(rng, len(toks) + 1, 6)
    if name == "top_p_support_changes":  # rows with different holes: some children have p = 0 at their parent
        toks, pars, deps = flatten(random_tree_of(5, level_shape((3, 2, 1)), seed=2)(()))
        return toks, pars, deps, 3, _rand_rows(rng, len(toks) + 1, 5, zero_frac=0.5)
    if name == "children_cover_support":  # vocab 3, 3 children: the residual is never needed at the root
        toks, pars, deps = flatten(random_tree_of(3, level_shape((3, 1)), seed=3)(()))
        return toks, pars, deps, 2, _rand_rows(rng, len(toks) + 1, 3)
    if name == "repeated_siblings":  # the same token twice under one parent: the second is never accepted
        toks, pars, deps = [1, 1, 2, 0, 0], [-1, -1, -1, 0, 0], [1, 1, 1, 2, 2]
        return toks, pars, deps, 2, _rand_rows(rng, 6, 4)
    if name == "deep_chain_wide_root":  # 4 root children, one of them carries a chain of depth 4
        toks, pars, deps = [0, 1, 2, 3, 1, 2, 3], [-1, -1, -1, -1, 1, 4, 5], [1, 1, 1, 1, 2, 3, 4]
        return toks, pars, deps, 4, _rand_rows(rng, 8, 5, zero_frac=0.3)
    raise ValueError(name)


@pytest.mark.parametrize("name", ["eagle_like_3x2", "top_p_support_changes", "children_cover_support",
                                  "repeated_siblings", "deep_chain_wide_root"])
def test_fixed_tree_joint_law_matches_exact(name: str) -> None:
    toks, pars, deps, depth, p = _case(name)
    tree = _batched(toks, pars, deps, depth)
    vocab = p.shape[-1]
    verdict = verify_tree(p.expand(N, -1, -1), tree, torch.Generator().manual_seed(len(name)))
    exact = verdict_law(_exact(p), toks, pars)
    counts = _counts(tree, verdict, vocab)
    assert frequency_mismatches(counts, exact, N) == []
    reached = {row for (row, _), pr in exact.items() if pr}
    assert len(reached) > 2  # several paths (including deep ones) are exercised
    if name == "repeated_siblings":
        assert sum(c for (row, _), c in counts.items() if row == 2) == 0  # node 1 repeats node 0's token
    if name == "children_cover_support":
        assert all(pr == 0 or row != 0 for (row, _), pr in exact.items())


# --- negative control -----------------------------------------------------------------------------

def chain_rule_verify(p: torch.Tensor, q: torch.Tensor, tree: DraftTree,
                      generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The control: children tried in node order with the chain's ``min(1, r(c) / q(c))`` and, after a
    rejection, ``r = normalize(max(r - q, 0))``. Exact only when children are *sampled* from ``q``.

    ``p [B, N+1, V]`` target rows, ``q [B, N+1, V]`` the draft's softmax at every row. Returns the
    reached p-row and the emitted token, ``[B]`` each (a Python loop over the nodes: a test helper).
    """
    bsz = p.shape[0]
    rows = torch.arange(bsz)
    cur = torch.zeros(bsz, dtype=torch.long)
    r = p[:, 0].clone()
    for i in range(tree.n_nodes):
        here = tree.parents[:, i] + 1 == cur  # [B] this node is a child of the reached node
        c = tree.tokens[:, i]
        q_row = q[rows, cur]
        rc, qc = r[rows, c], q_row[rows, c]
        u = torch.rand(bsz, generator=generator)
        accept = here & (u * qc < rc)
        reject = here & ~accept
        residual = (r - q_row).clamp_min(0)
        residual = residual / residual.sum(-1, keepdim=True).clamp_min(1e-30)
        cur = torch.where(accept, i + 1, cur)
        r = torch.where(accept[:, None], p[:, i + 1], torch.where(reject[:, None], residual, r))
    return cur, sample_from(r, generator)


def test_chain_rule_control_is_flagged_at_the_same_seed_and_n() -> None:
    """EAGLE-2-like tree (children = top-2 of the draft's q at every node, depth 2) over vocab 5."""
    rng = random.Random("control")
    vocab = 5
    shape = level_shape((2, 2))
    n_nodes = 6
    q = _rand_rows(rng, n_nodes + 1, vocab)  # the draft's softmax at the root and every node
    p = _rand_rows(rng, n_nodes + 1, vocab)
    toks, pars, deps = [], [], []
    for i in range(2):  # root children, then each one's two children: top tokens of q at the parent
        toks.append(top_tokens(_exact(q[:1])[0], 2)[i])
        pars.append(-1)
        deps.append(1)
    for parent in range(2):
        for i in range(2):
            toks.append(top_tokens(_exact(q[parent + 1:parent + 2])[0], 2)[i])
            pars.append(parent)
            deps.append(2)
    assert len(toks) == n_nodes and len(shape) == 2
    tree = _batched(toks, pars, deps, 2)
    exact = verdict_law(_exact(p), toks, pars)

    seed = 11
    real = verify_tree(p.expand(N, -1, -1), tree, torch.Generator().manual_seed(seed))
    assert frequency_mismatches(_counts(tree, real, vocab), exact, N) == []

    row, token = chain_rule_verify(p.expand(N, -1, -1), q.expand(N, -1, -1), tree, torch.Generator().manual_seed(seed))
    flat = torch.bincount(row * vocab + token, minlength=(n_nodes + 1) * vocab).tolist()
    control = {(k // vocab, k % vocab): c for k, c in enumerate(flat)}
    flagged = frequency_mismatches(control, exact, N)
    assert flagged != [], "the chain rule on deterministic top-k children must be flagged"
    # The first emitted token alone is biased: compare its marginal as well (cells: token after the root).
    assert len(flagged) >= 3, flagged


# --- float rounding edges -------------------------------------------------------------------------

def test_children_holding_all_mass_up_to_rounding_stay_in_support() -> None:
    """p's mass sits on the children except one ulp-scale entry: never NaN, never a token with p = 0."""
    n = 50_000
    p = torch.tensor([[0.0, 0.6, 0.4, 1e-30], [0.0, 0.5, 0.5, 0.0], [0.3, 0.0, 0.7, 0.0]])
    tree = DraftTree(torch.tensor([[1, 2]]).expand(n, -1), torch.tensor([[-1, -1]]).expand(n, -1),
                     torch.ones(n, 2, dtype=torch.long), 1)
    v = verify_tree(p.expand(n, -1, -1), tree, torch.Generator().manual_seed(0))
    a = v.accepted
    row = torch.where(a > 0, v.path[:, 0] + 1, 0)
    assert bool((p[row, v.next_token] > 0).all())
    assert float((a == 1).float().mean()) > 0.999  # the root's residual has mass 1e-30


def test_same_generator_seed_reproduces_draws() -> None:
    toks, pars, deps, depth, p = _case("eagle_like_3x2")
    tree = DraftTree(*(torch.tensor(x).expand(1000, -1) for x in (toks, pars, deps)), depth)
    a = verify_tree(p.expand(1000, -1, -1), tree, torch.Generator().manual_seed(42))
    b = verify_tree(p.expand(1000, -1, -1), tree, torch.Generator().manual_seed(42))
    assert torch.equal(a.path, b.path) and torch.equal(a.next_token, b.next_token)
    assert len(set(a.accepted.tolist())) > 1  # the draws are random, not constant
