"""The section-6 draft-length rule on constructed tables with known answers."""

import json
import random

import pytest

from tests.eval.records import GenerationResult, RoundRecord

from eaglehead.eval.gamma_select import choose_gamma, gamma_samples_from_metrics, gamma_table_from_metrics, select_gamma
from eaglehead.eval.metrics import compute_metrics


def test_rule_stops_at_first_non_paying_step_and_argmin_is_global():
    # C/K: g0 10, g1 12/1.8 = 6.67, g2 14/2.4 = 5.83, g3 16/2.7 = 5.93, g4 30/2.9 = 10.3,
    # g5 31/6 = 5.17. Steps: 0->1 dC/dK = 2/0.8 = 2.5 < 10 (extend); 1->2 2/0.6 = 3.33 < 6.67
    # (extend); 2->3 2/0.3 = 6.67 >= 5.83 (stop). Rule picks 2, the global argmin is 5.
    table = {0: (10.0, 1.0), 1: (12.0, 1.8), 2: (14.0, 2.4), 3: (16.0, 2.7), 4: (30.0, 2.9),
             5: (31.0, 6.0)}
    sel = select_gamma(table)
    assert sel.chosen == 2 and sel.argmin == 5
    assert "2 -> 3" in sel.stop_reason
    rows = {r.gamma: r for r in sel.table}
    assert rows[0].extend is None and rows[1].extend and rows[2].extend and not rows[3].extend
    assert rows[2].marginal_time_per_token_s == pytest.approx(2.0 / 0.6)
    assert rows[5].time_per_token_s == pytest.approx(31.0 / 6.0)
    json.dumps(sel.to_dict())


def test_no_gain_in_committed_tokens_stops_and_cheaper_extension_extends():
    sel = select_gamma({1: (10.0, 2.0), 2: (11.0, 2.0)})
    assert sel.chosen == 1 and "adds no committed tokens" in sel.stop_reason
    assert sel.table[1].marginal_time_per_token_s is None
    # dC < 0 with dK > 0 always pays.
    assert select_gamma({1: (10.0, 2.0), 3: (9.0, 2.5)}).chosen == 3
    assert select_gamma({4: (10.0, 2.0)}).chosen == 4


def test_unsorted_input_and_step_rule_equals_time_per_token_descent():
    # For dK > 0, dC/dK < C/K  <=>  C'/K' < C/K; check on random tables, keys given out of order.
    rng = random.Random(1)
    for _ in range(200):
        gammas = rng.sample(range(0, 12), 5)
        table = {g: (rng.uniform(0.5, 2.0), rng.uniform(1.0, 4.0)) for g in gammas}
        sel = select_gamma(table)
        assert [r.gamma for r in sel.table] == sorted(gammas)
        for prev, row in zip(sel.table, sel.table[1:]):
            if row.committed_per_round > prev.committed_per_round:
                assert row.extend == (row.time_per_token_s < prev.time_per_token_s)
            else:
                assert row.extend is False
        tpts = {r.gamma: r.time_per_token_s for r in sel.table}
        assert tpts[sel.argmin] == min(tpts.values())
        assert tpts[sel.chosen] >= tpts[sel.argmin]


@pytest.mark.parametrize(
    "table, message",
    [
        ({}, "non-empty"),
        ({-1: (1.0, 1.0)}, "gamma must be"),
        ({True: (1.0, 1.0)}, "gamma must be"),
        ({1: (0.0, 1.0)}, "C_bar"),
        ({1: (1.0, float("nan"))}, "K_bar"),
        ({1: (1.0,)}, "must be a pair"),
        ({1: "fast"}, "must be a pair"),
    ],
)
def test_bad_measurements_raise(table, message):
    with pytest.raises(ValueError, match=message):
        select_gamma(table)


def test_table_from_metrics_gives_time_per_token():
    # gamma 1: rounds of 3 ms committing 2 and 1 -> C = 3 ms, K = 1.5; gamma 2: 4 ms, K = 2.5.
    g1 = GenerationResult([[]], [RoundRecord(1, [1], [2], [True], 0.001, 0.002, 0.0),
                                 RoundRecord(1, [0], [1], [True], 0.001, 0.002, 0.0)])
    g2 = GenerationResult([[]], [RoundRecord(2, [2], [3], [True], 0.002, 0.002, 0.0),
                                 RoundRecord(2, [1], [2], [True], 0.002, 0.002, 0.0)])
    metrics = {1: compute_metrics(g1), 2: compute_metrics(g2).to_dict()}
    table = gamma_table_from_metrics(metrics)
    assert table[1] == pytest.approx((0.003, 1.5)) and table[2] == pytest.approx((0.004, 2.5))
    assert select_gamma(table).table[0].time_per_token_s == pytest.approx(
        metrics[1].time_per_token_s
    )
    # 1 -> 2: dC/dK = 0.001 / 1.0 = 1 ms < C/K = 2 ms per token, so extend.
    assert select_gamma(table).chosen == 2


