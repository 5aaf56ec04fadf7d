"""Exact distribution contract of the linear-chain verifier (a chain of drafts, rejection and residual resampling, ties and edge cases).

Part 1 checks the algorithm itself with exact rationals (``exact_reference``): the seed's three-token
example, then exhaustive enumeration of every acceptance/residual path on conditional trees
(``prefix -> distribution``) for gamma 1..3, and a negative control the same checker must flag.
Part 2 checks that the torch ``verify_chain`` is that algorithm where its output is deterministic
(greedy point masses) and that it rejects malformed shapes.

Run: ``python -m pytest tests/decode/test_verify_exact.py -q``
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest
import torch

from eaglehead.decode.sampling import SamplingConfig, probs
from eaglehead.decode.verify import verify_chain

from .exact_reference import (
    PAIR_KINDS,
    SEED_P,
    SEED_Q,
    Dist,
    Tree,
    acceptance,
    chain_outcome_probs,
    committed_distribution,
    greedy_of,
    make_trees,
    mismatches,
    residual,
    round_outcomes,
    single_step_output,
    target_distribution,
)

# --- a three-token worked example -------------------------------------------------------------------

def test_seed_example_acceptance_residual_and_output() -> None:
    accepted_mass = [SEED_Q[x] * acceptance(SEED_P, SEED_Q, x) for x in range(3)]
    assert accepted_mass == [F(1, 5)] * 3  # each symbol contributes 0.2
    assert [acceptance(SEED_P, SEED_Q, x) for x in range(3)] == [1, 1, F(1, 3)]
    assert sum(accepted_mass) == F(3, 5)  # alpha = 0.6
    assert residual(SEED_P, SEED_Q) == (F(3, 4), F(1, 4), F(0))
    assert single_step_output(SEED_P, SEED_Q) == SEED_P


def test_seed_example_wrong_correction_overpays_c() -> None:
    wrong = single_step_output(SEED_P, SEED_Q, after_reject="target")
    assert wrong == (F(2, 5), F(8, 25), F(7, 25))  # (0.4, 0.32, 0.28)
    assert wrong != SEED_P


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_seed_example_as_constant_tree(gamma: int) -> None:
    target: Tree = lambda h: SEED_P  # noqa: E731  (same p and q after every prefix)
    draft: Tree = lambda h: SEED_Q  # noqa: E731
    n = gamma + 1
    assert committed_distribution(target, draft, draft, gamma, n) == target_distribution(target, n)


# --- random conditional trees ---------------------------------------------------------------------

def check_tree(target: Tree, propose: Tree, record: Tree, gamma: int) -> list:
    """Mismatches between the law of the first gamma+1 committed tokens and the target's law."""
    n = gamma + 1
    return mismatches(committed_distribution(target, propose, record, gamma, n),
                      target_distribution(target, n))


# Trees per (vocab, gamma, kind): 8 x 6 x 8 = 384 exact checks, plus 64 "mixed" trees below.
# The biggest case (vocab 4, gamma 3) enumerates ~4^6 paths per tree, so it gets fewer trees.
@pytest.mark.parametrize("kind", PAIR_KINDS)
@pytest.mark.parametrize("vocab,gamma", [(3, 1), (3, 2), (3, 3), (4, 1), (4, 2), (4, 3)])
def test_committed_tokens_follow_target_exactly(kind: str, vocab: int, gamma: int) -> None:
    n_trees = 3 if (vocab, gamma) == (4, 3) else 8
    for seed in range(n_trees):
        target, draft = make_trees(kind, vocab, seed)
        assert check_tree(target, draft, draft, gamma) == [], (kind, vocab, gamma, seed)


@pytest.mark.parametrize("gamma", [1, 2])
def test_mixed_edge_case_trees(gamma: int) -> None:
    """64 trees where every prefix draws its own edge case."""
    for seed in range(64):
        target, draft = make_trees("mixed", 3, seed)
        assert check_tree(target, draft, draft, gamma) == [], (gamma, seed)


def test_round_law_marginal_is_target_at_first_position() -> None:
    """One round's first committed token is exactly p(. | h), for every draft length."""
    target, draft = make_trees("random", 4, seed=11)
    for gamma in (1, 2, 3):
        first = [F(0)] * 4
        for tokens, pr in round_outcomes(target, draft, draft, gamma).items():
            assert 1 <= len(tokens) <= gamma + 1
            first[tokens[0]] += pr
        assert tuple(first) == target(())


