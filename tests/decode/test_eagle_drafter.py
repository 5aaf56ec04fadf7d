"""The EAGLE-3 head as a drafter: greedy identity, and draft-state synchronisation without target passes."""

import pytest
import torch

from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.eagle import Eagle3Drafter, load_eagle_drafter
from eaglehead.draftheads.checkpoint import save_pretrained
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle1 import Eagle1Head
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.vocab import build_draft_vocab
from tests.tiny_models import tiny_llama, tiny_qwen2

GREEDY = SamplingConfig(temperature=0)


def make_head(target, draft_vocab=40, seed=3, **overrides):
    cfg = Eagle3Config.from_target_config(target.config, draft_vocab_size=draft_vocab, **overrides)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg).eval()
    counts = torch.randint(0, 100, (target.config.vocab_size,), generator=torch.Generator().manual_seed(seed))
    head.set_vocab(*build_draft_vocab(counts, draft_vocab))
    return head


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=4)


def _batch(bsz):
    x = torch.randint(0, 64, (bsz, 10), generator=torch.Generator().manual_seed(bsz))
    mask = torch.ones_like(x)
    for b in range(1, bsz):
        mask[b, : 2 * b + 1] = 0
    return x, mask


@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("bsz", [1, 3])
def test_greedy_eagle3_equals_vanilla(target, gamma, bsz):
    x, mask = _batch(bsz)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=16, attention_mask=mask).tokens
    out = speculative_generate(target, Eagle3Drafter(make_head(target), target), x, gamma=gamma, sampling=GREEDY,
                               max_new_tokens=16, attention_mask=mask)
    assert out.tokens == ref


def test_greedy_eagle1_and_qwen_target():
    for target in (tiny_llama(seed=1, layers=3), tiny_qwen2(seed=2, layers=4)):
        head = Eagle1Head(Eagle1Head.config_from_target(target.config))
        x, mask = _batch(2)
        ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=12, attention_mask=mask).tokens
        out = speculative_generate(target, Eagle3Drafter(head, target), x, gamma=4, sampling=GREEDY,
                                   max_new_tokens=12, attention_mask=mask)
        assert out.tokens == ref


class Recording(Eagle3Drafter):
    def begin(self, input_ids, valid, target_features):
        super().begin(input_ids, valid, target_features)
        self.seen = [input_ids[b, valid[b]].tolist() for b in range(input_ids.shape[0])]

    def commit(self, n_accepted, draft, next_token, target_features):
        super().commit(n_accepted, draft, next_token, target_features)
        for b, a in enumerate(n_accepted):
            self.seen[b] += draft[b, :a].tolist() + [int(next_token[b])]


def _fresh_first_q(target, head, seq, sampling):
    """The first-step proposal of a drafter begun from scratch on ``seq`` (target features recomputed)."""
    runner = RaggedCacheLM(target, list(head.config.fused_layer_ids))
    runner.reset(1)
    ids = torch.tensor([seq])
    feats = runner.forward(ids[:, :-1], want_features=True).features
    fresh = Eagle3Drafter(head, target)
    fresh.begin(ids, torch.ones_like(ids, dtype=torch.bool), feats)
    return fresh.propose(1, sampling)[1][0, 0]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_draft_state_after_rounds_equals_fresh_start(target, gamma):
    """After sampled rounds with mixed acceptance, the drafter's next proposal distribution equals that
    of a drafter rebuilt from the committed sequence: the verification features were reused exactly."""
    sampling = SamplingConfig(temperature=1.0, top_k=20)
    head = make_head(target, draft_vocab=64)
    x, mask = _batch(3)
    drafter = Recording(head, target)
    out = speculative_generate(target, drafter, x, gamma=gamma, sampling=sampling, max_new_tokens=14,
                               attention_mask=mask, generator=torch.Generator().manual_seed(7))
    accepted = [a for r in out.rounds for a in r.accepted]
    assert len(set(accepted)) > 1 or gamma == 1
    q_next = drafter.propose(1, sampling)[1][:, 0]  # [B, V]
    for b in range(3):
        # float32; features from a batched vs a single-row target pass differ only in summation order.
        torch.testing.assert_close(q_next[b], _fresh_first_q(target, head, drafter.seen[b], sampling),
                                   atol=1e-5, rtol=1e-4)


