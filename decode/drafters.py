"""Drafters: anything that proposes ``gamma`` tokens together with the distributions they came from.

Protocol (what ``speculative_generate`` calls, in this order):

* ``begin(input_ids [B, T], valid [B, T], target_features)``: the full (left-padded) prompt;
  ``target_features`` are the target's fused features for ``input_ids[:, :-1]`` when the drafter
  asked for them through ``feature_layer_ids``, else ``None``.
* ``propose(gamma, sampling, generator) -> (draft [B, gamma] long, q [B, gamma, V] float32)``, with
  ``q`` in the *target* vocabulary and exactly the distribution each draft token was drawn from.
* ``commit(n_accepted: list[int], draft, next_token [B], target_features)``: after verification,
  synchronise with the committed prefix (``draft[:, :A] + [next_token]`` per row).
  ``target_features [B, gamma+1, k*H]`` come from the verification forward over
  ``[last, d_1..d_gamma]`` (rows ``0..A`` are valid); no extra target pass is made.

Attributes: ``vocab_size`` (the target vocabulary the drafter proposes in) and
``feature_layer_ids`` (target layers whose features the drafter needs, or ``None``).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from eaglehead.builtin.models import output_vocab_size

from .cache import RaggedCacheLM
from .sampling import SamplingConfig, probs, sample_from


class Drafter(Protocol):
    vocab_size: int
    feature_layer_ids: list[int] | None

    def begin(self, input_ids: torch.Tensor, valid: torch.Tensor, target_features: torch.Tensor | None) -> None: ...

    def propose(
        self, gamma: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def commit(
        self,
        n_accepted: list[int],
        draft: torch.Tensor,
        next_token: torch.Tensor,
        target_features: torch.Tensor | None,
    ) -> None: ...


class DraftModelDrafter:
    """Classic speculative sampling: a separate small causal LM with its own ragged KV cache.

    The draft cache holds every committed token except the *pending* ones: the token sampled last
    (``next_token``), and after a fully accepted round also ``d_gamma``, which was sampled but never
    fed. The next ``propose`` feeds the pending tokens first (charged to drafting).
    """

    feature_layer_ids = None

    def __init__(self, model: nn.Module, sampling: SamplingConfig | None = None):
        self.model = model.eval()
        self.runner = RaggedCacheLM(model)
        self.vocab_size = output_vocab_size(model)
        self.sampling = sampling  # None: use the target's sampling config
        self._pending: torch.Tensor | None = None  # [B, Tp]
        self._pending_valid: torch.Tensor | None = None
        self._fed_recent = 0

    def begin(self, input_ids, valid, target_features=None) -> None:
        self.runner.reset(input_ids.shape[0])
        if input_ids.shape[1] > 1:
            self.runner.forward(input_ids[:, :-1], valid[:, :-1], last_only=True)
        self._pending = input_ids[:, -1:]
        self._pending_valid = valid[:, -1:]

    @torch.no_grad()
    def propose(self, gamma, sampling, generator=None):
        sampling = self.sampling or sampling
        bsz = self._pending.shape[0]
        if gamma == 0:
            self._fed_recent = 0
            return self._pending.new_zeros(bsz, 0), torch.zeros(bsz, 0, self.vocab_size, device=self._pending.device)
        out = self.runner.forward(self._pending, self._pending_valid, last_only=True)
        drafts, qs = [], []
        for i in range(gamma):
            q_i = probs(out.logits[:, -1], sampling)  # [B, V]
            d_i = sample_from(q_i, generator)  # [B]
            drafts.append(d_i)
            qs.append(q_i)
            if i < gamma - 1:
                out = self.runner.forward(d_i[:, None], last_only=True)
        self._fed_recent = self._pending.shape[1] + gamma - 1
        return torch.stack(drafts, 1), torch.stack(qs, 1)

    def commit(self, n_accepted, draft, next_token, target_features=None) -> None:
        gamma = draft.shape[1]
        if gamma == 0:  # nothing was fed: the new token joins the pending ones
            self._pending = torch.cat([self._pending, next_token[:, None]], 1)
            self._pending_valid = torch.cat([self._pending_valid, torch.ones_like(next_token[:, None], dtype=torch.bool)], 1)
            return
        n_pending = self._pending.shape[1]
        # Keep the pending block and the accepted drafts that were fed (d_1..d_{gamma-1}).
        self.runner.keep_recent(self._fed_recent, [n_pending + min(a, gamma - 1) for a in n_accepted])
        if any(a == gamma for a in n_accepted):
            full = torch.tensor([a == gamma for a in n_accepted], device=draft.device)
            # Rows that accepted everything still owe d_gamma to the draft cache; others get a hole.
            self._pending = torch.stack([torch.where(full, draft[:, -1], next_token), next_token], 1)
            self._pending_valid = torch.stack([full, torch.ones_like(full)], 1)
        else:
            self._pending = next_token[:, None]
            self._pending_valid = torch.ones_like(self._pending, dtype=torch.bool)


class PromptLookupDrafter:
    """Prompt lookup decoding: copy the continuation of the latest earlier match of the last n-gram.

    Deterministic, so each ``q`` row is one-hot at the proposed token and verification reduces to
    accepting with probability ``p(d)``. Longer n-grams are tried first (``max_ngram`` down to
    ``min_ngram``). Rows without a match propose their last token (any deterministic proposal is
    exact; this one is cheap and often right in repetitive text).
    """

    feature_layer_ids = None

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, capacity: int = 4096):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.vocab_size = int(vocab_size)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.capacity = capacity
        self.buf: torch.Tensor | None = None  # [B, capacity] committed tokens, left-aligned, -1 beyond length
        self.lengths: torch.Tensor | None = None  # [B]

    def begin(self, input_ids, valid, target_features=None) -> None:
        bsz, t = input_ids.shape
        cap = max(self.capacity, 2 * t + 64)
        self.buf = torch.full((bsz, cap), -1, dtype=torch.long, device=input_ids.device)
        # Left-align each row's real tokens: a stable sort puts valid entries first, in order.
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices
        self.buf[:, :t] = torch.where(valid.gather(1, order), input_ids.gather(1, order), -1)
        self.lengths = valid.long().sum(1)

    def propose(self, gamma, sampling=None, generator=None):
        bsz = self.buf.shape[0]
        dev = self.buf.device
        if gamma == 0:
            return self.buf.new_zeros(bsz, 0), torch.zeros(bsz, 0, self.vocab_size, device=dev)
        rows = torch.arange(bsz, device=dev)
        last = self.buf[rows, (self.lengths - 1).clamp_min(0)]
        start = torch.full((bsz,), -1, dtype=torch.long, device=dev)  # continuation start per row
        width = int(self.lengths.max())
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if width < n + 1:
                continue
            windows = self.buf[:, :width].unfold(1, n, 1)  # [B, W, n], W = width - n + 1
            key_idx = (self.lengths[:, None] - n + torch.arange(n, device=dev)).clamp_min(0)
            key = self.buf.gather(1, key_idx)  # [B, n]
            pos = torch.arange(windows.shape[1], device=dev)
            # A match must end before the last token so at least one continuation token exists.
            ok = (windows == key[:, None, :]).all(-1) & (pos[None, :] + n <= self.lengths[:, None] - 1)
            ok &= (self.lengths >= n + 1)[:, None]
            latest = torch.where(ok, pos[None, :], -1).max(1).values  # [B]
            found = (latest >= 0) & (start < 0)
            start = torch.where(found, latest + n, start)
        idx = start[:, None] + torch.arange(gamma, device=dev)[None, :]  # [B, gamma]
        usable = (start[:, None] >= 0) & (idx < self.lengths[:, None])
        cont = self.buf.gather(1, idx.clamp(0, self.buf.shape[1] - 1))
        draft = torch.where(usable, cont, last[:, None])
        q = torch.zeros(bsz, gamma, self.vocab_size, device=dev)
        q.scatter_(-1, draft[..., None], 1.0)
        return draft, q

    def commit(self, n_accepted, draft, next_token, target_features=None) -> None:
        bsz, gamma = draft.shape
        dev = draft.device
        acc = torch.tensor(n_accepted, device=dev)
        need = int(self.lengths.max()) + gamma + 1
        if need > self.buf.shape[1]:
            grow = torch.full((bsz, max(need, 2 * self.buf.shape[1]) - self.buf.shape[1]), -1, dtype=torch.long, device=dev)
            self.buf = torch.cat([self.buf, grow], 1)
        # New tokens per row: draft[:A] then next_token at index A: [B, gamma+1], first A+1 valid.
        new = torch.cat([draft, next_token[:, None]], 1)
        j = torch.arange(gamma + 1, device=dev)[None, :]
        new = torch.where(j == acc[:, None], next_token[:, None], new)
        keep = j <= acc[:, None]
        pos = self.lengths[:, None] + j
        cur = self.buf.gather(1, pos)
        self.buf.scatter_(1, pos, torch.where(keep, new, cur))
        self.lengths = self.lengths + acc + 1