# --- negative control -----------------------------------------------------------------------------

def test_negative_control_greedy_draft_verified_with_softmax_q() -> None:
    """Drafting argmax(q) but verifying with q itself breaks the contract; the checker must say so."""
    target: Tree = lambda h: SEED_P  # noqa: E731
    draft: Tree = lambda h: SEED_Q  # noqa: E731
    got = committed_distribution(target, greedy_of(draft), draft, gamma=1, n=1)
    assert got == {(0,): F(1, 2), (1,): F(1, 6), (2,): F(1, 3)}
    assert mismatches(got, target_distribution(target, 1)) != []
    for gamma in (1, 2, 3):
        assert check_tree(target, greedy_of(draft), draft, gamma) != []
        # Recording what was actually sampled (the point mass) restores exactness.
        assert check_tree(target, greedy_of(draft), greedy_of(draft), gamma) == []


@pytest.mark.parametrize("gamma", [1, 2])
def test_negative_control_flagged_on_random_trees(gamma: int) -> None:
    for seed in range(16):
        target, draft = make_trees("random", 3, seed)
        assert check_tree(target, greedy_of(draft), draft, gamma) != [], seed


# --- torch verify_chain: deterministic structure --------------------------------------------------

def _exact_rows(t: torch.Tensor) -> list[Dist]:
    """Exact rationals of a float32 ``[rows, V]`` tensor."""
    return [tuple(F(v) for v in row) for row in t.tolist()]