def test_q_is_zero_outside_draft_vocab_and_sums_to_one(target):
    head = make_head(target, draft_vocab=16)
    x, _ = _batch(1)
    runner = RaggedCacheLM(target, list(head.config.fused_layer_ids))
    runner.reset(1)
    feats = runner.forward(x[:, :-1], want_features=True).features
    d = Eagle3Drafter(head, target)
    d.begin(x, torch.ones_like(x, dtype=torch.bool), feats)
    draft, q = d.propose(4, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert q.shape == (1, 4, 64)
    torch.testing.assert_close(q.sum(-1), torch.ones(1, 4))
    assert float(q[..., ~head.t2d].abs().sum()) == 0.0
    assert bool(head.t2d[draft].all())


def test_load_drafter_from_checkpoint_and_refuse_other_target(target, tmp_path):
    head = make_head(target)
    save_pretrained(head, tmp_path / "head")
    drafter = load_eagle_drafter(str(tmp_path / "head"), target)
    x, _ = _batch(1)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=8).tokens
    assert speculative_generate(target, drafter, x, gamma=3, sampling=GREEDY, max_new_tokens=8).tokens == ref
    other = tiny_llama(seed=0, layers=4, hidden=48)
    with pytest.raises(ValueError, match="target_hidden_size"):
        load_eagle_drafter(str(tmp_path / "head"), other)


@pytest.mark.parametrize("bsz", [1, 3])
def test_greedy_fast_path_equals_general_sampling_path(target, bsz):
    """Greedy drafting skips the sampling transform; temperature 1 with top_k=1 (the same point mass,
    through probs() and the exponential race) must give identical drafts and q at every depth."""
    head = make_head(target, draft_vocab=16)
    x, mask = _batch(bsz)
    runner = RaggedCacheLM(target, list(head.config.fused_layer_ids))
    runner.reset(bsz)
    feats = runner.forward(x[:, :-1], mask[:, :-1].bool(), want_features=True).features
    outs = []
    for sampling in (GREEDY, SamplingConfig(temperature=1.0, top_k=1)):
        d = Eagle3Drafter(head, target)
        d.begin(x, mask.bool(), feats)
        outs.append(d.propose(5, sampling, torch.Generator().manual_seed(0)))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(outs[0][1].argmax(-1), outs[0][0])


@pytest.mark.parametrize("final_tapped", [False, True])
def test_prefill_runs_the_lm_head_on_one_row_unless_the_head_taps_its_input(target, final_tapped):
    """The prompt's logits are never used (its last token is pending), so the prefill's LM head sees one row a
    sequence, while the features cover every prompt position; a drafter tapping layer id L (the LM head's input)
    gets every row through it, and its features are the same as from a full forward."""
    from eaglehead.decode.loop import prefill_pending

    layers = target.config.num_hidden_layers
    ids = [1, 2, layers] if final_tapped else [1, 2, 3]
    head = make_head(target, fused_layer_ids=ids)
    x, mask = _batch(2)
    rows = []
    hook = target.get_output_embeddings().register_forward_pre_hook(lambda m, a: rows.append(a[0].shape[1]))
    try:
        drafter = Eagle3Drafter(head, target)
        prefill_pending(RaggedCacheLM(target, ids), drafter, x, mask.bool())
    finally:
        hook.remove()
    assert rows == [x.shape[1] - 1 if final_tapped else 1]
    feats = drafter._pending[0]
    assert feats.shape == (2, x.shape[1] - 1, 3 * target.config.hidden_size)
    ref = RaggedCacheLM(target, ids)
    ref.reset(2)
    want = ref.forward(x[:, :-1], mask[:, :-1].bool(), want_features=True).features  # every row's logits
    torch.testing.assert_close(feats, want, atol=1e-6, rtol=0)
