"""The speculative generation loop and its vanilla baseline, through one target/cache/sampling path.

Usage::

    from eaglehead.decode import SamplingConfig, speculative_generate, PromptLookupDrafter
    res = speculative_generate(target, PromptLookupDrafter(vocab), input_ids, gamma=4,
                               sampling=SamplingConfig(temperature=0), max_new_tokens=128)
    res.tokens[0]   # new token ids of row 0;  res.rounds: per-round records (gamma, A, T_d, T_v, T_b)

One round = named stages: propose (drafter) -> verify (one target call over ``[last, d_1..d_gamma]``)
-> accept (``verify_chain``) -> commit (host bookkeeping: EOS, budget, streaming) -> crop (target
cache to ``L + A`` per row, drafter synchronised). One host sync per round, after accept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from .cache import RaggedCacheLM
from .drafters import Drafter, output_vocab_size
from .loop import OnToken, Rows, bad_logits, check_inputs, next_token, now, prefill_pending, raise_if_bad
from .sampling import SamplingConfig, probs
from .verify import verify_chain, verify_chain_greedy

DEFAULT_GAMMA = 4  # draft tokens per round when a command line is not told otherwise (generate, eval)


@dataclass
class RoundRecord:
    gamma: int | None  # draft length this round (0 when the budget leaves no room); None: a plain decoding
    # step of a method that does not draft (vanilla)
    accepted: list[int]  # per row: consecutive accepted drafts, 0..gamma (0 for inactive rows)
    committed: list[int]  # per row: tokens committed (A + 1, fewer after EOS/budget; 0 if inactive)
    active: list[bool]  # per row: still generating at the start of the round
    t_draft: float  # T_d: proposing + drafter synchronisation (s)
    t_verify: float  # T_v: the target forward + its sampling transform (s)
    t_rest: float  # T_b: acceptance, host sync, bookkeeping, target cache crop (s)


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # new tokens per row (EOS included when it ended the row)
    rounds: list[RoundRecord]
    token_times: list[list[float]]  # per row: perf_counter at which each token was committed
    t_start: float  # perf_counter before prefill
    t_end: float
    prompt_lengths: list[int]
    t_prefill: float = 0.0  # seconds spent in the target (and drafter) prefill
    finished_by_eos: list[bool] = field(default_factory=list)
    prefill_tokens: int = 0  # tokens per row the prefill committed (1 for vanilla: no round made them)




class _NoDrafter:
    """Proposes nothing: every round is a plain decoding step (used by ``vanilla_generate``)."""

    feature_layer_ids = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def begin(self, input_ids, valid, target_features=None) -> None:
        self._bsz, self._dev = input_ids.shape[0], input_ids.device

    def propose(self, gamma, sampling, generator=None):
        return (torch.zeros(self._bsz, 0, dtype=torch.long, device=self._dev),
                torch.zeros(self._bsz, 0, self.vocab_size, device=self._dev))

    def commit(self, n_accepted, draft, next_token, target_features=None) -> None:
        pass


@torch.no_grad()
def speculative_generate(
    target: nn.Module,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int,
    sampling: SamplingConfig,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    on_token: OnToken | None = None,
) -> GenerationResult:
    """Generate with the exact linear-chain verifier; the output is distributed as the target's.

    ``input_ids [B, T]`` left-padded when rows differ (``attention_mask`` 1 for real tokens). Rows
    accept different counts; a row stops at EOS (included) or after ``max_new_tokens``.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:  # the one check of gamma
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    return _generate(target, drafter, input_ids, gamma, sampling, max_new_tokens, eos_token_id,
                     attention_mask, generator, on_token)


