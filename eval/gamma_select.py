"""Draft-length selection: the greedy rule on one table (:func:`select_gamma`) and the choice that
noise cannot flip, on medians over repeats and a fitted round-time model (:func:`choose_gamma`).

Usage::

    from eaglehead.eval.gamma_select import select_gamma, gamma_table_from_metrics
    sel = select_gamma({1: (0.030, 1.7), 2: (0.034, 2.2), 3: (0.038, 2.5)})  # gamma: (C_bar, K_bar)
    sel.chosen, sel.argmin, sel.to_dict()["table"]
    sel = select_gamma(gamma_table_from_metrics({g: compute_metrics(results_g) for g in gammas}))
    choice = choose_gamma(gamma_samples_from_metrics({g: [metrics of repeat r for r in range(R)] for g in gammas}))
    choice.chosen, choice.confidence, choice.within_noise, choice.note

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
import random
import statistics
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


# ------------------------------------------------------------------ the choice noise cannot flip

BOOTSTRAP_RESAMPLES = 200
Sample = tuple[float, float, float, float]  # one repeat of one gamma: (T_d, T_v, T_b) mean s per round, K_bar


@dataclass
class RoundTimeModel:
    """Round time C(gamma) = T_d + T_v + T_b, each fitted as a line in gamma (Theil-Sen: the median of
    the pairwise slopes, so one outlying gamma cannot tilt it): drafting costs ``draft_s_per_step`` per
    drafted token, verifying ``verify_s_per_token`` per extra token in the target's forward
    (``gamma + 1`` tokens per row), the rest ``rest_s_per_step``; the ``*_fixed_s`` are the intercepts."""

    draft_fixed_s: float
    draft_s_per_step: float
    verify_fixed_s: float
    verify_s_per_token: float
    rest_fixed_s: float
    rest_s_per_step: float

    def round_time(self, gamma: int) -> float:
        c = (self.draft_fixed_s + self.draft_s_per_step * gamma + self.verify_fixed_s
             + self.verify_s_per_token * (gamma + 1) + self.rest_fixed_s + self.rest_s_per_step * gamma)
        return max(c, 1e-12)  # a line extrapolated below zero is still a positive time


@dataclass
class GammaChoiceRow:
    gamma: int
    repeats: int
    committed_per_round: float  # K_bar, median over repeats
    round_time_median_s: float  # C_bar, median over repeats
    round_time_modelled_s: float
    time_per_token_median_s: float  # median over repeats of C_r / K_r
    time_per_token_min_s: float
    time_per_token_max_s: float
    time_per_token_modelled_s: float  # modelled C / median K


@dataclass
class GammaChoice:
    """``chosen``: the recommended gamma; ``basis`` says why ("model": the greedy rule on the modelled
    round time; "measured": with >= 3 repeats, a gamma measured faster beyond the spread of repeats,
    which a line cannot capture). ``confidence``: the share of resamples (``confidence_method``) whose
    choice equals ``chosen`` (``None`` when nothing can be resampled). ``within_noise``: the other
    gammas whose measured time per token lies within noise of the chosen one's."""

    chosen: int
    basis: str
    measured_rule: int  # select_gamma on the medians alone
    measured_argmin: int
    modelled_argmin: int
    confidence: float | None
    confidence_method: str
    noise_rel: float  # relative noise of a time per token used for the ties
    within_noise: list[int]
    note: str
    stop_reason: str
    model: RoundTimeModel
    table: list[GammaChoiceRow]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _theil_sen(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line; a single point gives a flat line through it."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    slope = statistics.median(slopes) if slopes else 0.0
    return statistics.median([y - slope * x for x, y in zip(xs, ys)]), slope


def fit_round_time(medians: Mapping[int, tuple[float, float, float]]) -> RoundTimeModel:
    """The :class:`RoundTimeModel` of ``{gamma: (T_d, T_v, T_b)}`` (medians over repeats)."""
    gs = sorted(medians)
    parts = [_theil_sen([float(g) for g in gs], [medians[g][i] for g in gs]) for i in range(3)]
    (d0, d1), (v0, v1), (b0, b1) = parts
    return RoundTimeModel(d0, d1, v0 - v1, v1, b0, b1)  # T_v = (v0 - v1) + v1 * (gamma + 1)


def _validate_samples(samples: Mapping[int, list[Sample]]) -> dict[int, list[Sample]]:
    if not isinstance(samples, Mapping) or not samples:
        raise ValueError("samples must be a non-empty mapping {gamma: [(T_d, T_v, T_b, K_bar) per repeat]}")
    out = {}
    for gamma, reps in samples.items():
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
            raise ValueError(f"samples: gamma must be an int >= 0, got {gamma!r}")
        reps = list(reps)
        if not reps:
            raise ValueError(f"samples[{gamma}] has no repeats")
        clean = []
        for r, rep in enumerate(reps):
            try:
                td, tv, tb, k = (float(v) for v in rep)
            except (TypeError, ValueError):
                raise ValueError(f"samples[{gamma}][{r}] must be (T_d, T_v, T_b, K_bar), got {rep!r}") from None
            if not all(math.isfinite(v) and v >= 0 for v in (td, tv, tb)) or td + tv + tb <= 0:
                raise ValueError(f"samples[{gamma}][{r}]: round times must be finite, >= 0 s and not all 0")
            if not (math.isfinite(k) and k > 0):
                raise ValueError(f"samples[{gamma}][{r}]: K_bar must be finite and > 0, got {k}")
            clean.append((td, tv, tb, k))
        out[gamma] = clean
    return dict(sorted(out.items()))


def _model_choice(samples: dict[int, list[Sample]]) -> tuple[int, RoundTimeModel, GammaSelection, dict]:
    med = {g: tuple(statistics.median(r[i] for r in reps) for i in range(4)) for g, reps in samples.items()}
    model = fit_round_time({g: m[:3] for g, m in med.items()})
    sel = select_gamma({g: (model.round_time(g), med[g][3]) for g in med})
    return sel.chosen, model, sel, med


def choose_gamma(samples: Mapping[int, list[Sample]], *, seed: int = 0,
                 resamples: int = BOOTSTRAP_RESAMPLES) -> GammaChoice:
    """Choose gamma from ``{gamma: [(T_d, T_v, T_b, K_bar) per repeat]}`` (one serving state, tune split).

    1. Medians over repeats per gamma; the round-time model is fitted to them (:func:`fit_round_time`).
    2. The greedy rule (:func:`select_gamma`) runs on (modelled C, median K): a single outlying timing
       moves neither a median of >= 3 repeats nor a Theil-Sen line over >= 3 gammas.
    3. With >= 3 repeats, a gamma whose *slowest* repeat beats the chosen gamma's *fastest* one is a
       real effect the line misses: it is chosen instead (``basis="measured"``).
    4. Confidence: the share of resamples that choose the same gamma: a bootstrap over repeats (>= 2
       repeats), else refits leaving one gamma out (>= 3 gammas).
    5. Ties: gammas whose measured median time per token is within the noise of the chosen one's
       (noise = the larger relative spread of the two gammas' repeats: the scaled median absolute
       deviation with >= 3 repeats, the half-range with 2; with one repeat, the scaled median relative
       residual of the round-time fit). The chosen one has the better modelled time.
    """
    samples = _validate_samples(samples)
    chosen, model, sel, med = _model_choice(samples)
    rows = []
    for g, reps in samples.items():
        tpt = [(r[0] + r[1] + r[2]) / r[3] for r in reps]
        c_med = sum(med[g][:3])
        rows.append(GammaChoiceRow(g, len(reps), med[g][3], c_med, model.round_time(g), statistics.median(tpt),
                                   min(tpt), max(tpt), model.round_time(g) / med[g][3]))
    by_g = {r.gamma: r for r in rows}
    measured_rule = select_gamma({r.gamma: (r.round_time_median_s, r.committed_per_round) for r in rows}).chosen
    measured_argmin = min(rows, key=lambda r: (r.time_per_token_median_s, r.gamma)).gamma
    modelled_argmin = min(rows, key=lambda r: (r.time_per_token_modelled_s, r.gamma)).gamma
    n_rep = min(r.repeats for r in rows)
    basis, stop_reason = "model", sel.stop_reason
    best = by_g[measured_argmin]
    if n_rep >= 3 and best.time_per_token_max_s < by_g[chosen].time_per_token_min_s:
        basis = "measured"
        stop_reason = (f"gamma {measured_argmin}'s slowest repeat beats gamma {chosen}'s fastest: measured, "
                       "not modelled")
        chosen = measured_argmin

    rng = random.Random(seed)
    picks: list[int] = []
    if n_rep >= 2:
        method = f"bootstrap over repeats ({resamples} resamples)"
        for _ in range(resamples):
            boot = {g: [rng.choice(reps) for _ in reps] for g, reps in samples.items()}
            picks.append(_model_choice(boot)[0])
    elif len(samples) >= 3:
        method = f"refits leaving one gamma's timings out ({len(samples)} refits)"
        for drop in samples:
            rest = {g: m[:3] for g, m in med.items() if g != drop}
            m = fit_round_time(rest)
            picks.append(select_gamma({g: (m.round_time(g), med[g][3]) for g in med}).chosen)
    else:
        method = "none: one repeat of fewer than 3 gammas"
    confidence = sum(p == chosen for p in picks) / len(picks) if picks else None

    if n_rep >= 3:  # scaled median absolute deviation: one outlying repeat does not widen it
        half = {g: 1.4826 * statistics.median(abs((rep[0] + rep[1] + rep[2]) / rep[3] - by_g[g].time_per_token_median_s)
                                              for rep in samples[g]) / by_g[g].time_per_token_median_s for g in by_g}
    elif n_rep == 2:
        half = {g: (r.time_per_token_max_s - r.time_per_token_min_s) / 2 / r.time_per_token_median_s
                for g, r in by_g.items()}
    else:
        resid = [abs(r.round_time_median_s - r.round_time_modelled_s) / r.round_time_modelled_s for r in rows]
        scale = 1.4826 * statistics.median(resid) if len(rows) >= 3 else 0.0
        half = {g: scale for g in by_g}
    ref = by_g[chosen]
    ties = [g for g, r in by_g.items() if g != chosen and
            abs(r.time_per_token_median_s - ref.time_per_token_median_s)
            <= max(half[g], half[chosen]) * ref.time_per_token_median_s]
    note = _note(chosen, basis, ties, by_g, confidence, method, measured_argmin, half)
    return GammaChoice(chosen=chosen, basis=basis, measured_rule=measured_rule, measured_argmin=measured_argmin,
                       modelled_argmin=modelled_argmin, confidence=confidence, confidence_method=method,
                       noise_rel=max(half.values()), within_noise=ties, note=note, stop_reason=stop_reason,
                       model=model, table=rows)


def _note(chosen, basis, ties, by_g, confidence, method, measured_argmin, half) -> str:
    def ms(g):
        return f"{1e3 * by_g[g].time_per_token_median_s:.3g}"

    parts = [f"gamma {chosen} ({basis}; {ms(chosen)} ms/token measured, "
             f"{1e3 * by_g[chosen].time_per_token_modelled_s:.3g} modelled)"]
    if confidence is not None:
        parts.append(f"chosen by {100 * confidence:.0f}% of {method}")
    if ties:
        noise = max(half[g] for g in [chosen, *ties])
        parts.append(f"within noise (+-{100 * noise:.0f}%) of gamma " + ", ".join(f"{g} ({ms(g)} ms/token)"
                                                                              for g in ties)
                     + (f": gamma {chosen} has the better modelled time" if basis == "model" else ""))
    elif measured_argmin != chosen:
        parts.append(f"gamma {measured_argmin} measured faster ({ms(measured_argmin)} ms/token), more than "
                     "one line through all gammas supports")
    far = [f"{g} ({r.round_time_median_s / r.round_time_modelled_s:.1f}x)" for g, r in by_g.items()
           if not 2 / 3 <= r.round_time_median_s / r.round_time_modelled_s <= 1.5]
    if far:
        parts.append("measured round time far from the model (outliers?) at gamma " + ", ".join(far))
    return "; ".join(parts)


def gamma_samples_from_metrics(metrics_by_gamma: Mapping[int, list[Any]]) -> dict[int, list[Sample]]:
    """``{gamma: [(T_d, T_v, T_b, K_bar) per repeat]}`` from ``{gamma: [DecodeMetrics or dict per
    repeat]}``, ready for :func:`choose_gamma`."""
    out: dict[int, list[Sample]] = {}
    for gamma, reps in metrics_by_gamma.items():
        out[gamma] = []
        for m in reps:
            get = m.get if isinstance(m, dict) else lambda name, _m=m: getattr(_m, name, None)
            vals = [get(k) for k in ("t_draft_mean_s", "t_verify_mean_s", "t_rest_mean_s", "committed_per_round")]
            if any(v is None for v in vals):
                raise ValueError(f"metrics for gamma {gamma} lack round times or committed_per_round (no rounds?)")
            out[gamma].append(tuple(vals))
    return out
