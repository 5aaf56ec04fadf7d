"""An EAGLE 3.1 head (``fc_norm`` / ``norm_output``) inside the decode loops: the chain and the tree stay exact
(greedy output = the target's), the drafter's state after rounds equals a fresh start, and what
``Eagle3Drafter.propose`` drafts over several self-fed steps is the float64 reference's distribution.

Tolerance of the last check: the drafter runs float32, the reference float64, on a tiny Llama whose features are
O(1); ``1e-5`` on probabilities is ~10x what float32 rounding leaves there (the head-level test in
``tests/draftheads/test_eagle31.py`` measured 4e-6 on logits at feature scale 40).
"""

import pytest
import torch

from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.decode.tree_draft import EagleTreeDrafter
from eaglehead.decode.tree_generate import tree_generate
from tests.draftheads.test_eagle31 import Reference
from tests.tiny_models import tiny_llama

from .test_eagle_drafter import Recording, _batch, _fresh_first_q, make_head

GREEDY = SamplingConfig(temperature=0)
SWITCHES = [{"fc_norm": True, "norm_output": True}, {"fc_norm": True}, {"norm_output": True}]


def head_31(target, switches, draft_vocab=40, seed=3):
    """A random head with the switches, its norm gains drawn away from 1 so that a gain left unused shows."""
    head = make_head(target, draft_vocab, seed, **switches)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:  # fc_norm.i, the layer's three norms, the final norm
                p.uniform_(0.5, 1.5)
    head.bind_embedding(target.get_input_embeddings())
    return head


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=4)


@pytest.mark.parametrize("switches", SWITCHES)
@pytest.mark.parametrize("bsz", [1, 3])
def test_greedy_chain_and_tree_equal_vanilla(target, switches, bsz):
    x, mask = _batch(bsz)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=16, attention_mask=mask).tokens
    accepted = set()
    for head in (head_31(target, switches), head_31(target, switches, draft_vocab=64, seed=5)):
        for gamma in (1, 3, 5):
            out = speculative_generate(target, Eagle3Drafter(head, target), x, gamma=gamma, sampling=GREEDY,
                                       max_new_tokens=16, attention_mask=mask)
            assert out.tokens == ref, ("chain", gamma)
            accepted.update(a for r in out.rounds for a in r.accepted)
        for depth, topk, tokens in ((3, 2, 4), (4, 3, 10), (5, 6, 40)):
            out = tree_generate(target, EagleTreeDrafter(head, target), x, depth=depth, topk=topk, tokens=tokens,
                                sampling=GREEDY, max_new_tokens=16, attention_mask=mask)
            assert out.tokens == ref, ("tree", depth, topk, tokens)
            accepted.update(a for r in out.rounds for a in r.accepted)
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances both occurred


@pytest.mark.parametrize("switches", SWITCHES)
def test_draft_state_after_rounds_equals_fresh_start(target, switches):
    sampling = SamplingConfig(temperature=1.0, top_k=20)
    head = head_31(target, switches, draft_vocab=64)
    x, mask = _batch(3)
    drafter = Recording(head, target)
    out = speculative_generate(target, drafter, x, gamma=3, sampling=sampling, max_new_tokens=14,
                               attention_mask=mask, generator=torch.Generator().manual_seed(7))
    assert len({a for r in out.rounds for a in r.accepted}) > 1
    q_next = drafter.propose(1, sampling)[1][:, 0]
    for b in range(3):
        torch.testing.assert_close(q_next[b], _fresh_first_q(target, head, drafter.seen[b], sampling),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("switches", SWITCHES)
def test_proposals_over_self_fed_steps_match_the_float64_reference(target, switches):
    head = head_31(target, switches, draft_vocab=64)
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(11))
    runner = RaggedCacheLM(target, list(head.config.fused_layer_ids))
    runner.reset(1)
    feats = runner.forward(ids[:, :-1], want_features=True).features  # [1, 8, 3H]
    drafter = Eagle3Drafter(head, target)
    drafter.begin(ids, torch.ones_like(ids, dtype=torch.bool), feats)
    gamma = 4
    drafts, q = drafter.propose(gamma, SamplingConfig(temperature=1.0), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        emb = head.embed(ids[0]).double()
        fed = head.embed(drafts[0, : gamma - 1]).double()
    logits = Reference(head).draft(emb[1:], feats[0].double(), fed)[-gamma:]  # the last prompt row, then self-fed
    want = torch.softmax(logits, -1)  # [gamma, Vd]
    got = q[0][:, head.target_ids].double()  # the drafter's q, read at the draft vocabulary's target ids
    assert (got - want).abs().max() <= 1e-5
    assert got.sum(-1).sub(1).abs().max() <= 1e-5  # nothing outside the draft vocabulary
    # Each switch matters here: flipped off in the reference, the proposals move far beyond the tolerance.
    for name in switches:
        flipped = torch.softmax(Reference(head, **{name: False}).draft(emb[1:], feats[0].double(), fed)[-gamma:], -1)
        assert (flipped - want).abs().max() > 1e-3, name
