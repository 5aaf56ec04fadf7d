"""The exact linear-chain verifier (Leviathan et al. 2023; Chen et al. 2023).

Draft token ``d_i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``; at the first
rejection one token is drawn from ``normalize(max(p - q, 0))``; if all ``gamma`` pass, a bonus token
is drawn from ``p_gamma``. The committed tokens are then distributed exactly as the target's ``p``.
"""

from __future__ import annotations

import torch

from .sampling import greedy_argmax, sample_from


def verify_chain(
    p: torch.Tensor,
    q: torch.Tensor,
    draft: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a batch of draft chains.

    Args:
        p: ``[B, gamma+1, V]`` target probabilities; row ``r`` predicts the token after draft ``r-1``.
        q: ``[B, gamma, V]`` the distributions the draft tokens were drawn from.
        draft: ``[B, gamma]`` draft token ids.
        generator: source of every random draw (uniforms, then the residual/bonus sample).

    Returns:
        ``(n_accepted [B], next_token [B])``: the count of consecutively accepted drafts in
        ``0..gamma`` and the residual sample at the first rejection (or the bonus sample).
        Vectorised over batch and vocab; no host sync.
    """
    if p.dim() != 3 or q.dim() != 3 or draft.dim() != 2:
        raise ValueError(
            f"verify_chain expects p [B, gamma+1, V], q [B, gamma, V], draft [B, gamma]; got "
            f"p {tuple(p.shape)}, q {tuple(q.shape)}, draft {tuple(draft.shape)}"
        )
    bsz, gamma = draft.shape
    if q.shape[:2] != (bsz, gamma) or p.shape[:2] != (bsz, gamma + 1) or p.shape[2] != q.shape[2]:
        raise ValueError(
            f"shape mismatch: p {tuple(p.shape)} must be [B, gamma+1, V] and q {tuple(q.shape)} "
            f"[B, gamma, V] for draft {tuple(draft.shape)}"
        )
    p = p.float()
    q = q.float()
    idx = draft.unsqueeze(-1)
    px = p[:, :gamma].gather(-1, idx).squeeze(-1)  # [B, gamma]
    qx = q.gather(-1, idx).squeeze(-1)  # [B, gamma]
    u = torch.rand(px.shape, generator=generator, device=p.device)
    # u < px / qx without dividing: certain acceptance (px >= qx) never evaluates a ratio, and a
    # token with px = 0 is never accepted.
    accept = u * qx < px
    n_accepted = accept.long().cumprod(dim=-1).sum(dim=-1)  # [B]

    # Residual row at the first rejection; at n_accepted == gamma the padded q row is zero, so the
    # same formula yields the bonus distribution p_gamma.
    q_pad = torch.cat([q, q.new_zeros(bsz, 1, q.shape[-1])], dim=1)  # [B, gamma+1, V]
    row = n_accepted.view(bsz, 1, 1).expand(bsz, 1, p.shape[-1])
    p_row = p.gather(1, row).squeeze(1)  # [B, V]
    q_row = q_pad.gather(1, row).squeeze(1)
    residual = (p_row - q_row).clamp_min(0.0)
    # In exact arithmetic a rejection implies positive residual mass; float rounding can leave none
    # (p == q up to rounding), and then p itself is the right distribution.
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_row, residual)
    next_token = sample_from(residual, generator)
    return n_accepted, next_token


def verify_chain_greedy(logits: torch.Tensor, draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`verify_chain` for a greedy target, from its ``logits [B, gamma+1, V]``: the same
    ``(n_accepted, next_token)`` for any draft distribution ``q``, without building ``p`` or drawing.

    With ``p`` the point mass at the argmax ``t`` (the first maximum, as ``probs`` breaks ties), draft
    ``d_i`` passes ``u * q(d_i) < p(d_i)`` exactly when ``d_i = t_i`` (``p(d_i)`` is 1 or 0, ``u < 1``); at
    the first rejection ``max(p - q, 0)`` is positive at ``t_i`` alone (``q(t_i) < 1`` because ``q`` drew
    another token), and the bonus row is ``p_gamma``: the next token is ``t`` at the accepted count.
    """
    if logits.dim() != 3 or draft.dim() != 2 or logits.shape[:2] != (draft.shape[0], draft.shape[1] + 1):
        raise ValueError(f"verify_chain_greedy expects logits [B, gamma+1, V] for draft [B, gamma]; got logits "
                         f"{tuple(logits.shape)}, draft {tuple(draft.shape)}")
    t = greedy_argmax(logits)  # [B, gamma+1]
    n_accepted = (draft == t[:, :-1]).long().cumprod(dim=-1).sum(dim=-1)
    return n_accepted, t.gather(1, n_accepted[:, None]).squeeze(1)
