"""A generation call answered by another engine (llama.cpp, vLLM) as the evaluation's ``GenerationResult``.

The engine returns the tokens, their streamed arrival times and its own counters, not per-round records.
:class:`EngineResult` keeps the counters beside the tokens (``engine_stats``; journaled and replayed like
any result), with ``rounds = []``: nothing per round is invented. :func:`engine_round_fields` turns the
counters into the round fields of :class:`~eaglehead.eval.metrics.DecodeMetrics`:

* ``committed`` = tokens after the first of each request (a vLLM call of B concurrent requests: ``requests``) (the first is sampled from the prompt's logits, as our loops'
  prefill token, and is not a round's); ``draft_rounds`` = rounds that carried a draft (the engine's
  counter); rounds without a draft (the engine skips drafting when one token of budget is left, or the
  n-gram finds no match) = ``committed - accepted - draft_rounds`` (each round commits its accepted drafts
  plus one token; never below 0);
* ``tau`` = ``tau_drafting`` = 1 + accepted / draft rounds (llama.cpp's own "mean len"; 1 when nothing was
  drafted); ``tau_committed`` = committed / all rounds; ``truncated_row_rounds`` unknown (``None``);
  survival comes from accepted tokens by draft position where the engine counts them (vLLM) and is empty
  otherwise (llama.cpp); the depth/gamma values per round are not available (empty); ``verified_mean`` = drafted /
  draft rounds (per round that carried a draft, like tau, so acceptance_rate = accepted_mean / verified_mean);
* time: the engine's ``predicted_ms`` (decoding after the first token) is the total round time, all booked
  as T_v (the engine does not split drafting from verification), so ``time_per_token_s`` = predicted_ms /
  committed, the same convention as our loops (decode time over tokens committed by rounds);
  ``engine_time_per_token_s`` = predicted_ms / predicted_n is the engine's own figure (it counts the first
  token too, so it reads slightly lower).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglehead.decode import GenerationResult

STAT_KEYS = ("engine", "n_max", "draft_rounds", "drafted", "accepted", "predicted_n", "predicted_ms", "prompt_n",
             "prompt_ms", "wall_s")  # vLLM's add "requests" (concurrent rows) and "accepted_per_pos"


@dataclass
class EngineResult(GenerationResult):
    """A :class:`GenerationResult` of one request (batch 1) with the engine's counters in ``engine_stats``
    (``STAT_KEYS``: engine name, configured draft length, draft rounds, drafted and accepted tokens,
    predicted tokens and ms, prompt tokens and ms, the call's wall seconds)."""

    engine_stats: dict[str, Any] = field(default_factory=dict)


def engine_round_fields(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The round fields of ``DecodeMetrics`` from the counters of several calls (module docstring)."""
    draft_rounds = sum(int(s["draft_rounds"]) for s in stats)
    accepted = sum(int(s["accepted"]) for s in stats)
    drafted = sum(int(s["drafted"]) for s in stats)
    committed = sum(_committed(s) for s in stats)
    plain = sum(max(_committed(s) - int(s["accepted"]) - int(s["draft_rounds"]), 0) for s in stats)
    rounds = draft_rounds + plain
    decode_s = sum(float(s["predicted_ms"]) for s in stats) / 1000.0
    acc_mean = accepted / draft_rounds if draft_rounds else (0.0 if rounds else None)
    tau = None if acc_mean is None else 1.0 + acc_mean
    survival, conditional = _survival(stats, draft_rounds)
    return dict(
        rounds=rounds, row_rounds=rounds, gamma_max=max(int(s["n_max"]) for s in stats), gamma_values=[],
        depth_values=[], verified_mean=_ratio(drafted, draft_rounds), drafted=drafted, accepted=accepted,
        committed_tokens=committed, truncated_row_rounds=None, accepted_mean=acc_mean, tau=tau,
        tau_committed=committed / rounds if rounds else None, tau_drafting=tau if draft_rounds else None,
        survival=survival, conditional=conditional, acceptance_rate=accepted / drafted if drafted else None,
        t_draft_mean_s=0.0 if rounds else None, t_verify_mean_s=decode_s / rounds if rounds else None,
        t_rest_mean_s=0.0 if rounds else None, round_time_mean_s=decode_s / rounds if rounds else None,
        round_time_total_s=decode_s, committed_per_round=committed / rounds if rounds else None,
        time_per_token_s=decode_s / committed if committed else None,
        engine_time_per_token_s=_ratio(decode_s, sum(int(s["predicted_n"]) for s in stats)))


def _committed(s: dict[str, Any]) -> int:
    """Tokens committed by rounds in one call: every request's tokens after its first."""
    return max(int(s["predicted_n"]) - int(s.get("requests", 1)), 0)


def _survival(stats: list[dict[str, Any]], draft_rounds: int) -> tuple[list, list]:
    """Pr(A >= i) and Pr(A >= i | A >= i-1) from accepted tokens by draft position (vLLM's counters: position i
    is accepted only with every position before it), when every call has them and drafted a fixed length."""
    per_pos = [s.get("accepted_per_pos") for s in stats]
    if not draft_rounds or any(p is None for p in per_pos) or len({int(s["n_max"]) for s in stats}) != 1:
        return [], []
    width = max(len(p) for p in per_pos)
    totals = [sum(p[i] for p in per_pos if i < len(p)) for i in range(width)]
    survival = [t / draft_rounds for t in totals]
    conditional = [(survival[i] / survival[i - 1] if survival[i - 1] else None) if i else survival[0]
                   for i in range(width)]
    return survival, conditional


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None
