"""Monte Carlo check of the full ``tree_generate`` loop against the exactly enumerated target law.

A tiny target with a 12-token vocabulary; N identical prompts in one batch (each row draws
independently from one seeded generator); an EAGLE-3 tree drafter (random head, depth 3, topk 2,
10 verified nodes: the full tree, so the first round alone commits up to 4 tokens through every kind of path). The
joint laws of the first two and of the first three generated tokens are enumerated from the target's
own transformed distributions (float64 products of its float32 probabilities; the tree forward's
logits differ from those by summation order only, ~1e-7, far below the bounds). Every cell's frequency
must lie within a Bernstein bound (``exact_reference.frequency_mismatches``: union bound over the
cells of positive probability, false-alarm rate alpha = 1e-6 per check); cells of probability 0 must
never occur. Settings: temperature 1, and temperature 1 with top-k and top-p (supports that change
along a path). Power: the same check at the same seed and N must flag the loop when the verifier
resamples from ``p`` after all children are rejected (the seed's wrong correction, for trees).

Run: ``python -m pytest tests/decode/test_tree_generate_distribution.py -q``
"""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction

import pytest
import torch

from eaglehead.decode.sampling import SamplingConfig, probs, sample_from
from eaglehead.decode.tree import DraftTree, TreeVerdict, verify_tree
from eaglehead.decode.tree_draft import EagleTreeDrafter
from eaglehead.decode.tree_generate import tree_generate
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.vocab import build_draft_vocab
from tests.tiny_models import tiny_llama

from .exact_reference import frequency_mismatches

V = 12
N = 6000
PROMPT = [3, 7, 1, 3, 7]
SAMPLINGS = {"t1": SamplingConfig(temperature=1.0), "top_k_top_p": SamplingConfig(temperature=1.0, top_k=8, top_p=0.85)}


@pytest.fixture(scope="module")
def target():
    # A larger init scale makes the tiny target's distributions peaked enough that top-k/top-p bite.
    return tiny_llama(seed=11, vocab=V, hidden=32, layers=3, initializer_range=0.2)


def _drafter(target) -> EagleTreeDrafter:
    """Random head over an 8-token draft vocabulary: the other 4 target tokens come only from residuals."""
    cfg = Eagle3Config.from_target_config(target.config, draft_vocab_size=8)
    torch.manual_seed(21)
    head = Eagle3Head(cfg)
    head.set_vocab(*build_draft_vocab(torch.arange(V), 8))
    return EagleTreeDrafter(head, target)


