"""Metrics on hand-made round records whose answers are worked out in each test."""

import json
import random

import pytest

from tests.eval.records import GenerationResult, RoundRecord

from eaglehead.eval.metrics import compute_metrics, itl_samples, metrics_by_category, speedup

TOL = 1e-12  # every expected value is a few float64 operations away from the exact rational


def _result(rounds, lengths=None, t_start=0.0, t_end=1.0):
    """A result whose rows have ``lengths`` tokens, all delivered at t_start + 0.5."""
    lengths = lengths if lengths is not None else [1] * len(rounds[0].active)
    tokens = [[7] * n for n in lengths]
    times = [[t_start + 0.5] * n for n in lengths]
    return GenerationResult(tokens, rounds, times, t_start, t_end, [3] * len(lengths))


def test_tau_survival_conditional_by_hand():
    # Three rows, gamma 3, A = [3, 0, 2]: tau = 1 + 5/3; Pr(A>=1) = 2/3, Pr(A>=2) = 2/3,
    # Pr(A>=3) = 1/3; conditional = [2/3, 2/2, 1/2]; accepted / drafted = 5 / 9.
    rnd = RoundRecord(3, [3, 0, 2], [4, 1, 3], [True, True, True], 0.01, 0.02, 0.003)
    m = compute_metrics(_result([rnd]))
    assert m.tau == pytest.approx(1 + 5 / 3, abs=TOL)
    assert m.tau == pytest.approx(2.667, abs=1e-3)
    assert m.tau_committed == pytest.approx(8 / 3, abs=TOL)
    assert m.survival == pytest.approx([2 / 3, 2 / 3, 1 / 3], abs=TOL)
    assert m.conditional == pytest.approx([2 / 3, 1.0, 1 / 2], abs=TOL)
    assert m.acceptance_rate == pytest.approx(5 / 9, abs=TOL)
    assert (m.rounds, m.row_rounds, m.committed_tokens, m.drafted, m.accepted) == (1, 3, 8, 9, 5)
    assert m.truncated_row_rounds == 0
    assert m.t_draft_mean_s == pytest.approx(0.01) and m.t_rest_mean_s == pytest.approx(0.003)
    assert m.committed_per_round == pytest.approx(8.0)
    json.dumps(m.to_dict())  # plain JSON types only


def test_inactive_rows_masked_in_both_layouts():
    # Row 1 finished: its entries are ignored whether listed (full layout) or omitted (compact).
    full = RoundRecord(2, [2, 0, 1], [3, 0, 2], [True, False, True])
    compact = RoundRecord(2, [2, 1], [3, 2], [True, False, True])
    for rnd in (full, compact):
        m = compute_metrics(_result([rnd]))
        assert m.row_rounds == 2
        assert m.tau == pytest.approx(1 + 3 / 2, abs=TOL)
        assert m.survival == pytest.approx([1.0, 0.5], abs=TOL)
        assert m.committed_tokens == 5


def test_truncation_separates_tau_from_tau_committed():
    # A = 3 drafts accepted but EOS after the second: 2 committed. tau keeps the policy's 4.
    m = compute_metrics(_result([RoundRecord(3, [3], [2], [True])]))
    assert m.tau == pytest.approx(4.0) and m.tau_committed == pytest.approx(2.0)
    assert m.truncated_row_rounds == 1


def test_mixed_gamma_counts_only_rounds_that_drafted_the_position():
    # (gamma, A) = (1, 1), (3, 0), (3, 3). Position 1: all three drafted it, two reached it -> 2/3.
    # Positions 2, 3: only the two gamma-3 rounds -> 1/2 each. Conditional at 2: of the gamma-3
    # rounds with A >= 1 (one) all have A >= 2 -> 1; at 3 likewise -> 1.
    rounds = [RoundRecord(1, [1], [2], [True]), RoundRecord(3, [0], [1], [True]),
              RoundRecord(3, [3], [4], [True])]
    m = compute_metrics(_result(rounds))
    assert m.survival == pytest.approx([2 / 3, 1 / 2, 1 / 2], abs=TOL)
    assert m.conditional == pytest.approx([2 / 3, 1.0, 1.0], abs=TOL)
    assert m.gamma_values == [1, 3] and m.gamma_max == 3
    assert m.acceptance_rate == pytest.approx(4 / 7, abs=TOL)


def test_vanilla_steps():
    m = compute_metrics(_result([RoundRecord(0, [0], [1], [True])] * 4))
    assert m.tau == 1.0 and m.survival == [] and m.acceptance_rate is None


def test_tail_sum_identity_on_random_records():
    # E[A] = sum_i Pr(A >= i) holds exactly for a fixed gamma, whatever the dependence.
    rng = random.Random(0)
    rounds = []
    for _ in range(200):
        acc = [rng.randint(0, 5) for _ in range(4)]
        rounds.append(RoundRecord(5, acc, [a + 1 for a in acc], [True] * 4))
    m = compute_metrics(_result(rounds))
    assert m.tau == pytest.approx(1 + sum(m.survival), abs=1e-12)
    prod, products = 1.0, []
    for c in m.conditional:
        prod *= c
        products.append(prod)
    assert m.survival == pytest.approx(products, abs=1e-12)


