"""The EAGLE-3 (and EAGLE-1 ablation) head as a drafter for ``speculative_generate``.

Alignment (the head's convention): draft row ``t`` pairs the target's fused features ``f_t`` with the
embedding of token ``x_{t+1}``, uses position ``t`` and predicts ``x_{t+2}``.

State between rounds. The head's KV cache holds rows built from *target* features only. Rows whose
features are known but not yet fed are *pending*: after the prompt, all ``T - 1`` prompt rows; after a
round with ``A`` accepted drafts, the ``A + 1`` rows ``(f_last, d_1), .., (f_{d_A}, y)``, whose
features come from the verification forward the target already ran (no extra target pass).
``propose`` feeds the pending rows first (charged to drafting), then self-feeds: the layer's pre-norm
output is paired with the token it just drafted, one position further. Self-fed rows are rolled back
at ``commit`` because the accepted ones are re-fed with the target's real features.

Usage::

    drafter = load_eagle_drafter("runs/head/final", target)        # or Eagle3Drafter(head, target)
    speculative_generate(target, drafter, input_ids, gamma=5, sampling=..., max_new_tokens=...)
"""

from __future__ import annotations

import torch
from torch import nn

from eaglehead.draftheads.checkpoint import check_compatible, load_head
from eaglehead.draftheads.eagle3 import DraftKVCache, Eagle3Head

from .sampling import SamplingConfig, greedy_argmax, probs, sample_from


