"""The section-6 draft-length rule on constructed tables with known answers."""

import json
import random

import pytest

from tests.eval.records import GenerationResult, RoundRecord

from eaglehead.eval.gamma_select import gamma_table_from_metrics, select_gamma
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
