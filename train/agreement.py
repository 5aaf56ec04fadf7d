"""How often a head's greedy drafts equal the target's greedy tokens, depth by depth, measured by the
simulated rollout that trains it (the training-time test, :mod:`eaglehead.train.rollout`).

The rollout runs over prompt + the target's own greedy continuation and feeds the true tokens at
depths below ``i``, which are exactly the drafts a greedy round has accepted so far: depth ``i``'s
rate is the conditional acceptance rate ``alpha_i`` (averaged over positions rather than over round
starts), and ``1 + sum_k prod_{i<=k} alpha_i`` predicts greedy tau at each gamma without timing noise.
The command that produces the continuations and sets this next to measured acceptance is
``python -m eaglehead.diagnostics.head_accuracy``.
"""

from __future__ import annotations

import torch

from eaglehead.draftheads.eagle3 import Eagle3Head

from .features import OnlineFeatures
from .rollout import rollout


def rollout_agreement(target, head: Eagle3Head, sequences: list[tuple[torch.Tensor, int]],
                      depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct [depth], counts [depth]) over ``sequences``, each ``(ids [1, T], prompt length)``: only
    continuation positions count, as only they are drafted in decoding."""
    return rollout_agreements(target, [head], sequences, depth)[0]


def rollout_agreements(target, heads: list[Eagle3Head], sequences: list[tuple[torch.Tensor, int]],
                       depth: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`rollout_agreement` of several heads on the same sequences (checkpoints of one training, an
    ablation): the target runs once per sequence and set of fused layers, not once per head."""
    results = [(torch.zeros(depth), torch.zeros(depth)) for _ in heads]
    lm_w = target.get_output_embeddings().weight
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, head in enumerate(heads):
        groups.setdefault(tuple(head.config.fused_layer_ids), []).append(i)
    for layer_ids, members in groups.items():
        features = OnlineFeatures(target, list(layer_ids))  # exactly what training feeds the head
        for seq, prompt_len in sequences:
            loss_mask = torch.zeros_like(seq)
            loss_mask[:, prompt_len:] = 1
            batch = features({"input_ids": seq, "attention_mask": torch.ones_like(seq), "loss_mask": loss_mask})
            for i in members:
                with torch.no_grad():
                    out = rollout(heads[i], batch, lm_w, depth=depth, labels="argmax")
                results[i][0].add_(out.correct)
                results[i][1].add_(out.counts)
    return results


def predicted_greedy_tau(accuracy_by_depth: list[float]) -> list[float]:
    """Greedy tau at gamma 1..D predicted from the conditional acceptance rates, rounded to 3 places."""
    tau, run = [], 1.0
    for a in accuracy_by_depth:
        run *= a
        tau.append(round((tau[-1] if tau else 1.0) + run, 3))
    return tau
