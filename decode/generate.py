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
from typing import Callable

import torch
from torch import nn

from eaglehead.builtin.devices import sync

from .cache import RaggedCacheLM
from .drafters import Drafter, output_vocab_size
from .sampling import SamplingConfig, probs, sample_from
from .verify import verify_chain

DEFAULT_GAMMA = 4  # draft tokens per round when a command line is not told otherwise (generate, eval)


@dataclass
class RoundRecord:
    gamma: int  # draft length used this round (0 for a plain decoding step)
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


OnToken = Callable[[int, int, float], None]  # (row, token_id, perf_counter timestamp)


def _now(device: torch.device) -> float:
    sync(device)
    return time.perf_counter()


def _check_inputs(target, input_ids, attention_mask, gamma, max_new_tokens, sampling) -> torch.Tensor:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling must be an eaglehead.decode.SamplingConfig, got {type(sampling).__name__}")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError(f"input_ids must be a LongTensor [batch, length], got {getattr(input_ids, 'shape', input_ids)!r}")
    if input_ids.shape[1] < 1 or input_ids.shape[0] < 1:
        raise ValueError(f"input_ids must hold at least one token per row, got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        valid = torch.ones_like(input_ids, dtype=torch.bool)
    else:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}")
        valid = attention_mask.to(input_ids.device).bool()
        if not bool(valid[:, -1].all()):
            raise ValueError("attention_mask must be left-padded: the last column must be 1 in every row")
    vocab = output_vocab_size(target)
    if int(input_ids.max()) >= vocab or int(input_ids.min()) < 0:
        raise ValueError(f"input_ids hold ids outside the target vocabulary [0, {vocab})")
    limit = getattr(target.config, "max_position_embeddings", None) or getattr(target.config, "n_positions", None)
    longest = int(valid.long().sum(1).max())
    if limit is not None and longest + max_new_tokens + (gamma or 0) > limit:
        raise ValueError(
            f"prompt length {longest} + max_new_tokens {max_new_tokens} + gamma {gamma} exceeds the target's "
            f"context of {limit} positions (max_position_embeddings)"
        )
    return valid


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
    valid = _check_inputs(target, input_ids, attention_mask, gamma, max_new_tokens, sampling)
    vocab = output_vocab_size(target)
    if drafter.vocab_size != vocab:
        raise ValueError(
            f"drafter vocabulary size {drafter.vocab_size} does not match the target's {vocab}: "
            "the drafter must propose distributions over the target's vocabulary"
        )
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    device = input_ids.device
    bsz = input_ids.shape[0]
    feature_ids = drafter.feature_layer_ids
    runner = RaggedCacheLM(target, feature_ids)
    target.eval()

    tokens: list[list[int]] = [[] for _ in range(bsz)]
    times: list[list[float]] = [[] for _ in range(bsz)]
    done = [False] * bsz
    by_eos = [False] * bsz

    t_start = _now(device)
    runner.reset(bsz)
    features = None
    if gamma is None:
        # Vanilla prefills the whole prompt in one call and takes the first token from its last
        # logits, as transformers' generate() does: one forward fewer than prefill + a gamma-0 round,
        # and the same computation and random draw as that round.
        out = runner.forward(input_ids, valid, last_only=True)
        y = _next_token(out.logits, sampling, generator)
        host = torch.cat([y, _bad_logits(out.logits).long().view(1)]).tolist()
        _raise_if_bad(host[-1])
        _commit([[]] * bsz, [0] * bsz, host[:bsz], tokens, times, done, by_eos, eos, max_new_tokens, on_token,
                time.perf_counter())
        drafter.begin(input_ids, valid, None)
        last = y
    else:
        if input_ids.shape[1] > 1:
            out = runner.forward(input_ids[:, :-1], valid[:, :-1], last_only=feature_ids is None,
                                 want_features=feature_ids is not None)
            features = out.features
        drafter.begin(input_ids, valid, features)
        last = input_ids[:, -1]
    t_prefill = _now(device) - t_start

    rounds: list[RoundRecord] = []
    while not all(done):
        # Never draft past the budget: a round commits at most g + 1 tokens.
        room = max(max_new_tokens - len(tokens[b]) for b in range(bsz) if not done[b])
        g = 0 if gamma is None else min(gamma, room - 1)
        t0 = _now(device)
        draft, q = drafter.propose(g, sampling, generator)  # [B, g], [B, g, V]
        t1 = _now(device)
        out = runner.forward(torch.cat([last[:, None], draft], 1), want_features=feature_ids is not None)
        if g == 0:  # a plain decoding step: sample p directly (greedy: the logits' argmax), no chain to verify
            y = _next_token(out.logits, sampling, generator)
            t2 = _now(device)
            n_acc = torch.zeros_like(y)
        else:
            p = probs(out.logits, sampling)  # [B, g+1, V]
            t2 = _now(device)
            n_acc, y = verify_chain(p, q, draft, generator)
        host = torch.cat([n_acc, y, draft.flatten(), _bad_logits(out.logits).long().view(1)]).tolist()  # one sync
        _raise_if_bad(host[-1])
        acc_list, y_list = host[:bsz], host[bsz:2 * bsz]
        draft_rows = [host[2 * bsz + b * g: 2 * bsz + (b + 1) * g] for b in range(bsz)]

        now = time.perf_counter()
        active = [not d for d in done]
        committed = _commit(draft_rows, acc_list, y_list, tokens, times, done, by_eos, eos, max_new_tokens,
                            on_token, now)

        # Crop: the target keeps [last, d_1..d_A] of this call; y is pending for the next one.
        runner.keep_recent(g + 1, [a + 1 for a in acc_list])
        t3 = _now(device)
        drafter.commit(acc_list, draft, y, out.features)
        t4 = _now(device)
        last = y
        rounds.append(RoundRecord(
            gamma=g,
            accepted=[a if act else 0 for a, act in zip(acc_list, active)],
            committed=committed,
            active=active,
            t_draft=(t1 - t0) + (t4 - t3),
            t_verify=t2 - t1,
            t_rest=t3 - t2,
        ))
    return GenerationResult(tokens=tokens, rounds=rounds, token_times=times, t_start=t_start,
                            t_end=_now(device), prompt_lengths=valid.long().sum(1).tolist(),
                            t_prefill=t_prefill, finished_by_eos=by_eos, prefill_tokens=int(gamma is None))


