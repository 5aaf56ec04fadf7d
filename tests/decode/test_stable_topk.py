"""``stable_topk_indices`` (the tree drafter's top children) equals a stable descending sort's first k, on
its fast path and on its exact fallback (ties at the k-th place, k = the whole row), ties to the lowest index."""

import pytest
import torch

from eaglehead.decode.tree_draft import _stable_topk_by_keys, stable_topk_indices


def _reference(x, k):
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


@pytest.mark.parametrize("n", [1, 2, 5, 64, 8192])
def test_equals_a_stable_sort_with_and_without_ties(n):
    g = torch.Generator().manual_seed(n)
    for trial in range(40):
        k = min(n, (1, 2, 3, 8)[trial % 4])
        x = torch.randn(3, 4, n, generator=g)
        if trial % 2:
            x = torch.round(x * (8 if trial % 3 else 1)) / 2  # many ties, often at the k-th place
        if trial % 5 == 0:
            x[..., 0] = float("-inf")
            x[..., -1] = -0.0  # ties with 0.0 in a sort
        assert torch.equal(stable_topk_indices(x, k), _reference(x, k)), (trial, k)
        # the sync-free path other devices take, on the same rows
        assert torch.equal(_stable_topk_by_keys(x.float() + 0.0, k), _reference(x, k)), (trial, k)


def test_a_tie_wider_than_the_first_candidates_is_resolved_by_index():
    x = torch.zeros(2, 300)  # row 0: 300-way tie; row 1: 40 ones, the rest 0
    x[1, 100:140] = 1.0
    assert stable_topk_indices(x, 8).tolist() == [list(range(8)), list(range(100, 108))]
    x[1, 100:140] = 0.0
    x[1, 250] = 2.0  # the k-th place ties 299 entries: every one must be a candidate
    assert stable_topk_indices(x, 3).tolist() == [[0, 1, 2], [250, 0, 1]]


def test_ties_at_the_cut_go_to_the_lowest_index_and_bfloat16_input_works():
    x = torch.tensor([[0.0, 1.0, 1.0, 0.5, 1.0, 1.0]])
    assert stable_topk_indices(x, 3).tolist() == [[1, 2, 4]]
    assert stable_topk_indices(x, 6).tolist() == [[1, 2, 4, 5, 3, 0]]
    y = torch.randn(2, 8192, dtype=torch.bfloat16)
    assert torch.equal(stable_topk_indices(y, 8), _reference(y.float(), 8))