def _expected_greedy(t: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First disagreement of draft ``d [B, gamma]`` with target argmax ``t [B, gamma+1]``."""
    gamma = d.shape[1]
    miss = torch.cat([d != t[:, :gamma], torch.ones_like(t[:, :1], dtype=torch.bool)], dim=1)
    n_acc = miss.long().argmax(dim=1)  # first True; the appended column makes gamma the default
    return n_acc, t.gather(1, n_acc[:, None]).squeeze(1)


@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 6])
def test_greedy_point_masses_determine_the_outcome(gamma: int) -> None:
    """Point-mass p and q: accept while the draft equals the target argmax, then emit that argmax."""
    gen = torch.Generator().manual_seed(100 + gamma)
    seen = set()
    for trial in range(12):
        bsz, vocab = 16, int(torch.randint(2, 40, (1,), generator=gen))
        t = torch.randint(vocab, (bsz, gamma + 1), generator=gen)
        other = (t[:, :gamma] + torch.randint(1, vocab, (bsz, gamma), generator=gen)) % vocab
        d = torch.where(torch.rand(bsz, gamma, generator=gen) < 0.75, t[:, :gamma], other)
        p = torch.nn.functional.one_hot(t, vocab).float()
        q = torch.nn.functional.one_hot(d, vocab).float()
        n_acc, nxt = verify_chain(p, q, d, generator=torch.Generator().manual_seed(trial))
        exp_acc, exp_next = _expected_greedy(t, d)
        assert torch.equal(n_acc, exp_acc) and torch.equal(nxt, exp_next)
        for b in range(bsz):
            ref = chain_outcome_probs(_exact_rows(p[b]), _exact_rows(q[b]), d[b].tolist())
            assert ref == {(int(n_acc[b]), int(nxt[b])): 1}
        seen.update(n_acc.tolist())
    assert seen == set(range(gamma + 1))  # first, middle and no rejection all exercised


def test_greedy_from_tied_logits_breaks_ties_to_lowest_id() -> None:
    """Greedy ``probs`` on both sides with many ties: the committed token is the lowest-id argmax."""
    gen = torch.Generator().manual_seed(7)
    bsz, gamma, vocab = 64, 4, 6
    target_logits = torch.randint(0, 3, (bsz, gamma + 1, vocab), generator=gen).float()
    draft_logits = torch.where(torch.rand(bsz, gamma, 1, generator=gen) < 0.7, target_logits[:, :gamma],
                               torch.randint(0, 3, (bsz, gamma, vocab), generator=gen).float())
    greedy = SamplingConfig(temperature=0)
    p, q = probs(target_logits, greedy), probs(draft_logits, greedy)
    d = q.argmax(-1)
    lowest = [[row.index(max(row)) for row in seq] for seq in target_logits.tolist()]
    t = torch.tensor(lowest)
    n_acc, nxt = verify_chain(p, q, d, generator=gen)
    exp_acc, exp_next = _expected_greedy(t, d)
    assert torch.equal(n_acc, exp_acc) and torch.equal(nxt, exp_next)


def test_gamma_zero_is_plain_target_sampling() -> None:
    p = torch.nn.functional.one_hot(torch.tensor([[2], [0], [1]]), 3).float()  # [3, 1, 3]
    n_acc, nxt = verify_chain(p, p[:, :0], torch.zeros(3, 0, dtype=torch.long))
    assert n_acc.tolist() == [0, 0, 0] and nxt.tolist() == [2, 0, 1]


# --- shape validation -----------------------------------------------------------------------------

B, G, V = 2, 3, 5
BAD_SHAPES = {
    "p_not_3d": ((B, V), (B, G, V), (B, G)),
    "q_not_3d": ((B, G + 1, V), (G, V), (B, G)),
    "draft_not_2d": ((B, G + 1, V), (B, G, V), (B, G, 1)),
    "p_rows_not_gamma_plus_1": ((B, G, V), (B, G, V), (B, G)),
    "q_rows_not_gamma": ((B, G + 1, V), (B, G + 1, V), (B, G)),
    "vocab_mismatch": ((B, G + 1, V), (B, G, V + 1), (B, G)),
    "p_batch_mismatch": ((B + 1, G + 1, V), (B, G, V), (B, G)),
    "q_batch_mismatch": ((B, G + 1, V), (B + 1, G, V), (B, G)),
}


@pytest.mark.parametrize("name", sorted(BAD_SHAPES))
def test_bad_shapes_raise_with_shapes_in_message(name: str) -> None:
    p_shape, q_shape, d_shape = BAD_SHAPES[name]
    p = torch.full(p_shape, 1.0 / V)
    q = torch.full(q_shape, 1.0 / V)
    d = torch.zeros(d_shape, dtype=torch.long)
    with pytest.raises(ValueError) as err:
        verify_chain(p, q, d)
    for shape in (p_shape, q_shape, d_shape):
        assert str(tuple(shape)) in str(err.value), (name, str(err.value))


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_fast_path_gives_verify_chains_verdict_for_any_q(gamma: int) -> None:
    """``verify_chain_greedy`` on the target's logits = ``verify_chain`` on the greedy one-hot ``p``, with
    tied logits (lowest id wins), for a point-mass ``q`` and for a drafter that samples from a spread ``q``
    (its own temperature) while the target is greedy; the decode loops use it whenever the target is."""
    from eaglehead.decode.sampling import sample_from
    from eaglehead.decode.verify import verify_chain_greedy

    gen = torch.Generator().manual_seed(11 + gamma)
    greedy = SamplingConfig(temperature=0)
    seen = set()
    for trial in range(20):
        bsz, vocab = 32, 5
        logits = torch.randint(0, 3, (bsz, gamma + 1, vocab), generator=gen).float()  # many ties
        t = probs(logits, greedy).argmax(-1)
        if trial % 2:  # a sampling drafter: spread q, draws that often hit the target's argmax
            q = torch.softmax(torch.randn(bsz, gamma, vocab, generator=gen) + 3 * torch.nn.functional.one_hot(
                t[:, :gamma], vocab), -1)
            d = sample_from(q, gen)
        else:
            d = torch.where(torch.rand(bsz, gamma, generator=gen) < 0.7, t[:, :gamma],
                            torch.randint(vocab, (bsz, gamma), generator=gen))
            q = torch.nn.functional.one_hot(d, vocab).float()
        want = verify_chain(probs(logits, greedy), q, d, generator=torch.Generator().manual_seed(trial))
        got = verify_chain_greedy(logits.to(torch.bfloat16) if trial % 3 == 0 else logits, d)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        seen.update(got[0].tolist())
    assert seen == set(range(gamma + 1))
    with pytest.raises(ValueError, match=r"logits \[B, gamma\+1, V\] for draft \[B, gamma\]"):
        verify_chain_greedy(torch.zeros(2, gamma, 5), torch.zeros(2, gamma, dtype=torch.long))
