"""``tree_generate`` on tiny seeded models: greedy identity with vanilla, drafter synchronisation, stopping.

Drafters: :class:`EagleTreeDrafter` with a random EAGLE-3 head (a poor drafter: mostly rejections, a
wide ``topk`` over the full vocabulary makes acceptances occur), and :class:`OracleTreeDrafter`,
a test drafter that knows the target's greedy continuation and hides it in a tree among wrong siblings,
with a wrong branch that repeats the right token under the wrong parent, and breaks the right path at a
depth that cycles over rows and rounds (first, middle, no rejection; different accepted depths per row).

Run: ``python -m pytest tests/decode/test_tree_generate.py -q``
"""

from __future__ import annotations

import pytest
import torch

from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.decode.tree import DraftTree, check_tree
from eaglehead.decode.tree_draft import EagleTreeDrafter
from eaglehead.decode.tree_generate import TreeRoundRecord, tree_generate
from tests.tiny_models import tiny_gpt2, tiny_llama, tiny_mistral, tiny_qwen2

from .test_eagle_drafter import make_head

GREEDY = SamplingConfig(temperature=0)
FAMILIES = {"llama": tiny_llama, "qwen2": tiny_qwen2, "mistral": tiny_mistral, "gpt2": tiny_gpt2}
SHAPES = [(1, 1, 1), (3, 2, 4), (4, 3, 10), (2, 8, 16), (5, 6, 40)]  # (depth, topk, tokens)


class OracleTreeDrafter:
    """Knows the target's greedy continuation ``g_1..g_D`` of the committed prefix (recomputed with full
    forwards) and builds, per row, ``2 + 3 (D - 1)`` nodes in breadth-first order: at every depth the
    *main* node (``g_d``, or a wrong token at the row's break depth) and a wrong *side* sibling (side first
    at odd depths, so a rejection precedes the acceptance), and below depth 1 a *ghost* child of the
    previous side node carrying ``g_d`` under the wrong parent (a leaky tree mask would accept it).
    The break depth cycles over rounds and rows."""

    feature_layer_ids = None

    def __init__(self, target, breaks: bool = True):
        self.target, self.breaks = target, breaks
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.n_trees = 0

    def begin(self, input_ids, valid, target_features=None):
        self.seqs = [input_ids[b, valid[b]].tolist() for b in range(input_ids.shape[0])]

    def commit(self, n_accepted, path_tokens, next_token, target_features=None):
        for b, a in enumerate(n_accepted):
            self.seqs[b] += path_tokens[b, :a].tolist() + [int(next_token[b])]

    @torch.no_grad()
    def _greedy(self, seq: list[int], depth: int) -> list[int]:
        out = []
        for _ in range(depth):
            out.append(int(self.target(torch.tensor([seq + out])).logits[0, -1].argmax()))
        return out

    def propose_tree(self, depth, topk, tokens, sampling=None, generator=None) -> DraftTree:
        v = self.vocab_size
        rows = []
        for b, seq in enumerate(self.seqs):
            # Break depth 1..depth, or depth + 1 = none: cycles over rounds and rows (never breaks if not
            # ``breaks``). The tree never depends on the verifier's draws, so any schedule is exact.
            brk = 1 + (self.n_trees + b) % (depth + 1) if self.breaks else depth + 1
            g = self._greedy(seq, depth)
            toks, pars, main_prev, side_prev = [], [], -1, -1
            for d in range(1, depth + 1):
                main = g[d - 1] if d != brk else (g[d - 1] + 2) % v
                pair = [((g[d - 1] + 1) % v, "side"), (main, "main")]
                for tok, kind in (pair if d % 2 else pair[::-1]):
                    toks.append(tok)
                    pars.append(main_prev)
                    if kind == "main":
                        main_idx = len(toks) - 1
                    else:
                        side_idx = len(toks) - 1
                if d > 1:
                    toks.append(g[d - 1])  # ghost: the right token under the wrong parent
                    pars.append(side_prev)
                main_prev, side_prev = main_idx, side_idx
            rows.append((toks, pars))
        depths = [1, 1] + [d for d in range(2, depth + 1) for _ in range(3)]
        dev = self.target.device
        self.n_trees += 1
        tree = DraftTree(torch.tensor([r[0] for r in rows], device=dev), torch.tensor([r[1] for r in rows], device=dev),
                         torch.tensor([depths] * len(rows), device=dev), depth)
        check_tree(tree)
        return tree


