"""The tree speculative generation loop (EAGLE-2 dynamic trees, exact for any sampling config).

Usage::

    from eaglehead.decode.tree_draft import EagleTreeDrafter
    from eaglehead.decode.tree_generate import tree_generate
    res = tree_generate(target, EagleTreeDrafter(head, target), input_ids, depth=5, topk=8, tokens=32,
                        sampling=SamplingConfig(temperature=0), max_new_tokens=128)
    res.tokens[0]   # new token ids of row 0;  res.rounds: TreeRoundRecord per round

One round = the chain loop's named stages: propose (``drafter.propose_tree``) -> verify (one target call
over ``[last] + tree`` with a tree mask, :class:`TreeCacheLM`) -> accept (:func:`verify_tree`) -> commit
(host bookkeeping: EOS, budget, streaming) -> crop (the target cache keeps ``[last] + accepted path``,
compacted; the drafter is synchronised with the path's verification features). One host sync per round,
after accept. It returns :mod:`eaglehead.decode.generate`'s :class:`GenerationResult`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from eaglehead.builtin.models import output_vocab_size

from .generate import GenerationResult, RoundRecord
from .loop import OnToken, Rows, bad_logits, check_inputs, now, prefill_pending, raise_if_bad
from .sampling import SamplingConfig, probs
from .tree import DraftTree, TreeVerdict, verify_tree, verify_tree_greedy
from .tree_draft import check_tree_shape
from .tree_target import TreeCacheLM


@dataclass
class TreeRoundRecord(RoundRecord):
    """A :class:`RoundRecord` whose ``gamma`` is the number of verified tree nodes and ``accepted`` the
    accepted depth per row; ``depth`` is the tree depth drafted this round (0: a plain decoding step)."""

    depth: int


@torch.no_grad()
def tree_generate(
    target: nn.Module,
    drafter,
    input_ids: torch.Tensor,
    *,
    depth: int,
    topk: int,
    tokens: int,
    sampling: SamplingConfig,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    on_token: OnToken | None = None,
) -> GenerationResult:
    """Generate with draft trees verified exactly; the output is distributed as the target's.

    ``drafter`` follows the tree drafter protocol (:mod:`eaglehead.decode.tree_draft`). ``input_ids [B, T]``
    left-padded when rows differ (``attention_mask`` 1 for real tokens). A row stops at EOS (included) or
    after ``max_new_tokens``; a round never drafts deeper than the largest remaining budget minus one.
    """
    check_tree_shape(depth, topk, tokens)
    valid = check_inputs(target, input_ids, attention_mask, depth, max_new_tokens, sampling)
    if drafter.vocab_size != output_vocab_size(target):
        raise ValueError(f"drafter vocabulary size {drafter.vocab_size} does not match the target's "
                         f"{output_vocab_size(target)}: the drafter must propose tokens of the target's vocabulary")
    device = input_ids.device
    rows = Rows.start(input_ids.shape[0], eos_token_id, max_new_tokens, on_token)
    runner = TreeCacheLM(target, drafter.feature_layer_ids)
    target.eval()
    t_start = now(device)
    last = prefill_pending(runner, drafter, input_ids, valid)
    t_prefill = now(device) - t_start
    rounds: list[RoundRecord] = []
    while not all(rows.done):
        d = min(depth, rows.room() - 1)  # a round commits at most d + 1 tokens
        record, last = _tree_round(runner, drafter, last, (d, topk, tokens), sampling, generator, rows)
        rounds.append(record)
    return GenerationResult(tokens=rows.tokens, rounds=rounds, token_times=rows.times, t_start=t_start,
                            t_end=now(device), prompt_lengths=valid.long().sum(1).tolist(),
                            t_prefill=t_prefill, finished_by_eos=rows.by_eos, prefill_tokens=0)


def _tree_round(runner: TreeCacheLM, drafter, last: torch.Tensor, shape: tuple[int, int, int], sampling, generator,
                rows: Rows) -> tuple[TreeRoundRecord, torch.Tensor]:
    """One round over ``[last] + tree`` (``shape`` = depth, topk, tokens; depth 0: a plain decoding step).
    Returns the round's record and the new pending token ``[B]``."""
    d, topk, tokens = shape
    device, bsz = last.device, last.shape[0]
    want = drafter.feature_layer_ids is not None
    t0 = now(device)
    tree = drafter.propose_tree(d, topk, tokens, sampling, generator) if d > 0 else DraftTree.empty(bsz, device)
    t1 = now(device)
    out = runner.forward_tree(last, tree, want_features=want)
    if sampling.greedy:  # the same verdict as verify_tree on the one-hot p, without building it
        t2 = now(device)
        verdict = verify_tree_greedy(out.logits, tree)
    else:
        p = probs(out.logits, sampling)  # [B, N+1, V]
        t2 = now(device)
        verdict = verify_tree(p, tree, generator)
    acc_list, y_list, path_rows = _to_host(verdict, out.logits)  # the one host sync
    active = [not x for x in rows.done]
    committed = rows.commit(path_rows, acc_list, y_list, time.perf_counter())
    # Crop: the target keeps [last] + the accepted path (compacted); y is pending for the next round.
    runner.keep_path(verdict.path, acc_list)
    t3 = now(device)
    width = max(acc_list)
    drafter.commit(acc_list, verdict.path_tokens[:, :width].clamp_min(0), verdict.next_token,
                   _path_features(out.features, verdict.path, width))
    t4 = now(device)
    record = TreeRoundRecord(gamma=tree.n_nodes, accepted=[a if act else 0 for a, act in zip(acc_list, active)],
                             committed=committed, active=active, t_draft=(t1 - t0) + (t4 - t3), t_verify=t2 - t1,
                             t_rest=t3 - t2, depth=d)
    return record, verdict.next_token


def _to_host(verdict: TreeVerdict, logits: torch.Tensor) -> tuple[list[int], list[int], list[list[int]]]:
    """One host sync: accepted depths, next tokens and path tokens per row; raises on NaN/inf logits."""
    bsz, w = verdict.path_tokens.shape
    host = torch.cat([verdict.accepted, verdict.next_token, verdict.path_tokens.flatten(),
                      bad_logits(logits).long().view(1)]).tolist()
    raise_if_bad(host[-1])
    return host[:bsz], host[bsz:2 * bsz], [host[2 * bsz + b * w: 2 * bsz + (b + 1) * w] for b in range(bsz)]


def _path_features(features: torch.Tensor | None, path: torch.Tensor, width: int) -> torch.Tensor | None:
    """Verification features ``[B, W+1, kH]`` of ``[last] + path[:, :W]``, compacted like the target cache
    (``features [B, N+1, kH]`` of the tree forward; padding of shorter paths repeats ``last``'s)."""
    if features is None:
        return None
    src = torch.cat([path.new_zeros(path.shape[0], 1), path[:, :width] + 1], 1)  # [B, W+1] rows of the block
    return features.gather(1, src[..., None].expand(-1, -1, features.shape[-1]))
