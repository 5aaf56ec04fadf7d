"""Draft vocabulary: frequency selection, tie-break, d2t/t2d formulas, round trip, coverage."""

import pytest
import torch

from eaglehead.draftheads import build_draft_vocab, check_vocab_mapping, coverage, draft_vocab_from_ids


def test_small_example_by_hand():
    counts = torch.tensor([5, 0, 3, 3, 1, 9])
    d2t, t2d = build_draft_vocab(counts, 3)
    # Most frequent: id 5 (9), id 0 (5), then ids 2 and 3 tie at 3 -> the lower id, 2.
    assert torch.equal(t2d, torch.tensor([True, False, True, False, False, True]))
    assert torch.equal(d2t, torch.tensor([0, 1, 3]))  # target ids [0, 2, 5] minus [0, 1, 2]
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    assert coverage(counts, t2d) == pytest.approx((5 + 3 + 9) / 21)


def test_matches_brute_force_and_round_trips():
    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 6, (300,), generator=gen)  # many ties and zeros
    d2t, t2d = build_draft_vocab(counts, 120)
    expected = sorted(sorted(range(300), key=lambda i: (-int(counts[i]), i))[:120])
    target_ids = torch.arange(120) + d2t
    assert target_ids.tolist() == expected
    assert torch.nonzero(t2d).flatten().tolist() == expected
    draft_of = torch.cumsum(t2d, 0) - 1  # target -> draft for ids in the vocab
    assert torch.equal(draft_of[target_ids], torch.arange(120))
    assert torch.equal(draft_of[target_ids] + d2t[draft_of[target_ids]], target_ids)
    check_vocab_mapping(d2t, t2d, 120, 300)
    assert torch.equal(build_draft_vocab(counts, 120)[0], d2t)  # deterministic


def test_full_vocabulary_is_identity():
    d2t, t2d = build_draft_vocab(torch.tensor([4, 1, 7]), 3)
    assert torch.equal(d2t, torch.zeros(3, dtype=torch.int64)) and t2d.all()
    assert coverage(torch.tensor([4, 1, 7]), t2d) == 1.0


@pytest.mark.parametrize("counts,size,match", [
    (torch.tensor([1.0, 2.0]), 1, "integer"),
    (torch.tensor([1, -2]), 1, "non-negative"),
    (torch.tensor([1, 2]), 3, "draft_vocab_size"),
    (torch.tensor([1, 2]), 0, "draft_vocab_size"),
    (torch.tensor([[1, 2]]), 1, "1-D"),
])
def test_bad_input(counts, size, match):
    with pytest.raises(ValueError, match=match):
        build_draft_vocab(counts, size)


def test_mapping_checks():
    d2t, t2d = draft_vocab_from_ids(torch.tensor([1, 4, 6]), 8)
    with pytest.raises(ValueError, match="d2t"):
        check_vocab_mapping(d2t.int(), t2d, 3, 8)
    with pytest.raises(ValueError, match="t2d"):
        check_vocab_mapping(d2t, t2d[:7], 3, 8)
    with pytest.raises(ValueError, match="t2d"):
        bad = t2d.clone()
        bad[0] = True
        check_vocab_mapping(d2t, bad, 3, 8)
    with pytest.raises(ValueError, match="strictly increasing"):
        draft_vocab_from_ids(torch.tensor([4, 1]), 8)
    with pytest.raises(ValueError, match="zero"):
        coverage(torch.zeros(8, dtype=torch.int64), t2d)
