"""What every decoding loop here shares (the chain loop in :mod:`.generate`, the tree loop in
:mod:`.tree_generate`): input checks, the per-row host bookkeeping of committed tokens (EOS, budget,
streaming), the prompt prefill that leaves the last token pending, and the one-sync NaN check."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from eaglehead.builtin.devices import sync
from eaglehead.builtin.models import output_vocab_size

from .sampling import SamplingConfig, greedy_argmax, probs, sample_from

OnToken = Callable[[int, int, float], None]  # (row, token_id, perf_counter timestamp)


def now(device: torch.device) -> float:
    sync(device)
    return time.perf_counter()


def check_inputs(target, input_ids, attention_mask, gamma, max_new_tokens, sampling) -> torch.Tensor:
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


@dataclass
class Rows:
    """Host bookkeeping of every row: committed tokens and their times, whether it is done (and by EOS)."""

    tokens: list[list[int]]
    times: list[list[float]]
    done: list[bool]
    by_eos: list[bool]
    eos: set[int]
    max_new_tokens: int
    on_token: OnToken | None

    @classmethod
    def start(cls, bsz: int, eos_token_id, max_new_tokens: int, on_token: OnToken | None) -> Rows:
        eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
        return cls(tokens=[[] for _ in range(bsz)], times=[[] for _ in range(bsz)], done=[False] * bsz,
                   by_eos=[False] * bsz, eos=eos, max_new_tokens=max_new_tokens, on_token=on_token)

    def room(self) -> int:
        """The largest budget left to any row still generating."""
        return max(self.max_new_tokens - len(t) for t, d in zip(self.tokens, self.done) if not d)

    def commit(self, draft_rows: list[list[int]], acc_list: list[int], y_list: list[int], now: float) -> list[int]:
        """Commit ``draft_rows[b][:acc_list[b]] + [y_list[b]]`` of every active row, cut at EOS (kept) and at
        the budget; host bookkeeping only, no tensor work. Returns the tokens committed per row."""
        committed = [0] * len(self.tokens)
        for b, tokens in enumerate(self.tokens):
            if self.done[b]:
                continue
            seq = (draft_rows[b][: acc_list[b]] + [y_list[b]])[: self.max_new_tokens - len(tokens)]
            for i, tok in enumerate(seq):
                if tok in self.eos:
                    seq = seq[: i + 1]
                    self.done[b] = self.by_eos[b] = True
                    break
            tokens.extend(seq)
            self.times[b].extend([now] * len(seq))
            committed[b] = len(seq)
            if len(tokens) >= self.max_new_tokens:
                self.done[b] = True
            if self.on_token is not None:
                for tok in seq:
                    self.on_token(b, tok, now)
        return committed


def prefill_pending(runner, drafter, input_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Cache every prompt token but the last, which stays pending (the cache convention), and begin the
    drafter from the prompt (with the target's features of it, when it taps them). Returns the pending
    token ``[B]``.

    No logits of the prompt are used (its last token is fed in the first round), so the LM head runs on one row
    only (``last_only``) unless the drafter taps the final-normed state at the LM head's input (layer id ``L``).
    Every row's logits cost ``prompt x hidden x vocab`` multiply-adds: on SmolLM2 ~20% of a prefill's work
    (BENCHMARKS.md, "The verification's kv copy")."""
    runner.reset(input_ids.shape[0])
    features = None
    if input_ids.shape[1] > 1:
        tapped = drafter.feature_layer_ids is not None
        out = runner.forward(input_ids[:, :-1], valid[:, :-1], last_only=True, want_features=tapped)
        features = out.features
    drafter.begin(input_ids, valid, features)
    return input_ids[:, -1]


def next_token(logits: torch.Tensor, sampling: SamplingConfig, generator) -> torch.Tensor:
    """The token after the last position of ``logits [B, T, V]``: ``[B]``. Greedy takes the argmax of
    the logits directly (the first maximum, as ``probs``' one-hot does), skipping the one-hot."""
    if sampling.greedy:
        return greedy_argmax(logits[:, -1])
    return sample_from(probs(logits[:, -1], sampling), generator)


def bad_logits(logits: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor: ``logits`` hold NaN or +inf. One reduction: the maximum propagates NaN and
    is +inf when any entry is (it is -inf only for an all -inf row, which no distribution can come from)."""
    return ~torch.isfinite(logits.amax())


def raise_if_bad(flag) -> None:
    if flag:
        raise ValueError("the target produced NaN or infinite logits (check the model's dtype and weights)")