def _batch(bsz: int, vocab: int = 64):
    x = torch.randint(0, vocab, (bsz, 10), generator=torch.Generator().manual_seed(bsz))
    mask = torch.ones_like(x)
    for b in range(1, bsz):
        mask[b, : 2 * b + 1] = 0  # left padding of different widths
    return x, mask


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(seed=0, layers=4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("bsz", [1, 3])
def test_greedy_eagle_tree_equals_vanilla(family, bsz):
    """Random EAGLE-3 heads (draft vocabulary 40 and the full 64), five tree shapes, every family, batch 1
    and 3 (left padding)."""
    target = FAMILIES[family](seed=0, layers=3)
    x, mask = _batch(bsz)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=14, attention_mask=mask).tokens
    accepted = set()
    for depth, topk, tokens in SHAPES:
        for head in (make_head(target, draft_vocab=40), make_head(target, draft_vocab=64, seed=5)):
            out = tree_generate(target, EagleTreeDrafter(head, target), x, depth=depth, topk=topk, tokens=tokens,
                                sampling=GREEDY, max_new_tokens=14, attention_mask=mask)
            assert out.tokens == ref, (depth, topk, tokens, type(head).__name__)
            accepted.update(a for r in out.rounds for a in r.accepted)
    assert 0 in accepted and max(accepted) >= 1  # rejections and acceptances both occurred