def _tables(target, sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target's transformed next-token laws after the prompt: ``p1 [V]``, ``p2 [V, V]`` (given x1) and
    ``p3 [V, V, V]`` (given x1, x2), float64."""
    with torch.no_grad():
        ctx = torch.tensor([PROMPT])
        p1 = probs(target(ctx).logits[0, -1], sampling).double()
        x1 = torch.cat([ctx.repeat(V, 1), torch.arange(V)[:, None]], 1)
        p2 = probs(target(x1).logits[:, -1], sampling).double()
        pairs = torch.tensor(list(itertools.product(range(V), repeat=2)))
        x12 = torch.cat([ctx.repeat(V * V, 1), pairs], 1)
        p3 = probs(target(x12).logits[:, -1], sampling).double().view(V, V, V)
    return p1, p2, p3


def _exact_law(target, sampling: SamplingConfig) -> torch.Tensor:
    """``[V, V, V]`` float64 joint law of the first three tokens sampled from the target."""
    p1, p2, p3 = _tables(target, sampling)
    return p1[:, None, None] * p2[:, :, None] * p3


class TableTreeDrafter:
    """A strong tree drafter that is a deterministic function of the prefix: a node's children are the
    target's own two likeliest tokens while the generated prefix has at most two tokens (looked up in
    :func:`_tables`), tokens 0 and 1 beyond. Full binary trees of the requested depth, so deep accepted
    paths are common."""

    feature_layer_ids = None

    def __init__(self, tables):
        self.vocab_size = V
        p1, p2, p3 = tables
        top = [torch.sort(t, dim=-1, descending=True, stable=True).indices[..., :2].tolist() for t in (p1, p2, p3)]
        self.top = {(): top[0]}
        self.top.update({(a,): top[1][a] for a in range(V)})
        self.top.update({(a, b): top[2][a][b] for a in range(V) for b in range(V)})

    def begin(self, input_ids, valid, target_features=None):
        self.generated = [[] for _ in range(input_ids.shape[0])]

    def commit(self, n_accepted, path_tokens, next_token, target_features=None):
        for b, a in enumerate(n_accepted):
            self.generated[b] += path_tokens[b, :a].tolist() + [int(next_token[b])]

    def propose_tree(self, depth, topk, tokens, sampling=None, generator=None) -> DraftTree:
        rows = []
        for gen in self.generated:
            toks, pars, level = [], [], [(-1, ())]
            for _ in range(depth):
                nxt = []
                for parent, path in level:
                    for tok in self.top.get(tuple(gen) + path, [0, 1]):
                        toks.append(tok)
                        pars.append(parent)
                        nxt.append((len(toks) - 1, path + (tok,)))
                level = nxt
            rows.append((toks, pars))
        depths = [d for d in range(1, depth + 1) for _ in range(2 ** d)]
        return DraftTree(torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows]),
                         torch.tensor([depths] * len(rows)), depth)


def _mismatches(tokens: list[list[int]], law: torch.Tensor) -> list[str]:
    """Bernstein check of the (x1, x2) and (x1, x2, x3) joint frequencies against ``law [V, V, V]``."""
    bad = []
    for k in (2, 3):
        exact = law.sum(-1) if k == 2 else law
        cells = {c: Fraction(float(exact[c])) for c in itertools.product(range(V), repeat=k)}
        counts: dict[tuple, int] = {}
        for row in tokens:
            counts[tuple(row[:k])] = counts.get(tuple(row[:k]), 0) + 1
        bad += frequency_mismatches(counts, cells, len(tokens))
    return bad


def _run(target, sampling, drafter: str, seed: int = 1234):
    made = _drafter(target) if drafter == "eagle3" else TableTreeDrafter(_tables(target, sampling))
    return tree_generate(target, made, torch.tensor([PROMPT]).repeat(N, 1), depth=3, topk=2, tokens=14,
                         sampling=sampling, max_new_tokens=4, generator=torch.Generator().manual_seed(seed))


def test_supports_change_along_a_path(target):
    law = _exact_law(target, SAMPLINGS["top_k_top_p"])
    sizes = {int((law[x].sum(-1) > 0).sum()) for x in range(V)}
    assert len(sizes) > 1 and max(sizes) < V  # top-p/top-k truncation differs across prefixes


@pytest.mark.parametrize("drafter", ["eagle3", "table"])
@pytest.mark.parametrize("name", sorted(SAMPLINGS))
def test_tree_sampling_matches_target_joint(target, name, drafter):
    sampling = SAMPLINGS[name]
    out = _run(target, sampling, drafter)
    accepted = {a for r in out.rounds for a in r.accepted}
    assert 0 in accepted and max(accepted) >= 1  # rejection at the root and acceptances both occur
    if drafter == "table":
        assert set(out.rounds[0].accepted) == {0, 1, 2, 3}  # every accepted depth of the full tree
    assert _mismatches(out.tokens, _exact_law(target, sampling)) == []


def _resample_from_p(p: torch.Tensor, tree, generator=None) -> TreeVerdict:
    """The control: after rejecting every child, draw from ``p`` itself (children not zeroed)."""
    v = verify_tree(p, tree, generator)
    bsz = p.shape[0]
    path = torch.cat([v.path.new_full((bsz, 1), -1), v.path], 1)  # [B, 1 + depth]: column 0 = the root
    row = path.gather(1, v.accepted[:, None]).squeeze(1) + 1  # [B] p-row of the node the path ended at
    y = sample_from(p[torch.arange(bsz), row].float(), generator)
    return TreeVerdict(v.accepted, v.path, y, v.path_tokens)


def test_check_has_power_against_resampling_from_p(target, monkeypatch):
    """The same check, seed and N flag the loop when the verifier's residual is replaced by ``p``."""
    sampling = SAMPLINGS["top_k_top_p"]
    # the loop's module (by name: the package may export a function of the same name)
    monkeypatch.setattr(sys.modules[tree_generate.__module__], "verify_tree", _resample_from_p)
    out = _run(target, sampling, "table")
    assert _mismatches(out.tokens, _exact_law(target, sampling)) != []
