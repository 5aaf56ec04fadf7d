"""The generation loop on real (tiny, seeded) models: greedy identity, cache invariants, stopping."""

import pytest
import torch

from eaglehead.decode import (DraftModelDrafter, PromptLookupDrafter, SamplingConfig, speculative_generate,
                              vanilla_generate)
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.sampling import probs
from eaglehead.decode.verify import verify_chain
from tests.tiny_models import tiny_gpt2, tiny_llama, tiny_qwen2

GREEDY = SamplingConfig(temperature=0)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=3)


@pytest.fixture(scope="module")
def draft_lm():
    return tiny_llama(seed=1, layers=1)


def _batch(seed=0, bsz=3, length=10, vocab=64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (bsz, length), generator=g)
    x[:, length // 2:] = x[:, : length - length // 2]  # repeated spans give prompt lookup something to match
    mask = torch.ones_like(x)
    for b in range(1, bsz):
        mask[b, : 2 * b] = 0  # left padding of different widths
    return x, mask


class ScriptedDrafter:
    """Proposes fixed tokens with one-hot q: lets a test force where the first rejection falls."""

    feature_layer_ids = None

    def __init__(self, vocab, script):
        self.vocab_size = vocab
        self.script = script  # callable(round_index) -> LongTensor [B, gamma]
        self.round = 0

    def begin(self, input_ids, valid, target_features=None):
        pass

    def propose(self, gamma, sampling, generator=None):
        d = self.script(self.round)[:, :gamma]
        self.round += 1
        return d, torch.nn.functional.one_hot(d, self.vocab_size).float()

    def commit(self, n_accepted, draft, next_token, target_features=None):
        pass


@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("bsz", [1, 3])
def test_greedy_speculative_equals_vanilla(target, draft_lm, gamma, bsz):
    x, mask = _batch(seed=gamma, bsz=bsz)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=24, attention_mask=mask).tokens
    for drafter in (DraftModelDrafter(draft_lm), PromptLookupDrafter(64)):
        out = speculative_generate(target, drafter, x, gamma=gamma, sampling=GREEDY, max_new_tokens=24,
                                   attention_mask=mask)
        assert out.tokens == ref, type(drafter).__name__
        assert all(len(t) == 24 for t in out.tokens)


@pytest.mark.parametrize("make", [tiny_qwen2, tiny_gpt2])
def test_greedy_identity_other_architectures(make):
    target, draft = make(seed=0, layers=2), make(seed=3, layers=1)
    x, mask = _batch(seed=1, bsz=2)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=16, attention_mask=mask).tokens
    out = speculative_generate(target, DraftModelDrafter(draft), x, gamma=3, sampling=GREEDY, max_new_tokens=16,
                               attention_mask=mask)
    assert out.tokens == ref


def test_padded_batch_rows_equal_unpadded_single_rows(target):
    x, mask = _batch(seed=5, bsz=3)
    batched = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=12, attention_mask=mask).tokens
    for b in range(3):
        single = vanilla_generate(target, x[b:b + 1, mask[b].bool()], sampling=GREEDY, max_new_tokens=12).tokens[0]
        assert batched[b] == single


def test_oracle_drafter_accepted_every_round(target):
    x, _ = _batch(seed=2, bsz=1)
    for gamma in (1, 3, 5):
        out = speculative_generate(target, DraftModelDrafter(target), x, gamma=gamma, sampling=GREEDY,
                                   max_new_tokens=6 * (gamma + 1))
        assert len(out.rounds) == 6
        assert all(r.accepted == [gamma] and r.committed == [gamma + 1] for r in out.rounds)


def test_verification_rows_match_token_by_token(target):
    """Row r of one call over [last, d_1..d_g] equals decoding the same tokens one at a time."""
    x, mask = _batch(seed=3, bsz=3)
    block = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(9))
    full = RaggedCacheLM(target)
    full.reset(3)
    full.forward(x, mask.bool())
    parallel = full.forward(block).logits
    step = RaggedCacheLM(target)
    step.reset(3)
    step.forward(x, mask.bool())
    rows = torch.cat([step.forward(block[:, i:i + 1]).logits for i in range(6)], dim=1)
    # float32; the only difference is summation order inside attention/matmul kernels.
    torch.testing.assert_close(parallel, rows, atol=1e-5, rtol=1e-5)


def _cache_rows(runner):
    """Per row, the valid cached keys/values of every layer: list over rows of list over layers."""
    out = []
    for b in range(runner.valid.shape[0]):
        sel = runner.valid[b]
        out.append([(layer.keys[b][:, sel], layer.values[b][:, sel]) for layer in runner.cache.layers])
    return out