def test_time_per_token_is_ratio_of_totals_not_mean_of_ratios():
    # Round 1: C = 1.0 s, K = 1. Round 2: C = 0.1 s, K = 4. Totals: 1.1 s / 5 tokens = 0.22 s;
    # the mean of per-round ratios would be (1.0 + 0.025) / 2 = 0.5125 s.
    rounds = [RoundRecord(3, [0], [1], [True], 0.2, 0.7, 0.1),
              RoundRecord(3, [3], [4], [True], 0.02, 0.07, 0.01)]
    m = compute_metrics(_result(rounds))
    mean_of_ratios = (1.0 / 1 + 0.1 / 4) / 2
    assert m.time_per_token_s == pytest.approx(0.22, abs=TOL)
    assert abs(m.time_per_token_s - mean_of_ratios) > 0.2
    assert m.round_time_mean_s == pytest.approx(0.55, abs=TOL)
    assert m.round_time_mean_s / m.committed_per_round == pytest.approx(m.time_per_token_s)
    base = compute_metrics(_result([RoundRecord(0, [0], [1], [True], 0.0, 0.5, 0.0)]))
    assert speedup(base, m) == pytest.approx(0.5 / 0.22, abs=TOL)
    assert speedup(0.5, m.to_dict()) == pytest.approx(0.5 / 0.22, abs=TOL)
    assert speedup(None, m) is None


def test_serving_latencies_and_itl_percentiles():
    # Tokens at 0.1, 0.3 (x3), 0.6, 1.0 after t_start = 0. Per-token gaps: 0.2, 0, 0, 0.3, 0.4;
    # sorted 0, 0, 0.2, 0.3, 0.4 (linear interpolation at rank q/100 * 4): p50 = 0.2,
    # p95 = 0.3 + 0.8 * 0.1 = 0.38, p99 = 0.3 + 0.96 * 0.1 = 0.396. Distinct events: 0.1, 0.3, 0.6,
    # 1.0, gaps 0.2, 0.3, 0.4: p50 = 0.3, p95 = 0.3 + 0.9 * 0.1 = 0.39.
    times = [0.1, 0.3, 0.3, 0.3, 0.6, 1.0]
    res = GenerationResult([[1] * 6], [RoundRecord(0, [0], [1], [True])], [times], 0.0, 1.2, [4])
    m = compute_metrics(res)
    assert m.itl_p50_s == pytest.approx(0.2, abs=TOL)
    assert m.itl_p95_s == pytest.approx(0.38, abs=TOL)
    assert m.itl_p99_s == pytest.approx(0.396, abs=TOL)
    assert m.itl_event_p50_s == pytest.approx(0.3, abs=TOL)
    assert m.itl_event_p95_s == pytest.approx(0.39, abs=TOL)
    assert sorted(itl_samples(res)) == pytest.approx([0, 0, 0.2, 0.3, 0.4], abs=TOL)
    assert m.ttft_s == pytest.approx(0.1) and m.latency_s == pytest.approx(1.0)
    assert m.tpot_s == pytest.approx((1.0 - 0.1) / 5, abs=TOL)
    assert m.throughput_tok_s == pytest.approx(6 / 1.2, abs=TOL)


def test_wall_time_is_union_of_call_intervals_and_length_stats():
    rnd = RoundRecord(0, [0, 0], [1, 1], [True, True])
    sequential = [_result([rnd], [2, 4], 0.0, 1.0), _result([rnd], [6, 0], 2.0, 3.0)]
    overlapping = [_result([rnd], [2, 4], 0.0, 2.0), _result([rnd], [6, 0], 1.0, 3.0)]
    assert compute_metrics(sequential).wall_time_s == pytest.approx(2.0)
    m = compute_metrics(overlapping)
    assert m.wall_time_s == pytest.approx(3.0)
    assert m.throughput_tok_s == pytest.approx(12 / 3.0)
    assert (m.output_len_min, m.output_len_max, m.output_len_mean) == (0, 6, 3.0)
    assert m.ttft_s == pytest.approx((0.5 + 0.5 + 0.5) / 3)  # the empty row has no TTFT


def test_metrics_by_category():
    a1 = _result([RoundRecord(2, [2], [3], [True])])
    a2 = _result([RoundRecord(2, [0], [1], [True])])
    b = _result([RoundRecord(2, [1], [2], [True])])
    out = metrics_by_category([("writing", a1), ("code", b), ("writing", a2)])
    assert list(out["categories"]) == ["code", "writing"]
    assert out["categories"]["writing"]["tau"] == pytest.approx(2.0)
    assert out["categories"]["code"]["tau"] == pytest.approx(2.0)
    assert out["overall"]["committed_tokens"] == 6
    assert out["overall"]["survival"] == pytest.approx([2 / 3, 1 / 3])
    json.dumps(out)
    with pytest.raises(ValueError, match="pairs is empty"):
        metrics_by_category([])


@pytest.mark.parametrize(
    "rnd, message",
    [
        (RoundRecord(2, [3], [4], [True]), "accepted 3 outside"),
        (RoundRecord(2, [1], [3], [True]), "committed 3 outside"),
        (RoundRecord(2, [1, 1, 1], [2], [True, True]), "accepted has 3 entries"),
        (RoundRecord(-1, [0], [1], [True]), "gamma must be"),
        (RoundRecord(1, [0], [1], [True], t_verify=float("nan")), "t_verify"),
    ],
)
def test_bad_round_records_raise(rnd, message):
    with pytest.raises(ValueError, match=message):
        compute_metrics(_result([rnd], [1] * len(rnd.active)))


def test_bad_token_times_raise():
    res = _result([RoundRecord(0, [0], [1], [True])], [2])
    res.token_times = [[0.1]]
    with pytest.raises(ValueError, match="1 token_times for 2 tokens"):
        compute_metrics(res)
    res.token_times = [[0.3, 0.1]]
    with pytest.raises(ValueError, match="non-decreasing"):
        compute_metrics(res)
    with pytest.raises(ValueError, match="no attribute"):
        compute_metrics([object()])
