"""DFlash drafting is exact, as ``verify_chain`` was proven: greedy identity against vanilla on every family (batch
1 and a ragged batch 2, past the sliding window), the full-loop law of the first two tokens at T = 1 and with
top-k/top-p within a Bernstein bound, a negative control that bound must catch, and the drafter's context cache
equal to a recompute over exactly the committed prefix after every round."""

from __future__ import annotations

import pytest
import torch

from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.dflash import DFlashDrafter
from eaglehead.draftheads.dflash import DFlashConfig, DFlashHead
from eaglehead.draftheads.taps import FeatureTaps
from tests.families import FAMILIES, VOCAB, WINDOW, tiny_family
from tests.tiny_models import tiny_llama

from .test_generate_distribution import ALPHA, N, SAMPLING, V, _check, _empirical, bernstein_tol

GREEDY = SamplingConfig(temperature=0)
BLOCK = 5


def make_dflash(target, seed: int = 0, ids=None, block: int = BLOCK) -> DFlashHead:
    layers = target.config.num_hidden_layers
    torch.manual_seed(seed)
    head = DFlashHead(DFlashConfig.from_target_config(
        target.config, mask_token_id=1, fused_layer_ids=ids or list(range(1, layers + 1))[-3:], block_size=block,
        num_hidden_layers=2, intermediate_size=32))
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(3.0) if p.dim() == 2 else p.add_(0.1 * torch.randn_like(p))  # peaked, varied proposals
    return head.to(next(target.parameters()).dtype)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_dflash_equals_vanilla_on_every_family(family):
    model = tiny_family(family)
    g = torch.Generator().manual_seed(7)
    rows = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (10, 6)]
    new = 3 * WINDOW
    truth = [vanilla_generate(model, torch.tensor([r]), sampling=GREEDY, max_new_tokens=new).tokens[0] for r in rows]
    drafter = DFlashDrafter(make_dflash(model), model)
    one = speculative_generate(model, drafter, torch.tensor([rows[0]]), gamma=BLOCK - 1, sampling=GREEDY,
                               max_new_tokens=new)
    assert one.tokens == truth[:1]
    x = torch.tensor([rows[0], [0] * 4 + rows[1]])
    mask = torch.tensor([[1] * 10, [0] * 4 + [1] * 6])
    two = speculative_generate(model, DFlashDrafter(make_dflash(model), model), x, gamma=BLOCK - 1, sampling=GREEDY,
                               max_new_tokens=new, attention_mask=mask)
    assert two.tokens == truth


@pytest.fixture(scope="module")
def trained():
    """A 12-token target and a drafter trained 60 steps on its greedy continuations (the recipe's objective, argmax
    labels): a drafter that is often right, so rows accept different counts. Its agreement must have risen."""
    from eaglehead.train.dflash_objective import DFlashModule

    target = tiny_llama(seed=11, vocab=V, hidden=32, layers=2, initializer_range=0.2)
    prompts = torch.randint(0, V, (32, 6), generator=torch.Generator().manual_seed(0))
    seqs = torch.cat([prompts, torch.tensor(vanilla_generate(target, prompts, sampling=GREEDY,
                                                             max_new_tokens=34).tokens)], 1)
    with torch.no_grad(), FeatureTaps(target, [1, 2]).capture() as cap:
        out = target(seqs, output_hidden_states=True)
    batch = {"input_ids": seqs, "attention_mask": torch.ones_like(seqs), "loss_mask": torch.ones_like(seqs),
             "fused": cap.fused(), "final_hidden": out.hidden_states[-1]}
    head = make_dflash(target, ids=[1, 2])
    head.bind_target(target)
    module = DFlashModule(head, target.get_output_embeddings().weight, num_anchors=8, gamma=4.0, labels="argmax")
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    first = None
    for step in range(60):
        module.seed = step
        res = module(batch)
        first = first or res.accuracy()[0]
        opt.zero_grad()
        res.loss().backward()
        opt.step()
    assert res.accuracy()[0] > first + 0.2
    return target, head.eval()