# A sweep of the shape the demo recorded (BENCHMARKS.md, EAGLE-3, greedy, batch 1): drafting 0.94 ms
# per step, verifying 7.84 ms + 0.456 ms per token fed, 0.75 ms of bookkeeping; per-position
# acceptance 0.72, so tau(5) = 3.18 as measured. Times in seconds.
def _demo_sample(g, scale=1.0):
    k = sum(0.72 ** i for i in range(g + 1))
    return (scale * 0.94e-3 * g, scale * (7.84e-3 + 0.456e-3 * (g + 1)), scale * 0.75e-3, k)


GAMMAS = range(1, 9)


def _true_tpt(g):
    return sum(_demo_sample(g)[:3]) / _demo_sample(g)[3]


def _true_choice():
    return select_gamma({g: (sum(_demo_sample(g)[:3]), _demo_sample(g)[3]) for g in GAMMAS}).chosen


def test_choice_on_a_clean_recorded_sweep_matches_the_rule():
    best = _true_choice()
    choice = choose_gamma({g: [_demo_sample(g)] for g in GAMMAS})
    assert choice.chosen == best == choice.measured_rule and choice.basis == "model"
    assert choice.model.draft_s_per_step == pytest.approx(0.94e-3)
    assert choice.model.verify_s_per_token == pytest.approx(0.456e-3)
    assert choice.confidence == 1.0 and "leaving one gamma" in choice.confidence_method
    json.dumps(choice.to_dict())


@pytest.mark.parametrize("factor", [5.0, 10.0, 0.2])
def test_one_outlying_timing_cannot_flip_the_choice(factor):
    # Single timings 5-10x off (as in a temperature-1 sweep on a busy machine), or 5x too fast, at any one
    # gamma: the measured rule is fooled, the modelled choice is not.
    best = _true_choice()
    fooled = 0
    for bad in GAMMAS:
        sweep = {g: [_demo_sample(g, factor if g == bad else 1.0)] for g in GAMMAS}
        choice = choose_gamma(sweep)
        assert choice.chosen == best, (bad, choice.note)
        assert f"{bad} (" in choice.note.split("far from the model")[-1]  # the outlier is named
        fooled += choice.measured_rule != best
    assert fooled >= 1


def test_outlying_repeats_and_jitter_leave_the_choice_and_its_confidence():
    rng = random.Random(3)
    best = _true_choice()
    for _ in range(20):
        sweep = {}
        for g in GAMMAS:
            reps = [_demo_sample(g, rng.uniform(0.97, 1.03)) for _ in range(3)]
            reps[rng.randrange(3)] = _demo_sample(g, rng.choice([5.0, 10.0]))  # one repeat in three is wild
            sweep[g] = reps
        choice = choose_gamma(sweep, seed=1)
        # Gammas 3 and 4 are truly 0.24% apart, well inside the +-3% jitter: either is a right answer.
        assert _true_tpt(choice.chosen) <= 1.01 * _true_tpt(best) and choice.basis == "model"
        # The bootstrap often draws the wild repeat twice, so it is rightly unsure; the choice itself holds.
        assert 0 < choice.confidence <= 1 and "bootstrap" in choice.confidence_method


def test_gammas_within_noise_are_named_and_the_modelled_one_is_kept():
    # Jitter of +-10% between repeats: neighbours of the best gamma lie within noise of it.
    rng = random.Random(0)
    sweep = {g: [_demo_sample(g, s) for s in (0.9, 1.0, 1.1)] for g in GAMMAS}
    for reps in sweep.values():
        rng.shuffle(reps)
    choice = choose_gamma(sweep)
    assert _true_tpt(choice.chosen) <= 1.01 * _true_tpt(_true_choice()) and choice.within_noise
    assert "within noise" in choice.note and "better modelled time" in choice.note
    assert {choice.chosen - 1, choice.chosen + 1} & set(choice.within_noise)
    assert choice.noise_rel == pytest.approx(1.4826 * 0.1, rel=0.02)  # scaled MAD of +-10% jitter


def test_a_real_effect_beyond_the_spread_of_repeats_wins():
    # Gamma 7 is consistently 30% faster in every repeat (e.g. a kernel that suits its shape): the
    # line cannot see it, the repeats can.
    sweep = {g: [_demo_sample(g, s * (0.7 if g == 7 else 1.0)) for s in (0.99, 1.0, 1.01)] for g in GAMMAS}
    choice = choose_gamma(sweep)
    assert choice.chosen == 7 and choice.basis == "measured"


def test_choose_gamma_validates_and_reads_metrics():
    with pytest.raises(ValueError, match="non-empty"):
        choose_gamma({})
    with pytest.raises(ValueError, match="K_bar"):
        choose_gamma({2: [(0.001, 0.01, 0.0, 0.0)]})
    with pytest.raises(ValueError, match="no repeats"):
        choose_gamma({2: []})
    results = [GenerationResult([[5] * 6], [RoundRecord(2, [2], [3], [True], 0.002, 0.008, 0.001)] * 2,
                                [[0.1] * 6])]
    samples = gamma_samples_from_metrics({2: [compute_metrics(results)]})
    assert samples == {2: [pytest.approx((0.002, 0.008, 0.001, 3.0))]}
    assert choose_gamma(samples).chosen == 2
