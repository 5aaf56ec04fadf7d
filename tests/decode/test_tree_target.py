"""The target's tree forward and cache compaction (``decode/tree_target.py``), in float64 on every tiny family.

* One forward over ``[root] + tree`` with the 4D ancestor mask gives, for every node, the logits of a
  fresh chain forward over ``prompt + path to that node`` (float64, tolerance 1e-9: the only difference
  is summation order), for batch 3 with left padding, a cache that already has holes, and rows whose
  trees have *different* structures.
* After ``keep_path`` the cache holds exactly ``[root] + accepted path`` at the right positions: the next
  step's logits equal a fresh prefill of the committed tokens, and every row's valid keys/values equal
  a recompute, after several tree rounds with different accepted depths per row (0, middle, full).

Run: ``python -m pytest tests/decode/test_tree_target.py -q``
"""

from __future__ import annotations

import pytest
import torch

from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.tree import DraftTree, check_tree
from eaglehead.decode.tree_target import TreeCacheLM
from tests.tiny_models import tiny_gpt2, tiny_llama, tiny_mistral, tiny_qwen2

FAMILIES = {"llama": tiny_llama, "qwen2": tiny_qwen2, "mistral": tiny_mistral, "gpt2": tiny_gpt2}
TOL = dict(atol=1e-9, rtol=1e-9)  # float64: same math, different summation order

# Three trees of 6 nodes with different structures (one per batch row): a chain, a wide root, a mix.
PARENTS = [[-1, 0, 1, 2, 3, 4], [-1, -1, -1, 0, 0, 1], [-1, -1, 0, 0, 2, 4]]


def _depths(parents: list[int]) -> list[int]:
    out: list[int] = []
    for par in parents:
        out.append(1 if par < 0 else out[par] + 1)
    return out


def _tree(seed: int, vocab: int = 64) -> DraftTree:
    toks = torch.randint(0, vocab, (3, 6), generator=torch.Generator().manual_seed(seed))
    tree = DraftTree(toks, torch.tensor(PARENTS), torch.tensor([_depths(p) for p in PARENTS]), 6)
    check_tree(tree)
    return tree


def _path(tree: DraftTree, b: int, node: int) -> list[int]:
    """Tokens from the root's child down to ``node`` (inclusive)."""
    out = []
    while node >= 0:
        out.append(int(tree.tokens[b, node]))
        node = int(tree.parents[b, node])
    return out[::-1]


def _fresh_logits(model, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1]