def test_greedy_identity_with_acceptances_on_a_small_vocabulary(trained):
    target, head = trained
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(0, V, (n,), generator=g).tolist() for n in (9, 5, 7)]
    truth = [vanilla_generate(target, torch.tensor([r]), sampling=GREEDY, max_new_tokens=30).tokens[0] for r in rows]
    x = torch.tensor([[0] * (9 - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (9 - len(r)) + [1] * len(r) for r in rows])
    out = speculative_generate(target, DFlashDrafter(head, target), x, gamma=BLOCK - 1, sampling=GREEDY,
                               max_new_tokens=30, attention_mask=mask)
    assert out.tokens == truth
    accepted = [a for r in out.rounds for a in r.accepted]
    assert max(accepted) >= 3 and len({tuple(r.accepted) for r in out.rounds}) > 3


class WrongQ(DFlashDrafter):
    """Negative control: draws from each slot's q but reports a sharper one (q^2, renormalised)."""

    def propose(self, gamma, sampling, generator=None):
        d, q = super().propose(gamma, sampling, generator)
        sharp = q ** 2
        return d, sharp / sharp.sum(-1, keepdim=True)


@pytest.fixture(scope="module")
def small(trained):
    return trained[0], trained[1], torch.tensor([[3, 7, 1, 3, 7]])


def _joint(target, prompt, sampling):
    from eaglehead.decode import probs

    with torch.no_grad():
        p1 = probs(target(prompt).logits[0, -1], sampling)
        seconds = torch.cat([prompt.repeat(V, 1), torch.arange(V)[:, None]], 1)
        p2 = probs(target(seconds).logits[:, -1], sampling)
    return (p1[:, None] * p2).double()


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SAMPLING], ids=["T1", "top-k-top-p"])
def test_full_loop_law_of_the_first_two_tokens(small, sampling):
    target, head, prompt = small
    drafter = DFlashDrafter(head, target)
    out = speculative_generate(target, drafter, prompt.repeat(N, 1), gamma=3, sampling=sampling, max_new_tokens=4,
                               generator=torch.Generator().manual_seed(1234))
    first = out.rounds[0].accepted
    assert max(first) == 3 and min(first) == 0  # every acceptance path occurs
    _check(_empirical(out.tokens), _joint(target, prompt, sampling))


def test_a_drafter_that_misreports_q_is_caught(small):
    target, head, prompt = small
    sampling = SamplingConfig(temperature=1.0)
    out = speculative_generate(target, WrongQ(head, target), prompt.repeat(N, 1),
                               gamma=3, sampling=sampling, max_new_tokens=4,
                               generator=torch.Generator().manual_seed(1234))
    with pytest.raises(AssertionError):
        _check(_empirical(out.tokens), _joint(target, prompt, sampling))
    assert bernstein_tol(torch.tensor(0.1), N, ALPHA) < 0.02  # the bound is tight enough to mean something


def _features(target, ids, layer_ids) -> torch.Tensor:
    with torch.no_grad(), FeatureTaps(target, layer_ids).capture() as cap:
        target(ids)
    return cap.fused()


@pytest.mark.parametrize("over_append", [False, True], ids=["drafter", "negative-control"])
def test_the_context_cache_is_the_committed_prefix_after_every_round(over_append):
    """Rounds with rows accepting different counts (ragged); after each commit every row's valid cache slots equal
    the keys/values recomputed from a full forward over its committed prefix minus the pending token. The control
    appends every verified position (accepted or not) and must differ."""
    target = tiny_family("qwen3")
    head = make_dflash(target)
    drafter = DFlashDrafter(head, target)
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(3, VOCAB, (8,), generator=g).tolist() for _ in range(2)]
    drafter.begin(torch.tensor(seqs), torch.ones(2, 8, dtype=torch.bool),
                  _features(target, torch.tensor(seqs)[:, :-1], drafter.feature_layer_ids))
    for accepted in ([0, 3], [2, 1], [4, 4], [1, 0]):
        gamma = 4
        draft = torch.randint(3, VOCAB, (2, gamma), generator=g)
        verified = torch.cat([torch.tensor([s[-1] for s in seqs])[:, None], draft], 1)  # [last, d_1..d_gamma]
        feats = torch.stack([_features(target, torch.tensor([s[:-1] + verified[b].tolist()]),
                                       drafter.feature_layer_ids)[0, len(s) - 1:] for b, s in enumerate(seqs)])
        nxt = torch.randint(3, VOCAB, (2,), generator=g)
        drafter.commit(accepted if not over_append else [gamma, gamma], draft, nxt, feats)
        for b in range(2):
            seqs[b] = seqs[b] + draft[b, : accepted[b]].tolist() + [int(nxt[b])]
        for b, s in enumerate(seqs):
            ctx = head.context_states(_features(target, torch.tensor([s[:-1]]), drafter.feature_layer_ids))
            want = head.context_kv(ctx, torch.arange(len(s) - 1)[None])
            for layer, (k, v) in zip(drafter.cache.layers, want):
                keys, values, valid = layer.contents()
                keep = slice(None) if valid is None else valid[b]
                got_k, got_v = keys[b][:, keep], values[b][:, keep]
                same = got_k.shape == k[0].shape and torch.allclose(got_k, k[0], atol=1e-5) and \
                    torch.allclose(got_v, v[0], atol=1e-5)
                if over_append:
                    if not same:
                        return
                    continue
                assert same, f"row {b}: cache differs from the recompute over its committed prefix"
    assert not over_append, "the control appended unaccepted positions and still matched the recompute"
