"""The target's side of tree verification: one forward over ``[root] + tree`` and the cache compaction.

Cache convention as in :mod:`eaglehead.decode.cache`: with ``L`` committed tokens the cache holds the
first ``L - 1`` and the root (the last committed token) is pending. :meth:`TreeCacheLM.forward_tree`
feeds ``[root, node_0..node_{N-1}]`` in one call through the public API: explicit ``position_ids``
(root at the row's logical length ``P_b``, a node at ``P_b + depth``) and a 4D additive float mask
``[B, 1, N+1, K+N+1]`` that transformers passes to attention as is: every row sees the row's valid
cached entries (holes stay masked) and, inside the tree, itself and its ancestors only. So the logits of
a node equal those of a chain forward over its path (proven in float64 by ``tests/decode/test_tree_target.py``).

After acceptance, :meth:`TreeCacheLM.keep_path` moves the keys/values of ``[root] + accepted path`` to
the front of the new block, in place, and crops the rest as :meth:`RaggedCacheLM.keep_recent` does
(rows that accepted less get holes). The accepted node at depth ``k`` was computed at position
``P_b + k`` and now sits at slot ``P_b + k`` of the row's valid entries: positions stay right and the
cache equals a recompute of the committed tokens.

Sliding-window layers: their cache is kept full length like every other layer (:mod:`.cache`), so the
compaction is the same, and the sliding layers get their own mask (:mod:`.attention_layout`): the tree mask
and, in addition, ``pos_query - pos_key < W`` by position (a node at ``P_b + depth``, a cached entry at the
count of valid entries before it). The attention implementation must take a 4D mask (eager, sdpa): checked
when the runner is built, before decoding starts.
"""

from __future__ import annotations

import torch

from .attention_layout import check_maskable, slot_positions
from .cache import ForwardOut, RaggedCacheLM
from .tree import DraftTree, ancestor_mask


class TreeCacheLM(RaggedCacheLM):
    """:class:`RaggedCacheLM` that can also verify a draft tree in one target call."""

    _tree_width = 0  # N + 1 of the last tree forward, until keep_path

    def __init__(self, model, feature_layer_ids: list[int] | None = None):
        check_maskable(model, "tree verification")
        super().__init__(model, feature_layer_ids)

    def tree_mask(self, tree: DraftTree, dtype: torch.dtype, positions: torch.Tensor):
        """The additive mask ``[B, 1, N+1, K+N+1]`` (0 = attend, dtype minimum = masked), ``K`` cached entries,
        or the per-layer-type dict of such masks on a target with sliding layers. ``positions [B, N+1]`` of
        ``[root] + tree``."""
        past = self.valid  # [B, K] bool
        past_pos = None
        if self.layout.sliding:
            past_pos = (torch.arange(past.shape[1], device=past.device).expand_as(past) if self._valid is None
                        else slot_positions(past))
        return self.layout.masks(past, positions, ancestor_mask(tree.parents, tree.depth), dtype, past_pos)

    @torch.no_grad()
    def forward_tree(self, root: torch.Tensor, tree: DraftTree, *, want_features: bool = False) -> ForwardOut:
        """Append ``[root [B]] + tree.tokens`` and return their logits ``[B, N+1, V]`` (and fused features).

        The new entries count as valid until :meth:`keep_path` keeps the accepted ones.
        """
        if self.cache is None:
            raise RuntimeError("call reset(batch_size) before forward_tree")
        bsz, n = tree.tokens.shape
        if root.shape != (bsz,):
            raise ValueError(f"root must be [B] = [{bsz}], got {tuple(root.shape)}")
        tokens = torch.cat([root[:, None], tree.tokens], 1)  # [B, N+1]
        depths = torch.cat([tree.depths.new_zeros(bsz, 1), tree.depths], 1)
        positions = self.lengths[:, None] + depths  # root at the row's logical length
        kwargs = {
            "input_ids": tokens,
            "position_ids": positions,
            "attention_mask": self.tree_mask(tree, self._dtype(), positions),
            self._cache_kw: self.cache,
            "use_cache": True,
        }
        out, features = self._call(kwargs, want_features)
        self._physical += n + 1
        if self._valid is not None:
            self._valid = torch.cat([self._valid, torch.ones_like(tokens, dtype=torch.bool)], 1)
            self._lengths = self._lengths + n + 1
        self._tree_width = n + 1
        return ForwardOut(logits=out.logits, features=features)

    def keep_path(self, path: torch.Tensor, n_accepted: list[int]) -> None:
        """Keep ``[root] + path[b, :n_accepted[b]]`` of the last tree block, compacted to its front.

        ``path [B, D]`` node indices (``-1`` beyond the accepted depth); ``n_accepted`` the host list of
        accepted depths (the caller's one host sync already paid for it).
        """
        width, self._tree_width = self._tree_width, 0
        if width == 0:
            raise RuntimeError("keep_path must follow forward_tree")
        longest = max(n_accepted) + 1
        if longest > 1:
            start = self._physical - width
            # Source offset (within the block) of each kept entry: the root, then the path's nodes.
            # Padding (-1) maps to the root; those entries become holes or are cropped below.
            src = torch.cat([path.new_zeros(path.shape[0], 1), path[:, : longest - 1] + 1], 1)  # [B, longest]
            for layer in self.cache.layers:
                for name in ("keys", "values"):
                    t = getattr(layer, name)  # [B, H, K, D] (a view of GrowingLayer's buffer: written in place)
                    idx = (start + src)[:, None, :, None].expand(t.shape[0], t.shape[1], longest, t.shape[3])
                    t[:, :, start:start + longest] = t.gather(2, idx)
        self.keep_recent(width, [a + 1 for a in n_accepted])
