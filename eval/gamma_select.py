"""Draft-length selection from measured per-gamma means.

Usage::

    from eaglehead.eval.gamma_select import select_gamma, gamma_table_from_metrics
    sel = select_gamma({1: (0.030, 1.7), 2: (0.034, 2.2), 3: (0.038, 2.5)})  # gamma: (C_bar, K_bar)
    sel.chosen, sel.argmin, sel.to_dict()["table"]
    sel = select_gamma(gamma_table_from_metrics({g: compute_metrics(results_g) for g in gammas}))

``C_bar(gamma)`` is the mean wall time of one round and ``K_bar(gamma)`` the mean tokens committed
per round (all batch rows), both measured on the tuning split of one serving state, so
``C_bar / K_bar`` is that gamma's time per output token.

The rule: start at the smallest measured gamma and extend to the next measured one, g -> g', only
while ``dK = K_bar(g') - K_bar(g) > 0`` and ``dC / dK < C_bar(g) / K_bar(g)``: the extra round time
must be paid for by the extra committed tokens. For dK > 0 this is the same as
``C_bar(g') / K_bar(g') < C_bar(g) / K_bar(g)`` (multiply out), so the rule is a greedy descent of
time per token along increasing gamma. It stops at the first step that does not pay. Measurements
are noisy and need not be monotone, so a later gamma may still be cheaper: ``argmin`` reports the
global minimum of ``C_bar / K_bar`` for comparison. The recommendation is ``chosen`` (the rule),
which never jumps over a measured step that costs more than it returns; a gap between ``chosen`` and
``argmin`` says the sweep needs more samples or a finer grid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class GammaRow:
    """One measured gamma; the ``delta_*``/``marginal_*``/``extend`` fields describe the step from
    the previous measured gamma to this one (``None`` on the first row)."""

    gamma: int
    round_time_s: float  # C_bar
    committed_per_round: float  # K_bar
    time_per_token_s: float  # C_bar / K_bar
    delta_round_time_s: float | None
    delta_committed: float | None
    marginal_time_per_token_s: float | None  # dC / dK, None when dK <= 0
    extend: bool | None  # the rule's verdict on this step


@dataclass
class GammaSelection:
    """``chosen``: the rule's gamma (recommended); ``argmin``: gamma of least C_bar / K_bar."""

    chosen: int
    argmin: int
    stop_reason: str
    table: list[GammaRow]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)


def _validate(measurements: Mapping[int, tuple[float, float]]) -> list[tuple[int, float, float]]:
    if not isinstance(measurements, Mapping) or not measurements:
        raise ValueError("measurements must be a non-empty mapping {gamma: (C_bar, K_bar)}")
    rows = []
    for gamma, value in measurements.items():
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
            raise ValueError(f"measurements: gamma must be an int >= 0, got {gamma!r}")
        try:
            c, k = (float(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(
                f"measurements[{gamma}] must be a pair (C_bar seconds, K_bar tokens), got {value!r}"
            ) from None
        if not (math.isfinite(c) and c > 0):
            raise ValueError(f"measurements[{gamma}]: C_bar must be a finite time > 0 s, got {c}")
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"measurements[{gamma}]: K_bar must be finite and > 0, got {k}")
        rows.append((gamma, c, k))
    return sorted(rows)


def select_gamma(measurements: Mapping[int, tuple[float, float]]) -> GammaSelection:
    """Apply the rule to ``{gamma: (C_bar seconds per round, K_bar tokens per round)}``."""
    rows = _validate(measurements)
    table: list[GammaRow] = []
    chosen, stop_reason, stopped = rows[0][0], "no larger gamma was measured", False
    for idx, (gamma, c, k) in enumerate(rows):
        row = GammaRow(gamma, c, k, c / k, None, None, None, None)
        if idx > 0:
            _, c0, k0 = rows[idx - 1]
            row.delta_round_time_s, row.delta_committed = c - c0, k - k0
            if k > k0:
                row.marginal_time_per_token_s = (c - c0) / (k - k0)
                row.extend = row.marginal_time_per_token_s < c0 / k0
            else:
                row.extend = False
            if not stopped:
                if row.extend:
                    chosen = gamma
                else:
                    stopped = True
                    stop_reason = (
                        f"extending {rows[idx - 1][0]} -> {gamma} adds no committed tokens"
                        if k <= k0
                        else f"extending {rows[idx - 1][0]} -> {gamma} costs "
                        f"{row.marginal_time_per_token_s:.6g} s per extra token >= "
                        f"C/K = {c0 / k0:.6g} s"
                    )
        table.append(row)
    argmin = min(table, key=lambda r: (r.time_per_token_s, r.gamma)).gamma
    return GammaSelection(chosen=chosen, argmin=argmin, stop_reason=stop_reason, table=table)


def gamma_table_from_metrics(metrics_by_gamma: Mapping[int, Any]) -> dict[int, tuple[float, float]]:
    """``{gamma: (round_time_mean_s, committed_per_round)}`` from ``{gamma: DecodeMetrics or its
    dict}``, ready for :func:`select_gamma`."""
    out = {}
    for gamma, m in metrics_by_gamma.items():
        get = m.get if isinstance(m, dict) else lambda name, _m=m: getattr(_m, name, None)
        c, k = get("round_time_mean_s"), get("committed_per_round")
        if c is None or k is None:
            raise ValueError(
                f"metrics for gamma {gamma} lack round_time_mean_s/committed_per_round (no rounds?)"
            )
        out[gamma] = (c, k)
    return out
