"""EAGLE-2 dynamic draft trees from an EAGLE-3 head (SGLang's ``depth``, ``topk``, ``tokens``).

Tree drafter protocol (what ``tree_generate`` calls): ``begin`` as for a chain drafter;
``propose_tree(depth, topk, tokens, sampling, generator) -> DraftTree`` (layout in
:mod:`eaglehead.decode.tree`); ``commit(n_accepted: list[int], path_tokens [B, W], next_token [B],
target_features [B, W+1, kH] | None)`` with the accepted path compacted to the front (``W`` = the
largest accepted depth), exactly the arguments a chain drafter gets for ``draft = path_tokens``.

Drafting (EAGLE-2). Step 1: the head's row for the root gives the ``topk`` most probable first tokens.
Step ``d = 2..depth``: the ``topk`` frontier nodes (the best ``topk`` of the previous step's children by
cumulative draft probability, the product along the path) are fed to the head in one call, each
proposing its ``topk`` most probable children. Of all ``topk + (depth-1) * topk^2`` candidates the best
``tokens`` (by cumulative probability, ties to the earlier candidate, so a node's ancestors are always
kept) are verified. ``tokens`` counts draft nodes; SGLang's ``speculative_num_draft_tokens`` counts the
root as well (``= tokens + 1``). Scores use the head's plain softmax: the tree is a deterministic function
of the committed prefix, so the sampling config and the generator are not used, and no ``q`` is
recorded (the verifier treats every child as a point mass).

Tree attention. A frontier row at depth ``d`` (RoPE position ``next_pos + d - 1``, as the chain's
self-fed step ``d - 1``) sees the committed rows in the head's KV cache and the keys of its own
ancestors and itself: those ``d`` keys are passed per query through :func:`attend`'s ``diag_k``, so the
tree rows never enter :class:`DraftKVCache` and nothing needs rolling back. With ``topk = 1`` this is
exactly :class:`Eagle3Drafter`'s greedy chain (tested).

Usage::

    drafter = EagleTreeDrafter(head, target)
    tree_generate(target, drafter, input_ids, depth=5, topk=8, tokens=32, sampling=..., max_new_tokens=...)
"""

from __future__ import annotations

import torch

from eaglehead.draftheads.eagle3 import attend

from .eagle import Eagle3Drafter
from .sampling import SamplingConfig
from .tree import DraftTree, select_nodes


