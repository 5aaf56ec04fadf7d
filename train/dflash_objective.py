"""The DFlash training objective: random anchor blocks per sequence, every block in one drafter forward.

For each sequence, up to ``num_anchors`` anchors ``a`` are drawn (without replacement) among the positions whose
next token is a loss token. Block ``j`` is ``[x_a, MASK x (B-1)]`` at positions ``a .. a+B-1``; it attends to its own
``B`` tokens (non-causally) and to the context states of positions ``< a`` only (what the drafter has when the
target has just sampled ``x_a``). Slot ``k >= 1`` predicts ``x_{a+k}``: its label is the target's distribution at
position ``a+k-1`` (``labels: soft``) or that distribution's top token (``argmax``), and its loss is weighted
``exp(-(k-1)/gamma)``. A slot is trained iff ``x_{a+k}`` is a real loss token. All blocks of a batch run as one
query set against the sequence's context keys, under one ``[Q, T + Q]`` mask per row: the same
``DFlashHead.block_hidden`` the decoder calls, so training and drafting compute the same function of the same
context (``tests/train/test_dflash_objective.py``).

Anchors are a function of the batch alone (a generator seeded by the recipe seed and the batch's token sum), so
counting the loss slots before the step (global normalisation) and the forward agree, and a resumed run draws the
same anchors.

Usage::

    module = DFlashModule(head, target_output_weight, num_anchors=8, gamma=7.0)
    counts = module.loss_token_counts(batch)       # [B-1]: trained slots per block position
    out = module(batch)                            # RolloutOutput: loss_sums, counts, correct, weights per slot
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from eaglehead.draftheads.dflash import DFlashHead

from .rollout import RolloutOutput


def choose_anchors(loss_mask: torch.Tensor, attention_mask: torch.Tensor, num_anchors: int, seed: int,
                   input_ids: torch.Tensor) -> torch.Tensor:
    """``[B, num_anchors]`` anchor positions (sorted; ``-1`` where a row has fewer candidates). A candidate ``a``
    has ``a >= 1`` (some context) and ``x_{a+1}`` a real loss token; ``x_a`` itself must be real."""
    real = attention_mask.bool()
    target = loss_mask.bool() & real
    cand = torch.zeros_like(real)
    cand[:, 1:-1] = real[:, 1:-1] & target[:, 2:]
    gen = torch.Generator().manual_seed((seed * 1_000_003 + int(input_ids.sum())) % (2 ** 63))
    out = torch.full((cand.shape[0], num_anchors), -1, dtype=torch.long)
    for b in range(cand.shape[0]):
        pos = cand[b].nonzero().flatten().cpu()
        if pos.numel():
            pick = pos[torch.randperm(pos.numel(), generator=gen)[:num_anchors]].sort().values
            out[b, : pick.numel()] = pick
    return out.to(loss_mask.device)


def slot_targets(anchors: torch.Tensor, loss_mask: torch.Tensor, attention_mask: torch.Tensor,
                 block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index [B, A, block-1], trained [B, A, block-1])``: slot ``k``'s target position ``a+k`` (clamped) and
    whether it is trained (anchor present, ``a+k`` inside the row, a real loss token)."""
    t = loss_mask.shape[1]
    k = torch.arange(1, block, device=anchors.device)
    pos = anchors[..., None] + k  # [B, A, block-1]
    inside = (anchors[..., None] >= 0) & (pos < t)
    idx = pos.clamp(0, t - 1)
    ok = (loss_mask.bool() & attention_mask.bool()).gather(1, idx.flatten(1)).view_as(idx)
    return idx, inside & ok


def block_mask(anchors: torch.Tensor, attention_mask: torch.Tensor, block: int) -> torch.Tensor:
    """``[B, 1, A*block, T + A*block]`` bool: block ``j``'s queries see real context positions ``< a_j`` and their
    own block; an absent anchor's block sees only itself (it trains nothing)."""
    b, t = attention_mask.shape
    a = anchors.shape[1]
    q_anchor = anchors.repeat_interleave(block, dim=1)  # [B, Q]
    ctx = (torch.arange(t, device=anchors.device) < q_anchor[..., None]) & attention_mask.bool()[:, None, :]
    blk = torch.arange(a, device=anchors.device).repeat_interleave(block)
    own = (blk[:, None] == blk[None, :]).expand(b, -1, -1)
    return torch.cat((ctx, own), dim=2)[:, None]