def _next_token(logits: torch.Tensor, sampling: SamplingConfig, generator) -> torch.Tensor:
    """The token after the last position of ``logits [B, T, V]``: ``[B]``. Greedy takes the argmax of
    the logits directly (the first maximum, as ``probs``' one-hot does), skipping the one-hot."""
    if sampling.greedy:
        return logits[:, -1].argmax(-1)
    return sample_from(probs(logits[:, -1], sampling), generator)


def _bad_logits(logits: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor: ``logits`` hold NaN or +inf. One reduction: the maximum propagates NaN and
    is +inf when any entry is (it is -inf only for an all -inf row, which no distribution can come from)."""
    return ~torch.isfinite(logits.amax())


def _raise_if_bad(flag) -> None:
    if flag:
        raise ValueError("the target produced NaN or infinite logits (check the model's dtype and weights)")


def _commit(draft_rows, acc_list, y_list, tokens, times, done, by_eos, eos, max_new_tokens, on_token,
            now: float) -> list[int]:
    """Commit: host bookkeeping per row (EOS, budget, streaming), no tensor work; updates ``tokens``,
    ``times``, ``done`` and ``by_eos`` in place and returns the tokens committed per row."""
    committed = [0] * len(tokens)
    for b in range(len(tokens)):
        if done[b]:
            continue
        seq = draft_rows[b][: acc_list[b]] + [y_list[b]]
        seq = seq[: max_new_tokens - len(tokens[b])]
        for i, tok in enumerate(seq):
            if tok in eos:
                seq = seq[: i + 1]
                done[b] = by_eos[b] = True
                break
        tokens[b].extend(seq)
        times[b].extend([now] * len(seq))
        committed[b] = len(seq)
        if len(tokens[b]) >= max_new_tokens:
            done[b] = True
        if on_token is not None:
            for tok in seq:
                on_token(b, tok, now)
    return committed