def check_tree_shape(depth: int, topk: int, tokens: int) -> None:
    """Raise ``ValueError`` naming the first of ``depth``, ``topk``, ``tokens`` that is not an integer >= 1."""
    for name, value in (("depth", depth), ("topk", topk), ("tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


class EagleTreeDrafter(Eagle3Drafter):
    """:class:`Eagle3Drafter` that proposes EAGLE-2 dynamic trees (``begin`` is inherited)."""

    @torch.no_grad()
    def propose_tree(self, depth: int, topk: int, tokens: int, sampling: SamplingConfig | None = None,
                     generator: torch.Generator | None = None) -> DraftTree:
        """Draft one EAGLE-2 tree per row (module docstring): one head call per depth, ``min(tokens,
        topk + (depth-1) topk^2)`` nodes. ``sampling`` and ``generator`` are unused (the tree is deterministic)."""
        check_tree_shape(depth, topk, tokens)
        head = self.head
        if topk > head.config.draft_vocab_size:
            raise ValueError(f"topk must be <= the head's draft vocabulary size "
                             f"{head.config.draft_vocab_size}, got {topk}")
        h_root = self._feed_pending()  # [B, 1, H]: the root's row predicts the depth-1 tokens
        bsz, dev = h_root.shape[0], h_root.device
        span = self.cache._span
        keys, values = self.cache.k[:, :, :span], self.cache.v[:, :, :span]  # committed rows only
        seen = self.cache.valid[:, None, None, :span]  # [B, 1, 1, span]: holes stay invisible
        score, ids = _top_children(head, h_root, topk)  # [B, 1, k]
        score, f_tok = score[:, 0], head.draft_to_target(ids[:, 0])  # frontier [B, k]
        hidden = h_root.expand(bsz, topk, -1)  # [B, k, H]: each frontier row's input is its parent's output
        cand = [(score, f_tok, torch.full_like(f_tok, -1), 1)]  # (score, token, parent candidate, depth)
        f_idx = torch.arange(topk, device=dev).expand(bsz, topk)  # candidate index of each frontier node
        n_cand, anc_k, anc_v = topk, None, None
        for d in range(1, depth):
            pos = (self.next_pos + d - 1)[:, None].expand(bsz, topk)
            q, k, v, res = head.qkv(head.embed(f_tok), hidden, pos, position_bound=span + depth)
            # Ancestor keys of each query: its parent's stack plus its own ([B, kvH, d, k, hd]).
            anc_k = k[:, :, None] if anc_k is None else torch.cat([anc_k, k[:, :, None]], 2)
            anc_v = v[:, :, None] if anc_v is None else torch.cat([anc_v, v[:, :, None]], 2)
            out = head.finish(attend(q, keys, values, seen, anc_k, anc_v), res)  # [B, k, H]
            c_score, c_ids = _top_children(head, out, topk)  # [B, k, k]
            c_score = (score[:, :, None] + c_score).flatten(1)  # [B, k*k] cumulative log-probability
            c_tok = head.draft_to_target(c_ids).flatten(1)
            cand.append((c_score, c_tok, f_idx.repeat_interleave(topk, 1), d + 1))
            if d == depth - 1:
                break
            best = torch.sort(c_score, dim=1, descending=True, stable=True).indices[:, :topk]  # next frontier
            row = best // topk  # [B, k] the frontier row each new node descends from
            score, f_tok, f_idx = c_score.gather(1, best), c_tok.gather(1, best), n_cand + best
            hidden = out.gather(1, row[..., None].expand(-1, -1, out.shape[-1]))
            gather_kv = row[:, None, None, :, None].expand(-1, anc_k.shape[1], anc_k.shape[2], -1, anc_k.shape[4])
            anc_k, anc_v = anc_k.gather(3, gather_kv), anc_v.gather(3, gather_kv)
            n_cand += topk * topk
        scores = torch.cat([c[0] for c in cand], 1)  # [B, M], candidates in depth order
        depths = torch.cat([torch.full_like(c[1], c[3]) for c in cand], 1)
        return select_nodes(scores, torch.cat([c[1] for c in cand], 1), torch.cat([c[2] for c in cand], 1),
                            depths, tokens, depth)

    def propose(self, gamma, sampling, generator=None):
        raise TypeError("EagleTreeDrafter proposes trees: use tree_generate (or Eagle3Drafter for chains)")

    def commit(self, n_accepted, path_tokens, next_token, target_features) -> None:
        """Queue ``(f_root, c_1), .., (f_{c_A}, y)`` as pending rows (target features, no extra target pass).
        Tree rows never entered the head's cache, so nothing is rolled back."""
        self._queue(n_accepted, path_tokens, next_token, target_features)


def _top_children(head, hidden: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probabilities, draft ids)``, each ``[B, R, topk]``, of the ``topk`` likeliest next tokens of
    every row of ``hidden [B, R, H]``; a stable sort breaks ties towards the lowest draft id."""
    logp = torch.log_softmax(head.logits(hidden).float(), dim=-1)  # [B, R, Vd]
    idx = stable_topk_indices(logp, topk)
    return logp.gather(-1, idx), idx


def stable_topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest entries of float ``x`` along the last dim, in descending order, ties
    towards the lowest index: ``torch.sort(x, descending=True, stable=True).indices[..., :k]`` without
    sorting the whole row (a full 8192-wide sort per row was ~1/4 of a tree's drafting time on a CPU).

    On a CPU: a float ``topk`` of ``m = k + 1`` candidates, widened (x4, up to the whole row) until every
    row's last candidate is below its ``k``-th value, so that every entry tied with the ``k``-th is among
    them (bfloat16 logits tie often); the candidates are then put in index order and stably sorted by value.
    The check is on the host (free there). Elsewhere (no host sync) every value becomes an order-preserving
    integer (float bits, negatives mirrored) with the reversed index in its low bits, and ``topk`` over
    those distinct keys has one answer."""
    n = x.shape[-1]
    x = x.float() + 0.0  # -0.0 becomes 0.0: the two tie in a sort
    if x.device.type == "cpu":
        m = min(k + 1, n)
        while True:
            v, i = torch.topk(x, m, dim=-1)
            if m == n or not bool((v[..., m - 1] == v[..., k - 1]).any()):
                break
            m = min(n, 4 * m)
        o = torch.sort(i, dim=-1).indices  # index order first, then a stable sort on the value
        v, i = v.gather(-1, o), i.gather(-1, o)
        return i.gather(-1, torch.sort(v, dim=-1, descending=True, stable=True).indices[..., :k])
    return _stable_topk_by_keys(x, k)


def _stable_topk_by_keys(x: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`stable_topk_indices` of float32 ``x`` (no ``-0.0``) without a host sync: one ``topk`` over
    distinct integer keys."""
    n = x.shape[-1]
    bits = x.contiguous().view(torch.int32).to(torch.int64)
    mono = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # signed order of the keys = float order
    shift = max(1, (n - 1).bit_length())
    key = (mono << shift) | (n - 1 - torch.arange(n, device=x.device))
    return n - 1 - (torch.topk(key, k, dim=-1).values & ((1 << shift) - 1))