def _prompts(vocab: int = 64):
    x = torch.randint(0, vocab, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[1, :3] = False  # left padding of different widths
    mask[2, :5] = False
    return x, mask


def _ragged_runner(model):
    """Prefill all but the last prompt token, then one chain step whose rows keep 1, 3 and 2 of 3 tokens
    (holes): the tree forward must start from a cache that already has holes."""
    x, mask = _prompts()
    runner = TreeCacheLM(model)
    runner.reset(3)
    runner.forward(x[:, :-1], mask[:, :-1])
    extra = torch.randint(0, 64, (3, 2), generator=torch.Generator().manual_seed(2))
    runner.forward(torch.cat([x[:, -1:], extra], 1))
    keep = [1, 3, 2]
    runner.keep_recent(3, keep)
    committed = [x[b, mask[b]].tolist() + extra[b, : keep[b] - 1].tolist() for b in range(3)]
    # the root (pending) of each row: the next token, chosen freely
    roots = torch.tensor([5, 17, 42])
    return runner, [c + [int(r)] for c, r in zip(committed, roots)], roots


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tree_logits_equal_per_path_chain_forwards(family: str) -> None:
    model = FAMILIES[family](seed=0, layers=2).double()
    runner, committed, roots = _ragged_runner(model)
    assert runner.valid is not None and not bool(runner.valid.all())  # holes exist before the tree
    tree = _tree(seed=3)
    logits = runner.forward_tree(roots, tree).logits  # [3, 7, V]
    assert logits.dtype == torch.float64
    for b in range(3):
        torch.testing.assert_close(logits[b, 0], _fresh_logits(model, committed[b]), **TOL)
        for i in range(tree.n_nodes):
            torch.testing.assert_close(logits[b, i + 1], _fresh_logits(model, committed[b] + _path(tree, b, i)), **TOL)


def _cache_rows_equal_recompute(model, runner, committed) -> None:
    for b, toks in enumerate(committed):
        fresh = RaggedCacheLM(model)
        fresh.reset(1)
        fresh.forward(torch.tensor([toks[:-1]]))
        assert int(runner.lengths[b]) == len(toks) - 1
        sel = runner.valid[b]
        for layer, ref in zip(runner.cache.layers, fresh.cache.layers):
            torch.testing.assert_close(layer.keys[b][:, sel], ref.keys[0], **TOL)
            torch.testing.assert_close(layer.values[b][:, sel], ref.values[0], **TOL)


# Accepted node per row and round (-1: no node accepted; the path is the node's ancestors + itself).
ROUNDS = [[5, 2, 4], [-1, 5, 1], [3, -1, 5]]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cache_after_tree_rounds_equals_recompute(family: str) -> None:
    model = FAMILIES[family](seed=1, layers=2).double()
    runner, committed, roots = _ragged_runner(model)
    for r, ends in enumerate(ROUNDS):
        tree = _tree(seed=10 + r)
        runner.forward_tree(roots, tree)
        paths = [[] if e < 0 else _path_nodes(tree, b, e) for b, e in enumerate(ends)]
        depth = max(map(len, paths))
        path = torch.tensor([p + [-1] * (6 - len(p)) for p in paths])  # [3, depth 6] node indices
        runner.keep_path(path, [len(p) for p in paths])
        roots = torch.randint(0, 64, (3,), generator=torch.Generator().manual_seed(20 + r))
        for b in range(3):
            committed[b] = committed[b] + [int(tree.tokens[b, i]) for i in paths[b]] + [int(roots[b])]
        assert runner.physical_length == runner.valid.shape[1] and depth >= 1
    _cache_rows_equal_recompute(model, runner, committed)
    nxt = runner.forward(roots[:, None]).logits[:, -1]  # the next step after the tree rounds
    for b in range(3):
        torch.testing.assert_close(nxt[b], _fresh_logits(model, committed[b]), **TOL)


def _path_nodes(tree: DraftTree, b: int, node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = int(tree.parents[b, node])
    return out[::-1]


def test_batch_one_full_chain_keeps_the_cache_hole_free() -> None:
    """Batch 1 never materialises a mask: compaction is a copy within the block plus a physical crop."""
    model = tiny_llama(seed=2, layers=2).double()
    runner = TreeCacheLM(model)
    runner.reset(1)
    prompt = [3, 9, 27, 17, 51]
    runner.forward(torch.tensor([prompt[:-1]]))
    tree = DraftTree(torch.tensor([[7, 8, 9, 10]]), torch.tensor([[-1, -1, 1, 1]]), torch.tensor([[1, 1, 2, 2]]), 2)
    runner.forward_tree(torch.tensor([prompt[-1]]), tree)
    runner.keep_path(torch.tensor([[1, 3]]), [2])  # the second root child, then its second child
    assert runner._valid is None and runner.physical_length == len(prompt) + 2
    nxt = runner.forward(torch.tensor([[33]])).logits[0, -1]
    torch.testing.assert_close(nxt, _fresh_logits(model, prompt + [8, 10, 33]), **TOL)


def test_eager_attention_accepts_the_additive_mask() -> None:
    """The mask is additive float: the eager kernel adds it. Float32 (eager's softmax runs in float32, and
    with float64 weights a fully masked left-padding query already yields NaN keys in the prefill)."""
    model = tiny_llama(seed=0, layers=2, attn_implementation="eager")
    runner, committed, roots = _ragged_runner(model)
    tree = _tree(seed=4)
    logits = runner.forward_tree(roots, tree).logits
    for b in range(3):
        for i in range(tree.n_nodes):
            torch.testing.assert_close(logits[b, i + 1], _fresh_logits(model, committed[b] + _path(tree, b, i)),
                                       atol=1e-5, rtol=1e-5)


def test_errors_name_what_was_expected() -> None:
    model = tiny_llama(seed=0, layers=1)
    runner = TreeCacheLM(model)
    with pytest.raises(RuntimeError, match="reset"):
        runner.forward_tree(torch.tensor([1]), DraftTree.empty(1))
    runner.reset(2)
    runner.forward(torch.tensor([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match=r"root must be \[B\] = \[2\]"):
        runner.forward_tree(torch.tensor([1]), DraftTree.empty(2))
    with pytest.raises(RuntimeError, match="keep_path must follow forward_tree"):
        runner.keep_path(torch.zeros(2, 0, dtype=torch.long), [0, 0])
    flash = tiny_llama(seed=0, layers=1)
    flash.config._attn_implementation_internal = "flash_attention_2"  # cannot take the tree's 4D mask
    with pytest.raises(ValueError, match="attn_implementation 'flash_attention_2'"):
        TreeCacheLM(flash)
