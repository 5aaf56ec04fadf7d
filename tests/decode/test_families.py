"""Exact decoding on every attention layout of ``tests.families``: full, sliding by position, alternating, sinks.

For every family (and eager/sdpa on the sliding ones): greedy chain (gamma 3) and tree decoding equal vanilla
decoding, and vanilla equals the no-cache reference (one full forward of the model over the whole sequence:
transformers' own sliding-window semantics), for ``3 * WINDOW`` new tokens, at batch 1 and in a ragged batch
of 2 (rows of different prompt lengths; oracle drafters with planted errors make the rows accept different
counts, so the cache has holes). Cache rollback after first-position rejection, middle rejection and full
acceptance gives the next logits of a fresh forward (float32, atol 1e-4: one-pass vs incremental attention
sums over <= 60 keys). Negative controls: a sliding mask by cache slot, or no window on the sliding layers,
breaks that equality. Flash attention (and sdpa on GPT-OSS, which would drop its sinks) is refused by name.
The same checks run on builtin.attention's kernel (one family per mask layout) twice: its grouped path forced in
float32 and counted, so decode steps, chain verifications and trees are shown to go through it; and as a float32
target runs it, where every masked call of several queries takes SDPA with enable_gqa (counted the same way).

Run: ``python -m pytest tests/decode/test_families.py -q --durations=5``
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from eaglehead.builtin import attention
from eaglehead.builtin.attention import NAME as FEW_QUERY
from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode import cache as cache_module
from eaglehead.decode import tree_target as tree_target_module
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.decode.tree import DraftTree
from eaglehead.decode.tree_draft import EagleTreeDrafter
from eaglehead.decode.tree_generate import tree_generate
from eaglehead.decode.tree_target import TreeCacheLM
from tests.families import FAMILIES, SLIDING_FAMILIES, VOCAB, WINDOW, tiny_family

from .test_eagle_drafter import make_head
from .test_tree_generate import OracleTreeDrafter

GREEDY = SamplingConfig(temperature=0)
NEW = 3 * WINDOW  # new tokens: the window binds for most of the answer
TOL = dict(atol=1e-4, rtol=1e-4)
# The other implementation of the sliding families; Gemma 2 and GPT-OSS are eager-only in transformers 5.25
# (``_supports_sdpa = False``: softcapping, sinks), the default of the others is sdpa.
OTHER_IMPL = {"gemma3": "eager", "mistral": "eager", "qwen2-sliding": "eager"}
# builtin.attention's few-query kernel (what a half-precision target on a CPU runs), forced in float32 so the
# tolerances stay tight, on one family per mask layout: one tensor (llama), one sliding tensor (mistral), the
# per-type dict (gemma3, qwen2-sliding).
FEW_QUERY_FAMILIES = ("llama", "mistral", "gemma3", "qwen2-sliding")
# The same kernel as a float32 target runs it: its enable_gqa path (masked calls of several queries).
GQA = "eaglehead_few_query_sdpa (float32: enable_gqa)"
CASES = ([(f, None) for f in FAMILIES] + [(f, i) for f, i in OTHER_IMPL.items()]
         + [(f, FEW_QUERY) for f in FEW_QUERY_FAMILIES] + [(f, GQA) for f in FEW_QUERY_FAMILIES])


def _model(family: str, impl: str | None, seed: int = 0):
    if impl in (FEW_QUERY, GQA):
        attention.register()
        model = tiny_family(family, seed)
        model.set_attn_implementation(FEW_QUERY)
        return model
    return tiny_family(family, seed, **({"attn_implementation": impl} if impl else {}))


@pytest.fixture
def grouped_calls(monkeypatch):
    """The few-query kernel's grouped path taken in float32 too (it serves half precision), and a count of its
    calls: a case that never reached it would pass on SDPA alone."""
    monkeypatch.setattr(attention, "DTYPES", attention.DTYPES + (torch.float32,))
    real, seen = attention.grouped_attention, []

    def counted(*args, **kwargs):
        seen.append(args[0].shape[2])  # queries per call
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "grouped_attention", counted)
    return seen


@pytest.fixture
def gqa_calls(monkeypatch):
    """Queries per call of the kernel's enable_gqa path (float32 as it comes: the grouped path serves half
    precision only)."""
    real, seen = attention.gqa_sdpa, []

    def counted(*args, **kwargs):
        seen.append(args[0].shape[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "gqa_sdpa", counted)
    return seen


def _prompts():
    """Two prompts of lengths 10 and 6, and their left-padded batch ``[2, 10]`` with its mask."""
    g = torch.Generator().manual_seed(7)
    rows = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (10, 6)]
    x = torch.tensor([rows[0], [0] * 4 + rows[1]])
    mask = torch.tensor([[1] * 10, [0] * 4 + [1] * 6])
    return rows, x, mask


class OracleChainDrafter:
    """Proposes each row's known greedy continuation with one wrong token at a depth that cycles over rounds
    and rows (0 = first-position rejection, ..., gamma = full acceptance): rows accept different counts."""

    feature_layer_ids = None

    def __init__(self, truth: list[list[int]]):
        self.truth, self.vocab_size, self.round = truth, VOCAB, 0

    def begin(self, input_ids, valid, target_features=None):
        self.done = [0] * input_ids.shape[0]

    def propose(self, gamma, sampling, generator=None):
        rows = []
        for b, c in enumerate(self.done):
            d = (self.truth[b][c:c + gamma] + [0] * gamma)[:gamma]
            k = (self.round + b) % (gamma + 1)
            if k < gamma:
                d[k] = (d[k] + 1) % VOCAB
            rows.append(d)
        self.round += 1
        d = torch.tensor(rows, dtype=torch.long)
        return d, torch.nn.functional.one_hot(d, VOCAB).float()

    def commit(self, n_accepted, draft, next_token, target_features=None):
        self.done = [c + a + 1 for c, a in zip(self.done, n_accepted)]


@pytest.mark.parametrize("family,impl", CASES)
def test_greedy_chain_and_tree_equal_vanilla_and_the_no_cache_reference(family, impl, request):
    seen = request.getfixturevalue({FEW_QUERY: "grouped_calls", GQA: "gqa_calls"}[impl]) \
        if impl in (FEW_QUERY, GQA) else None
    model = _model(family, impl)
    rows, x, mask = _prompts()
    truth = []
    for row in rows:  # batch-1 references: vanilla, checked against one full forward of the whole sequence
        van = vanilla_generate(model, torch.tensor([row]), sampling=GREEDY, max_new_tokens=NEW).tokens[0]
        full = torch.tensor([row + van])
        with torch.no_grad():
            assert model(full).logits[0, len(row) - 1:-1].argmax(-1).tolist() == van
        truth.append(van)
    head = make_head(model, rope_scaling=None)  # an untrained head: greedy identity holds whatever its quality
    one = torch.tensor([rows[0]])
    assert speculative_generate(model, Eagle3Drafter(head, model), one, gamma=3, sampling=GREEDY,
                                max_new_tokens=NEW).tokens == truth[:1]
    assert tree_generate(model, EagleTreeDrafter(head, model), one, depth=3, topk=4, tokens=8, sampling=GREEDY,
                         max_new_tokens=NEW).tokens == truth[:1]
    # Ragged batch 2: rows differ in prompt length and in accepted counts (holes in the cache).
    chain = speculative_generate(model, OracleChainDrafter(truth), x, gamma=3, sampling=GREEDY, max_new_tokens=NEW,
                                 attention_mask=mask)
    assert chain.tokens == truth
    assert {tuple(r.accepted) for r in chain.rounds} >= {(0, 1), (1, 2), (3, 0)}
    tree = tree_generate(model, OracleTreeDrafter(model), x, depth=3, topk=2, tokens=8, sampling=GREEDY,
                         max_new_tokens=NEW, attention_mask=mask)
    assert tree.tokens == truth
    assert len({a for r in tree.rounds for a in r.accepted}) >= 3  # rows accept different depths
    assert speculative_generate(model, Eagle3Drafter(head, model), x, gamma=3, sampling=GREEDY, max_new_tokens=NEW,
                                attention_mask=mask).tokens == truth
    if impl == FEW_QUERY:  # decode steps (1 query), chain verifications (4) and trees (9) ran the grouped path
        assert {1, 4, 9} <= set(seen), sorted(set(seen))
    if impl == GQA:  # the padded prefill and the trees (9 queries), chain verifications (4) ran SDPA on the kv heads
        assert {4, 9} <= set(seen) and 1 not in seen, sorted(set(seen))


def _fresh_next_logits(model, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1]


def _drive_rounds(model, layout=None) -> float:
    """Chain and tree rounds with forced acceptance patterns on a ragged batch of 2, far past the window;
    after each, the next logits of each row are compared with a fresh forward. Returns the largest |diff|."""
    rows, x, mask = _prompts()
    runner = TreeCacheLM(model)
    if layout is not None:
        runner.layout = layout
    runner.reset(2)
    runner.forward(x[:, :-1], mask[:, :-1].bool())
    seqs, last = [r[:-1] for r in rows], x[:, -1]  # the last prompt token is pending
    g, worst = torch.Generator().manual_seed(3), 0.0
    patterns = [[0, 3], [1, 0], [3, 2], [2, 3], [0, 1], [3, 3], [1, 2], [2, 0]] * 2  # 0 = first rejected, 3 = all
    for r, keep in enumerate(patterns):
        drafts = torch.randint(3, VOCAB, (2, 3), generator=g)
        if r % 2 == 0:  # a chain round over [last, d1..d3], rows keep [last] + their first keep[b] drafts
            out = runner.forward(torch.cat([last[:, None], drafts], 1))
            runner.keep_recent(4, [k + 1 for k in keep])
            logit_rows = [out.logits[b, k] for b, k in enumerate(keep)]
        else:  # a tree round: two chains of depth 3 under the root; rows keep a prefix of the second chain
            tree = DraftTree(torch.cat([drafts.flip(1), drafts], 1), torch.tensor([[-1, 0, 1, -1, 3, 4]] * 2),
                             torch.tensor([[1, 2, 3, 1, 2, 3]] * 2), 3)
            out = runner.forward_tree(last, tree)
            path = torch.tensor([[3, 4, 5]] * 2)
            runner.keep_path(torch.where(torch.arange(3)[None] < torch.tensor(keep)[:, None], path, -1), keep)
            logit_rows = [out.logits[b, 0 if k == 0 else 3 + k] for b, k in enumerate(keep)]  # row of node 3+k-1
        nxt = torch.stack([row.argmax() for row in logit_rows])  # the committed correction token
        for b, k in enumerate(keep):
            seqs[b] += [int(last[b])] + drafts[b, :k].tolist()
        last = nxt
        got = runner.forward(last[:, None]).logits[:, -1]  # feeds y: the next round then starts from a fresh token
        for b in range(2):
            seqs[b].append(int(last[b]))
            worst = max(worst, float((got[b] - _fresh_next_logits(model, seqs[b])).abs().max()))
        last = got.argmax(-1)
    assert min(len(s) for s in seqs) > 3 * WINDOW
    return worst


@pytest.mark.parametrize("family", SLIDING_FAMILIES + ("llama", "phi3"))
def test_rollback_equals_a_recompute_past_the_window(family):
    assert _drive_rounds(tiny_family(family, seed=1)) < TOL["atol"]


@pytest.mark.parametrize("family", ("mistral", "gemma3"))
def test_rollback_equals_a_recompute_on_the_few_query_kernel(family, grouped_calls):
    assert _drive_rounds(_model(family, FEW_QUERY, seed=1)) < TOL["atol"]
    assert {1, 4, 7} <= set(grouped_calls)  # steps, chain rounds and tree rounds (root + 6 nodes)


@pytest.mark.parametrize("family", ("mistral", "gemma3"))
def test_rollback_equals_a_recompute_on_the_gqa_path(family, gqa_calls):
    assert _drive_rounds(_model(family, GQA, seed=1)) < TOL["atol"]
    assert {4, 7} <= set(gqa_calls) and 1 not in gqa_calls  # chain and tree rounds; one query stays with SDPA


@pytest.mark.parametrize("family", FAMILIES)
def test_a_padded_prefill_by_row_equals_the_masked_batch(family, monkeypatch):
    """A left-padded prompt block fed one row at a time (RaggedCacheLM._prefill_by_row, taken here from 2 tokens
    up) leaves the same cache state as the masked batched call: the same validity and lengths, logits and tapped
    features at every real position, and the logits of the steps and verifications that follow (atol 1e-4); the
    ragged greedy chain on it equals batch-1 vanilla decoding."""
    model = tiny_family(family)
    rows, x, mask = _prompts()
    taken = []
    real = RaggedCacheLM._prefill_by_row
    monkeypatch.setattr(RaggedCacheLM, "_prefill_by_row", lambda self, *a: taken.append(1) or real(self, *a))

    def run(by_row: bool):
        monkeypatch.setattr(cache_module, "BY_ROW_MIN_TOKENS", 2 if by_row else 10 ** 9)
        runner = RaggedCacheLM(model, [1, 3])
        runner.reset(2)
        outs = [runner.forward(x[:, :-1], mask[:, :-1].bool(), want_features=True)]
        g = torch.Generator().manual_seed(5)
        for t in (1, 4, 1, 4):
            outs.append(runner.forward(torch.randint(3, VOCAB, (2, t), generator=g)))
            if t == 4:
                runner.keep_recent(4, [2, 4])  # rows keep different counts: holes after the padding
        return runner, outs

    (a, by_row), (b, batched) = run(True), run(False)
    assert len(taken) == 1
    assert a.physical_length == b.physical_length and torch.equal(a.valid, b.valid)
    assert torch.equal(a.lengths, b.lengths)
    real_rows = mask[:, :-1].bool()
    torch.testing.assert_close(by_row[0].logits[real_rows], batched[0].logits[real_rows], **TOL)
    torch.testing.assert_close(by_row[0].features[real_rows], batched[0].features[real_rows], **TOL)
    for got, want in zip(by_row[1:], batched[1:]):
        torch.testing.assert_close(got.logits, want.logits, **TOL)
    monkeypatch.setattr(cache_module, "BY_ROW_MIN_TOKENS", 2)
    truth = [vanilla_generate(model, torch.tensor([r]), sampling=GREEDY, max_new_tokens=NEW).tokens[0] for r in rows]
    chain = speculative_generate(model, OracleChainDrafter(truth), x, gamma=3, sampling=GREEDY, max_new_tokens=NEW,
                                 attention_mask=mask)
    assert chain.tokens == truth and len(taken) == 2


def test_negative_controls_slot_positions_or_no_window_diverge(monkeypatch):
    model = tiny_family("gemma3", seed=1)
    no_window = dataclasses.replace(RaggedCacheLM(model).layout, window=10 ** 6)
    assert _drive_rounds(model, layout=no_window) > 1e-2  # full masks on sliding layers see too far
    by_slot = lambda valid: torch.arange(valid.shape[1]).expand_as(valid)  # noqa: E731
    monkeypatch.setattr(cache_module, "slot_positions", by_slot)
    monkeypatch.setattr(tree_target_module, "slot_positions", by_slot)
    assert _drive_rounds(model) > 1e-2  # the window by cache slot instead of position: wrong once there are holes


def test_attention_that_cannot_take_a_4d_mask_is_refused_by_name():
    for family in ("gemma3", "mistral"):
        model = tiny_family(family)
        model.config._attn_implementation_internal = "flash_attention_2"
        assert model.config._attn_implementation == "flash_attention_2"
        x = torch.tensor([[5, 6, 7]])
        with pytest.raises(ValueError, match="flash_attention_2"):
            speculative_generate(model, OracleChainDrafter([[0] * 8]), x, gamma=3, sampling=GREEDY, max_new_tokens=4)
        with pytest.raises(ValueError, match="flash_attention_2"):
            TreeCacheLM(model)
    llama = tiny_family("llama")
    llama.config._attn_implementation_internal = "flash_attention_2"
    with pytest.raises(ValueError, match="flash_attention_2.*tree verification"):
        TreeCacheLM(llama)
    sinks = tiny_family("gpt-oss")  # transformers refuses sdpa at load; a config switched later is refused here
    sinks.config._attn_implementation_internal = "sdpa"
    with pytest.raises(ValueError, match="'sdpa' is not supported by GptOssForCausalLM"):
        RaggedCacheLM(sinks)