class Eagle3Drafter:
    """Adapts an :class:`Eagle3Head` (or ``Eagle1Head``) bound to ``target`` to the drafter protocol."""

    def __init__(self, head: Eagle3Head, target: nn.Module, sampling: SamplingConfig | None = None):
        check_compatible(head, target.config)  # the one check; the loop compares vocab_size with lm_head's rows
        self.head = head.eval()
        head.bind_embedding(target.get_input_embeddings())
        self.vocab_size = head.config.target_vocab_size
        self.feature_layer_ids = list(head.config.fused_layer_ids)
        self.sampling = sampling  # None: the target's sampling config
        self.cache: DraftKVCache | None = None

    # Pending rows: features [B, P, kH] (target features, projected lazily), tokens [B, P], valid [B, P].
    def begin(self, input_ids, valid, target_features) -> None:
        bsz, t = input_ids.shape
        self.cache = DraftKVCache.for_head(self.head, bsz, capacity=max(256, 2 * t))
        self.next_pos = torch.zeros(bsz, dtype=torch.long, device=input_ids.device)  # position of the next row
        if t < 2:
            self._pending = None
            return
        # Row r pairs f_r with x_{r+1}; a row is real when both tokens r and r+1 are. ``None`` = all real
        # (no padding: one host check per request keeps the draft cache on its dense fast path).
        ok = valid[:, :-1] & valid[:, 1:]
        self._pending = (target_features, input_ids[:, 1:], None if bool(ok.all()) else ok)

    @torch.no_grad()
    def propose(self, gamma, sampling, generator=None):
        sampling = self.sampling or sampling
        head = self.head
        bsz = self.next_pos.shape[0]
        dev = self.next_pos.device
        if gamma == 0:
            return (torch.zeros(bsz, 0, dtype=torch.long, device=dev),
                    torch.zeros(bsz, 0, self.vocab_size, device=dev))
        h = self._feed_pending()  # [B, 1, H]
        self._rollback_to = self.cache.lengths.clone()
        drafts, qs = [], []
        for i in range(gamma):
            logits = head.logits(h[:, -1])  # [B, Vd]
            if sampling.greedy:  # q is the point mass at the argmax (lowest id on ties, as probs() does)
                d = head.draft_to_target(greedy_argmax(logits))  # [B] target ids
                q = torch.zeros(bsz, self.vocab_size, device=dev).scatter_(1, d[:, None], 1.0)
            else:
                q_draft = probs(logits, sampling)  # [B, Vd]
                d = head.draft_to_target(sample_from(q_draft, generator))
                q = head.to_target_probs(q_draft)
            drafts.append(d)
            qs.append(q)  # zero outside the draft vocabulary
            if i < gamma - 1:  # self-fed step: own hidden (pre-norm; normed with norm_output) and the token just drafted
                step_pos = (self.next_pos + i)[:, None]
                h = head.layer_forward(head.embed(d[:, None]), h, step_pos, cache=self.cache)
        return torch.stack(drafts, 1), torch.stack(qs, 1)

    def commit(self, n_accepted, draft, next_token, target_features) -> None:
        if draft.shape[1] > 0:
            self.cache.crop_to(self._rollback_to)  # drop self-fed rows; accepted ones are re-fed below
        self._queue(n_accepted, draft, next_token, target_features)

    def _feed_pending(self) -> torch.Tensor:
        """Feed the pending rows (target features) into the head's cache; the last row's output ``[B, 1, H]``."""
        if self._pending is None:
            raise RuntimeError("EAGLE drafting needs at least two prompt tokens (one target feature)")
        feats, toks, ok = self._pending
        # Positions of pending rows continue each row's count of real rows.
        if ok is None:
            pos = self.next_pos[:, None] + torch.arange(toks.shape[1], device=toks.device)
            self.next_pos = self.next_pos + toks.shape[1]
        else:
            pos = (self.next_pos[:, None] + ok.long().cumsum(-1) - 1).clamp_min(0)
            self.next_pos = self.next_pos + ok.long().sum(-1)
        h = self.head.layer_forward(self.head.embed(toks), self.head.project(feats), pos, cache=self.cache,
                                    attention_mask=ok)  # [B, P, H]; the last column is real in every row
        self._pending = None
        return h[:, -1:]

    def _queue(self, n_accepted: list[int], accepted, next_token, target_features) -> None:
        """Queue ``(f_last, a_1), .., (f_{a_A}, y)`` as pending rows: the features the verification forward
        computed for ``[last, a_1..a_A]`` (``target_features [B, >= A+1, kH]``) with the tokens
        ``[a_1..a_A, y]`` (``accepted [B, >= max A]``, ``next_token [B]``)."""
        dev = next_token.device
        longest, shortest = max(n_accepted), min(n_accepted)
        if longest == shortest:  # every row accepted A (always so at batch 1): no holes, no gathers
            a = longest
            toks = torch.cat([accepted[:, :a], next_token[:, None]], 1)
            feats, ok = target_features[:, : a + 1], None
        else:
            # Right-aligned so that the last column is real in every row (rows with smaller A get holes on
            # the left). Only the ``max A + 1`` columns some row needs are kept.
            acc = torch.tensor(n_accepted, device=dev)
            width = longest + 1
            j = torch.arange(width, device=dev)[None, :]
            shift = longest - acc[:, None]  # [B, 1]
            src = (j - shift).clamp_min(0)  # [B, width]
            toks = torch.cat([accepted[:, :longest], next_token[:, None]], 1)
            toks = torch.where(src == acc[:, None], next_token[:, None], toks.gather(1, src))
            feats = target_features.gather(1, src[..., None].expand(-1, -1, target_features.shape[-1]))
            ok = j >= shift
        if self._pending is not None:  # a round that drafted nothing fed nothing: keep the older rows in front
            old_f, old_t, old_ok = self._pending
            if old_ok is not None or ok is not None:
                old_ok = torch.ones_like(old_t, dtype=torch.bool) if old_ok is None else old_ok
                ok = torch.ones_like(toks, dtype=torch.bool) if ok is None else ok
                ok = torch.cat([old_ok, ok], 1)
            feats, toks = torch.cat([old_f, feats], 1), torch.cat([old_t, toks], 1)
        self._pending = (feats, toks, ok)


def load_eagle_drafter(path: str, target: nn.Module, *, device: str | torch.device | None = None,
                       dtype: torch.dtype | None = None, sampling: SamplingConfig | None = None) -> Eagle3Drafter:
    """Load a head directory (eaglehead checkpoint, EAGLE-3 or speculators layout) as a drafter for ``target``.
    The target's config supplies default layer ids; :class:`Eagle3Drafter` checks compatibility (once)."""
    head = load_head(path, target_config=target.config, check=False)
    device = device or next(target.parameters()).device
    head = head.to(device=device, dtype=dtype or next(target.parameters()).dtype)
    return Eagle3Drafter(head, target, sampling=sampling)