@pytest.mark.parametrize("bsz", [1, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_oracle_tree_with_planted_errors_equals_vanilla(family, bsz):
    target = FAMILIES[family](seed=1, layers=2)
    x, mask = _batch(bsz)
    ref = vanilla_generate(target, x, sampling=GREEDY, max_new_tokens=20, attention_mask=mask).tokens
    drafter = OracleTreeDrafter(target)
    out = tree_generate(target, drafter, x, depth=4, topk=2, tokens=10, sampling=GREEDY, max_new_tokens=20,
                        attention_mask=mask)
    assert out.tokens == ref
    depths = [a for r in out.rounds[:-1] for a, act in zip(r.accepted, r.active) if act]
    assert {0, 4} <= set(depths) and len(set(depths)) >= 3  # first, middle and no rejection
    if bsz == 3:
        assert any(len(set(r.accepted)) > 1 for r in out.rounds)  # rows accepted different depths


def test_topk_one_tree_is_the_greedy_chain(llama):
    """``topk = 1``: the tree is a chain and equals :class:`Eagle3Drafter`'s greedy drafts, rows with padding."""
    head = make_head(llama, draft_vocab=40)
    x, mask = _batch(3)
    runner = RaggedCacheLM(llama, list(head.config.fused_layer_ids))
    runner.reset(3)
    feats = runner.forward(x[:, :-1], mask[:, :-1].bool(), want_features=True).features
    chain, tree = Eagle3Drafter(head, llama), EagleTreeDrafter(head, llama)
    chain.begin(x, mask.bool(), feats)
    tree.begin(x, mask.bool(), feats)
    drafts, _ = chain.propose(5, GREEDY)
    t = tree.propose_tree(5, 1, 5)
    assert torch.equal(t.tokens, drafts)
    assert t.parents.tolist() == [[-1, 0, 1, 2, 3]] * 3 and t.depths.tolist() == [[1, 2, 3, 4, 5]] * 3


def test_eagle_tree_layout_and_selection(llama):
    """Every proposed tree is a valid layout of ``min(tokens, topk + (depth-1) topk^2)`` nodes, siblings
    are distinct tokens, and a node's cumulative draft probability never exceeds its parent's."""
    head = make_head(llama, draft_vocab=40)
    x, mask = _batch(3)
    runner = RaggedCacheLM(llama, list(head.config.fused_layer_ids))
    runner.reset(3)
    feats = runner.forward(x[:, :-1], mask[:, :-1].bool(), want_features=True).features
    for depth, topk, tokens in [(1, 4, 3), (3, 3, 30), (4, 2, 9), (2, 5, 100)]:
        drafter = EagleTreeDrafter(head, llama)
        drafter.begin(x, mask.bool(), feats)
        tree = drafter.propose_tree(depth, topk, tokens)
        check_tree(tree)
        assert tree.n_nodes == min(tokens, topk + (depth - 1) * topk ** 2)
        for b in range(3):
            sib = {}
            for par, tok in zip(tree.parents[b].tolist(), tree.tokens[b].tolist()):
                assert tok not in sib.setdefault(par, set())
                sib[par].add(tok)
            assert all(len(s) <= topk for s in sib.values())
        assert bool(head.t2d[tree.tokens].all())  # only draft-vocabulary tokens are proposed


class Recording(EagleTreeDrafter):
    def begin(self, input_ids, valid, target_features):
        super().begin(input_ids, valid, target_features)
        self.seen = [input_ids[b, valid[b]].tolist() for b in range(input_ids.shape[0])]

    def commit(self, n_accepted, path_tokens, next_token, target_features):
        super().commit(n_accepted, path_tokens, next_token, target_features)
        for b, a in enumerate(n_accepted):
            self.seen[b] += path_tokens[b, :a].tolist() + [int(next_token[b])]


def test_draft_state_after_tree_rounds_equals_fresh_start(llama):
    """After sampled tree rounds with mixed accepted depths, the head's next root logits equal those of a
    drafter begun from scratch on the committed sequence: path features and positions were reused exactly."""
    sampling = SamplingConfig(temperature=1.0, top_k=3)  # concentrated target: a wide tree often hits it
    head = make_head(llama, draft_vocab=64)
    x, mask = _batch(3)
    drafter = Recording(head, llama)
    out = tree_generate(llama, drafter, x, depth=3, topk=10, tokens=30, sampling=sampling, max_new_tokens=20,
                        attention_mask=mask, generator=torch.Generator().manual_seed(7))
    assert len({a for r in out.rounds for a in r.accepted}) > 1
    assert out.rounds[-1].depth == 0  # a draft-free last round: its pending rows queue behind the older ones
    root = head.logits(drafter._feed_pending()[:, 0])  # [B, V]
    for b in range(3):
        seq = torch.tensor([drafter.seen[b]])
        runner = RaggedCacheLM(llama, list(head.config.fused_layer_ids))
        runner.reset(1)
        fresh = EagleTreeDrafter(head, llama)
        feats = runner.forward(seq[:, :-1], want_features=True).features
        fresh.begin(seq, torch.ones_like(seq, dtype=torch.bool), feats)
        # float32; batched vs single-row target features differ only in summation order.
        torch.testing.assert_close(root[b], head.logits(fresh._feed_pending()[0, 0]), atol=1e-4, rtol=1e-4)


def test_eos_inside_the_tree_ends_the_row(llama):
    x, mask = _batch(3)
    ref = vanilla_generate(llama, x, sampling=GREEDY, max_new_tokens=20, attention_mask=mask).tokens
    eos = ref[0][2]  # the third token of row 0: inside the first round's accepted path
    van = vanilla_generate(llama, x, sampling=GREEDY, max_new_tokens=20, attention_mask=mask, eos_token_id=eos)
    out = tree_generate(llama, OracleTreeDrafter(llama, breaks=False), x, depth=5, topk=2, tokens=12,
                        sampling=GREEDY, max_new_tokens=20, attention_mask=mask, eos_token_id=eos)
    assert out.tokens == van.tokens and out.finished_by_eos == van.finished_by_eos
    assert out.tokens[0] == ref[0][: ref[0].index(eos) + 1]  # nothing after EOS is committed
    assert out.rounds[0].accepted[0] == 5 and out.rounds[0].committed[0] == 3


def test_max_new_tokens_never_exceeded_inside_the_tree(llama):
    x, mask = _batch(3)
    for n in (1, 2, 5, 7):
        ref = vanilla_generate(llama, x, sampling=GREEDY, max_new_tokens=n, attention_mask=mask).tokens
        out = tree_generate(llama, OracleTreeDrafter(llama, breaks=False), x, depth=4, topk=2, tokens=10,
                            sampling=GREEDY, max_new_tokens=n, attention_mask=mask)
        assert out.tokens == ref and [len(t) for t in out.tokens] == [n] * 3
        assert all(r.depth <= 4 and r.depth <= n - 1 for r in out.rounds)


def test_streaming_callback_and_round_records(llama):
    x, mask = _batch(2)
    seen = []
    out = tree_generate(llama, EagleTreeDrafter(make_head(llama, draft_vocab=64), llama), x, depth=3, topk=2, tokens=6,
                        sampling=GREEDY, max_new_tokens=10, attention_mask=mask,
                        on_token=lambda b, t, ts: seen.append((b, t, ts)))
    for b in range(2):
        assert [t for r, t, _ in seen if r == b] == out.tokens[b]
        assert [ts for r, _, ts in seen if r == b] == out.token_times[b]
    assert sum(sum(r.committed) for r in out.rounds) == 20
    for r in out.rounds:
        # verified nodes: min(tokens, topk + (depth - 1) topk^2) = min(6, 2 + 4 (depth - 1)); none at depth 0
        assert isinstance(r, TreeRoundRecord) and r.gamma == (min(6, 2 + 4 * (r.depth - 1)) if r.depth else 0)
        assert min(r.t_draft, r.t_verify, r.t_rest) >= 0
        assert all(a <= r.depth and c <= a + 1 for a, c in zip(r.accepted, r.committed))
    assert out.t_start <= min(min(t) for t in out.token_times) <= out.t_end


def test_bad_arguments_name_the_parameter(llama):
    x, _ = _batch(1)
    drafter = EagleTreeDrafter(make_head(llama, draft_vocab=40), llama)
    kw = dict(sampling=GREEDY, max_new_tokens=4)
    for name, bad in (("depth", 0), ("topk", -1), ("tokens", 2.5)):
        args = dict(depth=2, topk=2, tokens=4, **kw)
        args[name] = bad
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {bad}"):
            tree_generate(llama, drafter, x, **args)
    with pytest.raises(ValueError, match="topk must be <= the head's draft vocabulary size 40"):
        tree_generate(llama, drafter, x, depth=2, topk=41, tokens=4, **kw)
    with pytest.raises(ValueError, match="max_new_tokens"):
        tree_generate(llama, drafter, x, depth=2, topk=2, tokens=4, sampling=GREEDY, max_new_tokens=0)
    with pytest.raises(TypeError, match="proposes trees"):
        speculative_generate(llama, drafter, x, gamma=2, **kw)