def _assert_cache_equals_recompute(model, runner, committed_rows):
    """The cache must equal a from-scratch forward over each row's committed tokens but the last."""
    got = _cache_rows(runner)
    for b, toks in enumerate(committed_rows):
        fresh = RaggedCacheLM(model)
        fresh.reset(1)
        fresh.forward(torch.tensor([toks[:-1]]))
        assert int(runner.lengths[b]) == len(toks) - 1
        for (k, v), (k2, v2) in zip(got[b], _cache_rows(fresh)[0]):
            torch.testing.assert_close(k, k2, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(v, v2, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reject_at", [[0, 0, 0], [2, 4, 0], [5, 5, 5], [0, 3, 5]])
def test_forced_rejection_crops_target_and_draft_caches_exactly(target, draft_lm, reject_at):
    """reject_at[b] = index of the first wrong draft in row b (5 = gamma: full acceptance)."""
    gamma = 5
    x, mask = _batch(seed=4, bsz=3)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=gamma + 1, attention_mask=mask).tokens
    truth = torch.tensor(ref)[:, :gamma]
    forced = truth.clone()
    for b, k in enumerate(reject_at):
        if k < gamma:
            forced[b, k] = (truth[b, k] + 1) % 64  # a token greedy decoding would not pick
    drafter = ScriptedDrafter(64, lambda r: forced)

    out = speculative_generate(target, drafter, x, gamma=gamma, sampling=GREEDY, max_new_tokens=gamma + 1,
                               attention_mask=mask)
    assert out.rounds[0].accepted == reject_at
    assert out.rounds[0].committed == [k + 1 for k in reject_at]
    assert out.tokens == ref  # greedy: the correction token is the target's argmax

    # Drive one round by hand through the pieces the loop uses and inspect the target cache.
    runner = RaggedCacheLM(target)
    runner.reset(3)
    runner.forward(x[:, :-1], mask[:, :-1].bool())
    logits = runner.forward(torch.cat([x[:, -1:], forced], 1)).logits
    n_acc, y = verify_chain(probs(logits, GREEDY), torch.nn.functional.one_hot(forced, 64).float(), forced)
    assert n_acc.tolist() == reject_at
    runner.keep_recent(gamma + 1, [a + 1 for a in reject_at])
    prompts = [x[b, mask[b].bool()].tolist() for b in range(3)]
    committed = [prompts[b] + forced[b, :a].tolist() + [int(y[b])] for b, a in enumerate(reject_at)]
    _assert_cache_equals_recompute(target, runner, committed)

    # The draft LM: synchronise after the same acceptance pattern over its own proposals; its cache
    # must equal a recomputation over the committed tokens that are not pending.
    lm = DraftModelDrafter(draft_lm)
    lm.begin(x, mask.bool())
    lm_draft, _ = lm.propose(gamma, GREEDY)
    lm.commit(reject_at, lm_draft, y)
    for b, a in enumerate(reject_at):
        seq = prompts[b] + lm_draft[b, :a].tolist() + [int(y[b])]
        pending = lm._pending[b][lm._pending_valid[b]].tolist()
        assert len(pending) == (2 if a == gamma else 1)  # d_gamma was sampled but never fed
        assert seq[len(seq) - len(pending):] == pending
        fresh = RaggedCacheLM(draft_lm)
        fresh.reset(1)
        fresh.forward(torch.tensor([seq[: len(seq) - len(pending)]]))
        sel = lm.runner.valid[b]
        assert int(lm.runner.lengths[b]) == len(seq) - len(pending)
        for layer, ref_layer in zip(lm.runner.cache.layers, fresh.cache.layers):
            torch.testing.assert_close(layer.keys[b][:, sel], ref_layer.keys[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(layer.values[b][:, sel], ref_layer.values[0], atol=1e-5, rtol=1e-5)


class RecordingDrafter(DraftModelDrafter):
    """Records every commit so a test knows the full committed sequence the drafter was told."""

    def begin(self, input_ids, valid, target_features=None):
        super().begin(input_ids, valid, target_features)
        self.seen = [input_ids[b, valid[b]].tolist() for b in range(input_ids.shape[0])]

    def commit(self, n_accepted, draft, next_token, target_features=None):
        super().commit(n_accepted, draft, next_token, target_features)
        for b, a in enumerate(n_accepted):
            self.seen[b] += draft[b, :a].tolist() + [int(next_token[b])]


def test_draft_lm_cache_synchronised_after_generation(target, draft_lm):
    """After a whole sampled run the draft cache + pending tokens equal the committed sequence."""
    x, mask = _batch(seed=6, bsz=3)
    lm = RecordingDrafter(draft_lm)
    out = speculative_generate(target, lm, x, gamma=4, sampling=SamplingConfig(temperature=1.0), max_new_tokens=40,
                               attention_mask=mask, generator=torch.Generator().manual_seed(0))
    assert len(out.rounds) > 5
    assert any(a == 4 for r in out.rounds for a in r.accepted) and any(a < 4 for r in out.rounds for a in r.accepted)
    for b in range(3):
        seq = lm.seen[b]
        assert seq[: mask[b].sum() + len(out.tokens[b])] == x[b, mask[b].bool()].tolist() + out.tokens[b]
        pending = lm._pending[b][lm._pending_valid[b]].tolist()
        cached = len(seq) - len(pending)
        assert seq[cached:] == pending
        assert int(lm.runner.lengths[b]) == cached
        fresh = RaggedCacheLM(draft_lm)
        fresh.reset(1)
        fresh.forward(torch.tensor([seq[:cached]]))
        sel = lm.runner.valid[b]
        for layer, ref in zip(lm.runner.cache.layers, fresh.cache.layers):
            torch.testing.assert_close(layer.keys[b][:, sel], ref.keys[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(layer.values[b][:, sel], ref.values[0], atol=1e-5, rtol=1e-5)


def test_eos_inside_accepted_run_ends_row(target):
    x, _ = _batch(seed=7, bsz=1)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=20).tokens[0]
    eos = ref[4]
    cut = ref[: ref.index(eos) + 1]
    van = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=20, eos_token_id=eos)
    assert van.tokens[0] == cut and van.finished_by_eos == [True]
    # The oracle accepts everything, so EOS falls inside an accepted run of 6.
    spec = speculative_generate(target, DraftModelDrafter(target), x, gamma=5, sampling=GREEDY, max_new_tokens=20,
                                eos_token_id=[eos, 63 if eos != 63 else 62])
    assert spec.tokens[0] == cut
    assert spec.rounds[-1].committed[0] == len(cut) - 6 * (len(spec.rounds) - 1)


def test_max_new_tokens_never_exceeded_mid_round(target):
    x, mask = _batch(seed=8, bsz=3)
    for n in (1, 2, 7, 11):
        out = speculative_generate(target, DraftModelDrafter(target), x, gamma=5, sampling=GREEDY, max_new_tokens=n,
                                   attention_mask=mask)
        assert [len(t) for t in out.tokens] == [n] * 3
        assert all(r.gamma <= 5 for r in out.rounds)


def test_streaming_callback_and_records(target, draft_lm):
    x, mask = _batch(seed=9, bsz=2)
    seen = []
    out = speculative_generate(target, DraftModelDrafter(draft_lm), x, gamma=3, sampling=GREEDY, max_new_tokens=10,
                               attention_mask=mask, on_token=lambda b, t, ts: seen.append((b, t, ts)))
    for b in range(2):
        assert [t for r, t, _ in seen if r == b] == out.tokens[b]
        assert [ts for r, _, ts in seen if r == b] == out.token_times[b]
    assert sum(sum(r.committed) for r in out.rounds) == 20
    for r in out.rounds:
        assert min(r.t_draft, r.t_verify, r.t_rest) >= 0
        assert all(c <= a + 1 for a, c in zip(r.accepted, r.committed))
    assert out.t_start <= min(min(t) for t in out.token_times) <= out.t_end


def test_bad_input_errors_name_the_parameter(target, draft_lm):
    x, _ = _batch(bsz=1)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, DraftModelDrafter(draft_lm), x, gamma=0, sampling=GREEDY, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError, match="vocabulary size 65"):
        speculative_generate(target, PromptLookupDrafter(65), x, gamma=2, sampling=GREEDY, max_new_tokens=4)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        vanilla_generate(target, torch.zeros(1, 250, dtype=torch.long), sampling=GREEDY, max_new_tokens=10)
    with pytest.raises(ValueError, match="max_new_tokens"):
        vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=0)
    with pytest.raises(ValueError, match="left-padded"):
        vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=2, attention_mask=torch.tensor([[1] * 9 + [0]]))
    broken = tiny_llama(seed=0)
    with torch.no_grad():
        broken.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        vanilla_generate(broken, x, sampling=GREEDY, max_new_tokens=2)


def test_vanilla_prefills_the_whole_prompt_and_keeps_batch_one_hole_free(target):
    """Vanilla's first token comes from one prefill call over the whole prompt (as HF's generate), the
    rest from one-token rounds; at batch 1 the cache never materialises a mask."""
    x = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(4))
    out = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=7)
    assert out.prefill_tokens == 1 and len(out.rounds) == 6 and sum(sum(r.committed) for r in out.rounds) == 6
    with torch.no_grad():  # the reference: full forwards, argmax of the last position
        seq = x
        for _ in range(7):
            seq = torch.cat([seq, target(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tokens[0] == seq[0, 9:].tolist()
    assert vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=1).rounds == []
    runner = RaggedCacheLM(target)
    runner.reset(1)
    runner.forward(x, torch.ones_like(x, dtype=torch.bool))
    runner.forward(x[:, :3])
    runner.keep_recent(3, [1])
    assert runner._valid is None and runner.lengths.tolist() == [10] and runner.physical_length == 10
