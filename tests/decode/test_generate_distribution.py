"""Monte-Carlo check of ``speculative_generate`` against the exactly enumerated target distribution.

A tiny target with a 12-token vocabulary, temperature 1 with top-k and top-p (so supports change
between positions), N identical prompts in one batch (each row draws independently from one
seeded generator). The joint law of the first two generated tokens is enumerated exactly from the
target's own transformed distributions; every cell's frequency must lie within a Bernstein bound.

Bound: for a cell with probability pi and N independent rows, Bernstein's inequality gives
P(|f - pi| >= t) <= 2 exp(-N t^2 / (2 pi (1 - pi) + 2 t / 3)). Solving for t at delta = alpha / K
(union bound over K cells, family-wise false-alarm rate alpha = 1e-4) gives the tolerance below.
"""

import math

import pytest
import torch

from eaglehead.decode import (DraftModelDrafter, PromptLookupDrafter, SamplingConfig, probs,
                              speculative_generate, vanilla_generate)
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.vocab import build_draft_vocab
from tests.tiny_models import tiny_llama

V = 12
N = 6000
ALPHA = 1e-4
SAMPLING = SamplingConfig(temperature=1.0, top_k=8, top_p=0.85)


def bernstein_tol(pi: torch.Tensor, n: int, delta: float) -> torch.Tensor:
    log_term = math.log(2 / delta)
    a = 2 * log_term / 3
    return (a + torch.sqrt(a * a + 8 * n * pi * (1 - pi) * log_term)) / (2 * n)


@pytest.fixture(scope="module")
def setup():
    # A larger init scale makes the tiny target's distributions peaked enough that top-k/top-p bite.
    target = tiny_llama(seed=11, vocab=V, hidden=32, layers=2, initializer_range=0.2)
    # The draft is the target with perturbed weights: close enough that every acceptance path occurs.
    draft = tiny_llama(seed=11, vocab=V, hidden=32, layers=2, initializer_range=0.2)
    gen = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for prm in draft.parameters():
            prm.add_(0.15 * torch.randn(prm.shape, generator=gen) * prm.std().clamp_min(1e-3))
    prompt = torch.tensor([[3, 7, 1, 3, 7]])
    with torch.no_grad():
        p1 = probs(target(prompt).logits[0, -1], SAMPLING)  # [V]
        seconds = torch.cat([prompt.repeat(V, 1), torch.arange(V)[:, None]], 1)
        p2 = probs(target(seconds).logits[:, -1], SAMPLING)  # [V, V]: p(x2 | x1)
    joint = (p1[:, None] * p2).double()  # [V, V]
    return target, draft, prompt, p1, p2, joint


def _empirical(tokens: list[list[int]]) -> torch.Tensor:
    counts = torch.zeros(V, V, dtype=torch.float64)
    for row in tokens:
        counts[row[0], row[1]] += 1
    return counts / len(tokens)


def _check(freq: torch.Tensor, joint: torch.Tensor) -> None:
    support = joint > 0
    assert float(freq[~support].sum()) == 0.0, "a token outside the target's top-k/top-p support was emitted"
    tol = bernstein_tol(joint, N, ALPHA / V / V)
    worst = float(((freq - joint).abs() - tol).max())
    assert worst <= 0, f"frequency outside the Bernstein bound by {worst:.4g}"


def test_supports_change_between_positions(setup):
    _, _, _, p1, p2, _ = setup
    sizes = {int((p2[x] > 0).sum()) for x in range(V)} | {int((p1 > 0).sum())}
    assert len(sizes) > 1 and max(sizes) < V  # top-p/top-k truncation differs across prefixes


@pytest.mark.parametrize("drafter_kind", ["draft-lm", "draft-lm-hotter", "prompt-lookup", "eagle3"])
def test_speculative_sampling_matches_target_joint(setup, drafter_kind):
    target, draft, prompt, _, _, joint = setup
    if drafter_kind == "prompt-lookup":
        drafter = PromptLookupDrafter(V)
    elif drafter_kind == "eagle3":
        # Random head with an 8-token draft vocabulary: target tokens outside it (q = 0 < p) are
        # reachable only through the residual.
        cfg = Eagle3Config.from_target_config(target.config, draft_vocab_size=8, fused_layer_ids=[0, 1, 2])
        torch.manual_seed(21)
        head = Eagle3Head(cfg)
        head.set_vocab(*build_draft_vocab(torch.arange(V), 8))
        drafter = Eagle3Drafter(head, target)
    elif drafter_kind == "draft-lm":
        drafter = DraftModelDrafter(draft)  # same transform as the target
    else:
        # Different transform: q puts mass where p has none (p(x) = 0 < q(x)) and vice versa.
        drafter = DraftModelDrafter(draft, sampling=SamplingConfig(temperature=1.7))
    x = prompt.repeat(N, 1)
    gen = torch.Generator().manual_seed(1234)
    out = speculative_generate(target, drafter, x, gamma=3, sampling=SAMPLING, max_new_tokens=4, generator=gen)
    first_round = out.rounds[0]
    if drafter_kind in ("draft-lm", "draft-lm-hotter"):  # (prompt lookup's one chain is rejected at once here)
        assert max(first_round.accepted) == 3 and min(first_round.accepted) == 0  # every path is exercised
    _check(_empirical(out.tokens), joint)


def test_vanilla_sampling_matches_target_joint(setup):
    target, _, prompt, _, _, joint = setup
    out = vanilla_generate(target, prompt.repeat(N, 1), sampling=SAMPLING, max_new_tokens=2,
                           generator=torch.Generator().manual_seed(99))
    _check(_empirical(out.tokens), joint)


def test_check_has_power_against_a_wrong_distribution(setup):
    """The same bound rejects the draft's own distribution: the test is not vacuous."""
    target, draft, prompt, _, _, joint = setup
    out = vanilla_generate(draft, prompt.repeat(N, 1), sampling=SAMPLING, max_new_tokens=2,
                           generator=torch.Generator().manual_seed(5))
    with pytest.raises(AssertionError):
        _check(_empirical(out.tokens), joint)