@torch.no_grad()
def vanilla_generate(
    target: nn.Module,
    input_ids: torch.Tensor,
    *,
    sampling: SamplingConfig,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    on_token: OnToken | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding through the same target, cache and sampling code."""
    return _generate(target, _NoDrafter(output_vocab_size(target)), input_ids, None, sampling, max_new_tokens,
                     eos_token_id, attention_mask, generator, on_token)


def _generate(target, drafter, input_ids, gamma: int | None, sampling, max_new_tokens, eos_token_id, attention_mask,
              generator, on_token) -> GenerationResult:
    """The loop: prefill, then rounds of propose -> verify -> accept -> commit -> crop until every row is done."""
    valid = check_inputs(target, input_ids, attention_mask, gamma, max_new_tokens, sampling)
    vocab = output_vocab_size(target)
    if drafter.vocab_size != vocab:
        raise ValueError(
            f"drafter vocabulary size {drafter.vocab_size} does not match the target's {vocab}: "
            "the drafter must propose distributions over the target's vocabulary"
        )
    rows = Rows.start(input_ids.shape[0], eos_token_id, max_new_tokens, on_token)
    runner = RaggedCacheLM(target, drafter.feature_layer_ids)
    target.eval()
    t_start = now(input_ids.device)
    last = _prefill(runner, drafter, input_ids, valid, gamma is None, sampling, generator, rows)
    t_prefill = now(input_ids.device) - t_start
    rounds: list[RoundRecord] = []
    while not all(rows.done):
        # Never draft past the budget: a round commits at most g + 1 tokens.
        g = None if gamma is None else min(gamma, rows.room() - 1)
        record, last = _round(runner, drafter, last, g, sampling, generator, rows)
        rounds.append(record)
    return GenerationResult(tokens=rows.tokens, rounds=rounds, token_times=rows.times, t_start=t_start,
                            t_end=now(input_ids.device), prompt_lengths=valid.long().sum(1).tolist(),
                            t_prefill=t_prefill, finished_by_eos=rows.by_eos, prefill_tokens=int(gamma is None))


def _prefill(runner, drafter, input_ids, valid, plain: bool, sampling, generator, rows: Rows) -> torch.Tensor:
    """Fill the target's cache with the prompt; returns the pending last token ``[B]`` (module doc's convention).

    ``plain`` (vanilla) prefills the whole prompt in one call and takes the first token from its last logits,
    as transformers' generate() does: one forward fewer than prefill + a draft-free round, and the same
    computation and random draw as that round. Otherwise the last prompt token is left pending
    (:func:`~.loop.prefill_pending`)."""
    if not plain:
        return prefill_pending(runner, drafter, input_ids, valid)
    bsz = input_ids.shape[0]
    runner.reset(bsz)
    out = runner.forward(input_ids, valid, last_only=True)
    y = next_token(out.logits, sampling, generator)
    host = torch.cat([y, bad_logits(out.logits).long().view(1)]).tolist()
    raise_if_bad(host[-1])
    rows.commit([[]] * bsz, [0] * bsz, host[:bsz], time.perf_counter())
    drafter.begin(input_ids, valid, None)
    return y


def _round(runner, drafter, last, g: int | None, sampling, generator, rows: Rows) -> tuple[RoundRecord, torch.Tensor]:
    """One round over ``[last, d_1..d_g]``; ``g`` None: a plain decoding step (the method does not draft).
    Returns the round's record and the new pending token ``[B]``."""
    device, bsz, n = last.device, last.shape[0], g or 0
    tapped = drafter.feature_layer_ids is not None
    t0 = now(device)
    draft, q = drafter.propose(n, sampling, generator)  # [B, n], [B, n, V]
    t1 = now(device)
    out = runner.forward(torch.cat([last[:, None], draft], 1), want_features=tapped)
    if n == 0:  # nothing to verify: sample p directly (greedy: the logits' argmax)
        y = next_token(out.logits, sampling, generator)
        t2 = now(device)
        n_acc = torch.zeros_like(y)
    elif sampling.greedy:  # the same verdict as verify_chain on the one-hot p, without building it
        t2 = now(device)
        n_acc, y = verify_chain_greedy(out.logits, draft)
    else:
        p = probs(out.logits, sampling)  # [B, n+1, V]
        t2 = now(device)
        n_acc, y = verify_chain(p, q, draft, generator)
    host = torch.cat([n_acc, y, draft.flatten(), bad_logits(out.logits).long().view(1)]).tolist()  # one sync
    raise_if_bad(host[-1])
    acc_list, y_list = host[:bsz], host[bsz:2 * bsz]
    draft_rows = [host[2 * bsz + b * n: 2 * bsz + (b + 1) * n] for b in range(bsz)]
    active = [not d for d in rows.done]
    committed = rows.commit(draft_rows, acc_list, y_list, time.perf_counter())
    # Crop: the target keeps [last, d_1..d_A] of this call; y is pending for the next one.
    runner.keep_recent(n + 1, [a + 1 for a in acc_list])
    t3 = now(device)
    drafter.commit(acc_list, draft, y, out.features)
    t4 = now(device)
    record = RoundRecord(gamma=g, accepted=[a if act else 0 for a, act in zip(acc_list, active)],
                         committed=committed, active=active, t_draft=(t1 - t0) + (t4 - t3), t_verify=t2 - t1,
                         t_rest=t3 - t2)
    return record, y