class DFlashModule(nn.Module):
    """The drafter plus its objective behind ``forward``, as ``RolloutModule`` is for the EAGLE heads. The frozen
    target output weight is a plain attribute (never a parameter, never saved)."""

    def __init__(self, head: DFlashHead, lm_head_weight: torch.Tensor, num_anchors: int, gamma: float,
                 labels: str = "soft", seed: int = 0, logit_softcap: float | None = None):
        super().__init__()
        if num_anchors < 1 or gamma <= 0 or labels not in ("soft", "argmax"):
            raise ValueError(f"DFlashModule: need num_anchors >= 1, gamma > 0, labels soft|argmax; got "
                             f"{num_anchors}, {gamma}, {labels!r}")
        self.head = head
        self.__dict__["lm_head_weight"] = lm_head_weight
        self.num_anchors, self.gamma, self.labels, self.seed = num_anchors, gamma, labels, seed
        self.logit_softcap = logit_softcap

    def anchors(self, batch: dict) -> torch.Tensor:
        return choose_anchors(batch["loss_mask"], batch["attention_mask"], self.num_anchors, self.seed,
                              batch["input_ids"])

    def loss_token_counts(self, batch: dict) -> torch.Tensor:
        """Trained slots per block position ``[block-1]`` (int64)."""
        _, ok = slot_targets(self.anchors(batch), batch["loss_mask"], batch["attention_mask"],
                             self.head.config.block_size)
        return ok.flatten(0, 1).sum(0)

    def forward(self, batch: dict, accuracy: bool = True) -> RolloutOutput:
        head, block = self.head, self.head.config.block_size
        anchors = self.anchors(batch)
        idx, ok = slot_targets(anchors, batch["loss_mask"], batch["attention_mask"], block)
        ctx = head.context_states(batch["fused"])
        t = ctx.shape[1]
        positions = torch.arange(t, device=ctx.device).expand(ctx.shape[0], -1)
        block_pos = (anchors.clamp_min(0)[..., None] + torch.arange(block, device=ctx.device)).flatten(1)
        ids = batch["input_ids"].gather(1, anchors.clamp_min(0))  # [B, A]: each block's first token
        block_ids = torch.full_like(block_pos, head.config.mask_token_id)
        block_ids.view(*anchors.shape, block)[..., 0] = ids
        hidden = head.block_hidden(block_ids, block_pos, head.context_kv(ctx, positions),
                                   block_mask(anchors, batch["attention_mask"], block))
        hidden = hidden.view(*anchors.shape, block, -1)[:, :, 1:]  # [B, A, block-1, H]
        return self._loss(hidden, idx, ok, batch["final_hidden"], accuracy)

    def _loss(self, hidden, idx, ok, final_hidden, accuracy: bool) -> RolloutOutput:
        slots = ok.nonzero(as_tuple=True)  # (b, a, k-1)
        b, k = slots[0], slots[2]
        logits = self.head.logits(hidden[slots]).float()  # [N, V]
        with torch.no_grad():  # the target's distribution at a+k-1 is over x_{a+k}
            src = final_hidden[b, idx[slots] - 1]
            tgt = F.linear(src.to(self.lm_head_weight.dtype), self.lm_head_weight).float()
            if self.logit_softcap:
                tgt = self.logit_softcap * torch.tanh(tgt / self.logit_softcap)
            top = tgt.argmax(-1)
            p = torch.softmax(tgt, -1) if self.labels == "soft" else None
        logp = torch.log_softmax(logits, -1)
        ce = -(p * logp).sum(-1) if p is not None else -logp.gather(1, top[:, None])[:, 0]
        n = self.head.config.block_size - 1
        loss_sums = torch.zeros(n, device=ce.device, dtype=ce.dtype).index_add(0, k, ce)
        counts = torch.bincount(k, minlength=n).float()
        correct = torch.zeros(n, device=ce.device)
        if accuracy:
            correct = torch.bincount(k, weights=(logits.argmax(-1) == top).float(), minlength=n)
        weights = torch.tensor([math.exp(-i / self.gamma) for i in range(n)], device=ce.device)
        return RolloutOutput(loss_sums, counts, correct.float(), weights)
