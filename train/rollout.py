"""The simulated self-fed rollout ("training-time test") and its loss.

EAGLE-3 trains the head on what it will see while drafting: step 0 reads the target's fused features;
step ``i`` reads the head's own pre-norm output of step ``i-1``, paired with the next data token, one
position further. Row ``t`` at step ``i`` therefore plays the draft made ``i`` tokens after the
committed prefix ``x_0..x_{t+1}``: it attends to the step-0 keys of rows ``0..t`` (what the drafting
cache holds: rows built from real target features) plus its own keys from steps ``1..i`` (the
"diagonal"), uses RoPE position ``t + i`` and predicts ``x_{t+i+2}``.

Memory stays linear in depth: the diagonal costs ``S`` extra keys per query (not ``S * T``), and the
``T x T`` block scores of each step are recomputed in the backward pass (activation checkpointing of
the attention) instead of being stored for every step.

Usage::

    out = rollout(head, batch, target_lm_head_weight, depth=7, decay=0.8)
    (out.loss_sum_weighted(norms)).backward()   # norms: loss tokens per step summed over ranks/accum
    out.accuracy()                               # [acc_0, ..., acc_{depth-1}]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from eaglehead.draftheads.eagle3 import Eagle3Head, attend, causal_mask


@dataclass
class RolloutOutput:
    loss_sums: torch.Tensor  # [depth] sum over loss positions of the step's cross-entropy (has grad)
    counts: torch.Tensor  # [depth] loss positions per step (this micro-batch)
    correct: torch.Tensor  # [depth] top-1 agreements with the target's argmax
    weights: torch.Tensor  # [depth] decay ** i

    def loss(self, norms: torch.Tensor | None = None) -> torch.Tensor:
        """``sum_i w_i * loss_sum_i / norm_i``; ``norms`` default to this batch's own counts.

        For data-parallel/accumulated training pass the per-step loss-token counts summed over every
        rank and micro-batch of the optimizer step, so the gradient is the global token mean.
        """
        norms = self.counts if norms is None else norms
        return (self.weights * self.loss_sums / norms.clamp_min(1)).sum()

    def accuracy(self) -> list[float]:
        return (self.correct / self.counts.clamp_min(1)).tolist()


def deep_rows(input_ids: torch.Tensor, stride: int) -> torch.Tensor | None:
    """The rows that continue past step 0 when only every ``stride``-th row does (``None``: all rows).

    After step 0 a row's rollout reads only its own earlier steps and the shared step-0 keys, so a subset
    of rows can be carried deeper without changing any kept row's result. The offset comes from the batch
    itself (``sum(input_ids) % stride``): every row position gets its turn across batches, and the choice
    is reproducible from the batch alone (loss normalisation and resumed runs agree)."""
    if stride == 1:
        return None
    offset = int(input_ids.sum()) % stride
    return torch.arange(offset, input_ids.shape[1] - 1, stride, device=input_ids.device)


def loss_positions(loss_mask: torch.Tensor, attention_mask: torch.Tensor, depth: int,
                   rows: torch.Tensor | None = None) -> torch.Tensor:
    """``[depth, B, T-1]`` bool: step ``i`` row ``t`` is trained iff token ``x_{t+i+2}`` is a loss token and
    every token the row depends on (``x_t..x_{t+i+2}``) is real (not padding); with ``rows``
    (:func:`deep_rows`), steps ``i >= 1`` train those rows only."""
    b, t = loss_mask.shape
    valid = attention_mask.bool()
    loss = loss_mask.bool() & valid
    out = torch.zeros(depth, b, t - 1, dtype=torch.bool, device=loss_mask.device)
    for i in range(min(depth, t - 2)):
        n = t - i - 2  # rows t = 0..n-1 have a target token x_{t+i+2}
        real = valid.unfold(1, i + 3, 1).all(-1)  # [B, n]: x_t..x_{t+i+2} all real
        out[i, :, :n] = real & loss[:, i + 2:]
    if rows is not None and depth > 1:
        keep = torch.zeros(t - 1, dtype=torch.bool, device=loss_mask.device)
        keep[rows] = True
        out[1:] &= keep
    return out


def count_loss_tokens(loss_mask: torch.Tensor, attention_mask: torch.Tensor, depth: int,
                      rows: torch.Tensor | None = None) -> torch.Tensor:
    """Loss positions per step ``[depth]`` (int64), for normalising across ranks and micro-batches."""
    return loss_positions(loss_mask, attention_mask, depth, rows).flatten(1).sum(1)


def _at_offset(x: torch.Tensor, sel: torch.Tensor, cols: torch.Tensor | None, offset: int) -> torch.Tensor:
    """``_shift(x, offset)[:, :R][:, cols][sel]`` without the shifted copy of ``x``: for each selected ``(b, t)`` of
    ``sel [B, R']`` (rows ``cols``, or all), ``x[b, t + offset]``, in ``sel``'s row-major order. ``x`` is
    ``[B, T, ...]``; only positions inside the sequence may be selected (``loss_positions`` guarantees it)."""
    b, r = sel.nonzero(as_tuple=True)
    t = r if cols is None else cols[r]
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])[b * x.shape[1] + t + offset]


def _shift(x: torch.Tensor, i: int, fill: float | int = 0) -> torch.Tensor:
    """``x[:, i:]`` padded at the end back to the same length (along dim 1)."""
    if i == 0:
        return x
    pad = x.new_full((x.shape[0], i, *x.shape[2:]), fill)
    return torch.cat([x[:, i:], pad], dim=1)


def target_outputs(final_hidden: torch.Tensor, lm_head_weight: torch.Tensor, head: Eagle3Head,
                   chunk: int = 512, want_top: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The target's logits restricted to ``head``'s draft vocabulary ``[B, T, Vd]`` (float32) and its
    full-vocabulary argmax ``[B, T]``, from one ``lm_head`` product per chunk of ``chunk`` rows (full
    logits are never held for more than one chunk: ``chunk x V`` floats).

    ``want_top=False``: no argmax (``None``), and only the draft vocabulary's rows of ``lm_head`` are
    multiplied (``Vd / V`` of the work: at 8192 of 49152, 17 % of a SmolLM2 head's training step saved)."""
    flat = final_hidden.reshape(-1, final_hidden.shape[-1]).to(lm_head_weight.dtype)
    shape = final_hidden.shape[:-1]
    draft_rows = None if want_top or head.t2d.all() else lm_head_weight.index_select(0, head.target_ids)
    logits, top = [], []
    for s in range(0, flat.shape[0], chunk):
        if draft_rows is not None:
            logits.append(F.linear(flat[s: s + chunk], draft_rows).float())  # [chunk, Vd]
            continue
        full = F.linear(flat[s: s + chunk], lm_head_weight)  # [chunk, V]
        if want_top:
            top.append(full.argmax(-1))
        logits.append(head.restrict_to_draft(full).float())
    return torch.cat(logits).view(*shape, -1), torch.cat(top).view(shape) if want_top else None


def rollout_steps(head: Eagle3Head, input_ids: torch.Tensor, fused: torch.Tensor, attention_mask: torch.Tensor,
                  depth: int, checkpoint_attention: bool = True, rows_deep: torch.Tensor | None = None):
    """Yield the pre-norm hidden ``[B, T-1, H]`` of each step ``i = 0..depth-1`` (row ``t`` predicts ``x_{t+i+2}``).

    ``rows_deep`` (:func:`deep_rows`): steps ``i >= 1`` run those rows only (``[B, len(rows_deep), H]``)."""
    rows = input_ids.shape[1] - 1
    valid = attention_mask.bool()
    row_valid = valid[:, :rows] & valid[:, 1:]
    pos0 = (row_valid.long().cumsum(-1) - 1).clamp_min(0)  # [B, R]
    mask0 = causal_mask(row_valid, rows)  # [B, 1, R, R]
    emb_all = head.embed(input_ids)  # [B, T, H] (frozen target embedding)
    h = head.project(fused[:, :rows])  # [B, R, H]
    pos, mask = pos0, mask0

    k0 = v0 = dk = dv = None
    diag_k: list[torch.Tensor] = []
    diag_v: list[torch.Tensor] = []
    for i in range(depth):
        emb = _shift(emb_all, i + 1)[:, :rows]  # token x_{t+i+1} for row t
        if i >= 1 and rows_deep is not None:
            emb = emb[:, rows_deep]
            if i == 1:  # queries from the kept rows; the step-0 keys of every row stay visible
                h, pos, mask = h[:, rows_deep], pos0[:, rows_deep], mask0[:, :, rows_deep]
        q, k, v, res = head.qkv(emb, h, pos + i)
        if i == 0:
            k0, v0 = k, v
        else:
            diag_k.append(k)
            diag_v.append(v)
            dk = torch.stack(diag_k, dim=2)  # [B, kvH, i, R, d]: own keys from steps 1..i
            dv = torch.stack(diag_v, dim=2)
        if checkpoint_attention and torch.is_grad_enabled():  # the mask is an argument: recomputed later, it
            attn = checkpoint(attend, q, k0, v0, mask, dk, dv, use_reentrant=False)  # must be this step's
        else:
            attn = attend(q, k0, v0, mask, dk, dv)
        h = head.finish(attn, res)  # [B, R, H] pre-norm: fed to step i+1
        yield i, h


def rollout(head: Eagle3Head, batch: dict[str, torch.Tensor], lm_head_weight: torch.Tensor, *, depth: int = 7,
            decay: float = 0.8, checkpoint_attention: bool = True, labels: str = "soft",
            accuracy: bool = True, deep_stride: int = 1, logit_softcap: float | None = None) -> RolloutOutput:
    """Run the ``depth``-step rollout on one batch and return per-step loss sums and accuracies.

    ``accuracy=False`` skips the top-1 agreement (``correct`` is all zeros) and with it the target's
    full-vocabulary output product; the loss is the same.

    ``deep_stride > 1``: steps ``1..depth-1`` run every ``deep_stride``-th row only (:func:`deep_rows`); each
    kept row's losses are exactly those of the full rollout, and each step's loss stays a mean over its
    own rows, so the cost of the deep steps drops ``deep_stride``-fold for a noisier estimate of them.

    ``labels="soft"``: cross-entropy to the target's distribution restricted to the draft vocabulary and
    renormalised. ``labels="argmax"``: cross-entropy to the top token of that restricted distribution.

    ``batch``: ``input_ids, attention_mask, loss_mask [B, T]``, ``fused [B, T, k*H_t]``,
    ``final_hidden [B, T, H_t]`` (target features at every position; right or left padding).
    ``lm_head_weight [V, H_t]`` is the target's output projection (frozen). ``logit_softcap``: the target's final
    soft-cap (Gemma 2's ``final_logit_softcapping``, ``c * tanh(z / c)``), applied to its logits before the labels
    are taken; monotone, so the top token is unchanged.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    if labels not in ("soft", "argmax"):
        raise ValueError(f"labels must be 'soft' or 'argmax', got {labels!r}")
    ids, amask = batch["input_ids"], batch["attention_mask"]
    rows = ids.shape[1] - 1
    if rows < 2:
        raise ValueError(f"sequences must hold at least 3 tokens, got {ids.shape[1]}")
    if deep_stride < 1:
        raise ValueError(f"deep_stride must be >= 1, got {deep_stride}")
    rows_deep = deep_rows(ids, deep_stride)
    positions_ok = loss_positions(batch["loss_mask"], amask, depth, rows_deep)  # [depth, B, R]
    with torch.no_grad():
        # [B, T, Vd] logits within the draft vocabulary, [B, T] full-vocabulary top token (target ids)
        tgt_logits, tgt_top = target_outputs(batch["final_hidden"], lm_head_weight, head, want_top=accuracy)
        if logit_softcap:
            tgt_logits = logit_softcap * torch.tanh(tgt_logits / logit_softcap)
        if labels == "soft":
            tgt_p = torch.softmax(tgt_logits, dim=-1)  # restricted to the draft vocab and renormalised
        else:
            tgt_p = torch.zeros_like(tgt_logits).scatter_(-1, tgt_logits.argmax(-1, keepdim=True), 1.0)
    loss_sums, counts, correct = [], [], []
    for i, h in rollout_steps(head, ids, batch["fused"], amask, depth, checkpoint_attention, rows_deep):
        cols = rows_deep if i >= 1 else None
        sel = positions_ok[i] if cols is None else positions_ok[i][:, cols]  # [B, R] (or the deep rows)
        # The output layer only where a loss is taken (prompt rows, padding and the sequence tails are
        # skipped): the draft-vocabulary product is about half of a step's matmuls at SmolLM2's sizes.
        logits = head.logits(h[sel]).float()  # [N, Vd]
        # The target's output at position j is its distribution over x_{j+1}: x_{t+i+2} comes from j = t+i+1.
        p = _at_offset(tgt_p, sel, cols, i + 1)  # gathered rows only: no shifted copy of [B, T, Vd] per step
        ce = -(p * torch.log_softmax(logits, dim=-1)).sum(-1)  # [N]
        loss_sums.append(ce.sum())
        counts.append(sel.sum())
        if not accuracy:
            correct.append(torch.zeros((), device=ids.device, dtype=torch.long))
            continue
        with torch.no_grad():
            pred = head.draft_to_target(logits.argmax(-1))
            top = _at_offset(tgt_top, sel, cols, i + 1)
            correct.append((pred == top).sum())
    weights = torch.tensor([decay ** i for i in range(depth)], device=ids.device)
    return RolloutOutput(torch.stack(loss_sums), torch.stack(counts).float(), torch.stack(correct).float(), weights)
