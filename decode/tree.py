"""Exact verification of a draft *tree* (EAGLE-2 dynamic trees), and the tree's flat layout.

Layout. A round's tree hangs below the *root*, the last committed token (pending in the target cache).
Its ``N`` draft nodes are a flat list in which every parent precedes its children (e.g. sorted by depth):
``tokens [B, N]`` (target ids), ``parents [B, N]`` (index of the parent node, ``-1`` for a child of the
root) and ``depths [B, N]`` (``1`` for a child of the root). The target verifies ``[root] + nodes`` in
one forward; row ``0`` of its distributions ``p [B, N+1, V]`` is the root's, row ``i + 1`` node ``i``'s.

Rule (each child is a point-mass proposal, as SGLang's ``tree_speculative_sampling_target_only``).
Start at the root. At a node with target distribution ``p`` (already temperature/top-k/top-p
transformed) try its children ``c_1..c_m`` in node order: accept ``c_j`` with probability
``r_j(c_j)``, where ``r_1 = p`` and ``r_{j+1} = normalize(r_j with c_j zeroed)``, i.e.
``r_j(c_j) = p(c_j) / (1 - p(c_1) - .. - p(c_{j-1}))`` (a repeated sibling token has ``r_j = 0``).
On acceptance descend into ``c_j`` and repeat with its target row. If every child is rejected, emit
one token from ``r_{m+1}`` (``p`` with every child zeroed); at a leaf reached by acceptance, emit a
bonus token from the leaf's ``p`` (the same formula with no children).

Exactness. Write ``R_j = 1 - p(c_1) - .. - p(c_{j-1})``; then ``1 - r_i(c_i) = R_{i+1} / R_i`` and
``P(accept c_j) = prod_{i<j} (1 - r_i(c_i)) * r_j(c_j) = R_j * p(c_j) / R_j = p(c_j)``, while a token
``x`` that is no child is emitted with ``R_{m+1} * p(x) / R_{m+1} = p(x)``. So every visited node
emits exactly one token distributed as ``p`` given the path so far (the accepted child *is* the
emitted token; descending just reuses that child's already computed target row). The tree is a
function of the committed prefix only (never of the target's draws), so by induction over depth,
and then over rounds, the committed sequence is distributed as the target's. Greedy (``p`` one-hot
at the lowest-id argmax) therefore follows the target's argmax as deep as the tree allows. No draft
distribution ``q`` enters: verifying deterministic top-k children with the chain's
``min(1, p / q)`` would be biased (the tests' negative control).

The flags of all children are drawn at once (one uniform per node): "the first accepted child in
order" has the same law as trying them one after another, so no Python loop over children is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import greedy_argmax, sample_from


@dataclass
class DraftTree:
    """A batch of draft trees of ``N`` nodes each (see the module docstring for the layout).

    ``depth`` (host int) bounds every node's depth; the verifier loops that many times.
    """

    tokens: torch.Tensor  # [B, N] long, target vocabulary ids
    parents: torch.Tensor  # [B, N] long, -1 = child of the root; parents precede children
    depths: torch.Tensor  # [B, N] long, 1 = child of the root
    depth: int

    def __post_init__(self) -> None:
        shapes = {tuple(t.shape) for t in (self.tokens, self.parents, self.depths)}
        if len(shapes) != 1 or self.tokens.dim() != 2:
            raise ValueError(f"tree tokens, parents and depths must share one shape [B, N]; got tokens "
                             f"{tuple(self.tokens.shape)}, parents {tuple(self.parents.shape)}, "
                             f"depths {tuple(self.depths.shape)}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 0:
            raise ValueError(f"depth must be an integer >= 0, got {self.depth!r}")
        if self.tokens.shape[1] > 0 and self.depth == 0:
            raise ValueError("depth must be >= 1 for a tree with nodes")

    @property
    def n_nodes(self) -> int:
        return self.tokens.shape[1]

    @classmethod
    def empty(cls, bsz: int, device=None) -> DraftTree:
        """No draft nodes: verification samples the root's ``p`` (a plain decoding step)."""
        z = torch.zeros(bsz, 0, dtype=torch.long, device=device)
        return cls(z, z.clone(), z.clone(), 0)


def check_tree(tree: DraftTree) -> None:
    """Raise ``ValueError`` unless parents precede children and depths follow the parents.

    Costs host syncs: for tests and for checking a new drafter, not for the decoding loop.
    """
    n = tree.n_nodes
    par, dep = tree.parents, tree.depths
    idx = torch.arange(n, device=par.device)
    if bool(((par < -1) | (par >= idx)).any()):
        raise ValueError(f"tree parents must be -1 or the index of an earlier node, got {par.tolist()}")
    parent_depth = torch.where(par < 0, torch.zeros_like(dep), dep.gather(1, par.clamp_min(0)))
    if bool((dep != parent_depth + 1).any()) or (n and int(dep.max()) > tree.depth):
        raise ValueError(f"tree depths must be parent depth + 1 (root children 1) and <= depth {tree.depth}; "
                         f"got depths {dep.tolist()} for parents {par.tolist()}")


def ancestor_mask(parents: torch.Tensor, depth: int) -> torch.Tensor:
    """``[B, N+1, N+1]`` bool: entry ``[b, i, j]`` is true iff row ``j`` is row ``i`` or an ancestor of it.

    Rows are ``[root] + nodes`` (node ``k`` is row ``k + 1``); the root is everyone's ancestor. Each of
    the ``depth`` steps walks every row one level up (the root is its own parent, a fixed point).
    """
    bsz, n = parents.shape
    up = torch.cat([parents.new_zeros(bsz, 1), parents + 1], 1)  # [B, N+1] parent row of each row
    cur = torch.arange(n + 1, device=parents.device).expand(bsz, n + 1)
    anc = torch.eye(n + 1, dtype=torch.bool, device=parents.device).repeat(bsz, 1, 1)
    for _ in range(depth):
        cur = up.gather(1, cur)
        anc.scatter_(2, cur[..., None], True)
    return anc


def select_nodes(scores: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor,
                 n: int, depth: int) -> DraftTree:
    """The best ``n`` of ``M`` candidate nodes per row, as a :class:`DraftTree` in candidate order.

    ``scores [B, M]`` are cumulative log-probabilities along each path, so never larger than the
    parent's; candidates are laid out with parents first and depth non-decreasing. A stable sort on
    the score (descending) breaks ties by candidate index, which puts a parent strictly before its
    children: the selection is closed under ancestors. ``parents`` index candidates (-1 = root).
    """
    bsz, m = scores.shape
    n = min(n, m)
    best = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :n]  # [B, n]
    chosen = torch.sort(best, dim=1).values  # candidate order again: parents precede children
    slot = torch.full((bsz, m + 1), -1, dtype=torch.long, device=scores.device)  # candidate -> node index
    slot[:, 1:].scatter_(1, chosen, torch.arange(n, device=scores.device).expand(bsz, n))
    par = slot.gather(1, parents.gather(1, chosen) + 1)  # -1 (root) maps through slot[:, 0] = -1
    return DraftTree(tokens.gather(1, chosen), par, depths.gather(1, chosen), depth)


@dataclass
class TreeVerdict:
    accepted: torch.Tensor  # [B] accepted depth (number of accepted nodes on the path)
    path: torch.Tensor  # [B, depth] node indices of the accepted path, -1 beyond ``accepted``
    next_token: torch.Tensor  # [B] the residual (or bonus) token emitted after the path
    path_tokens: torch.Tensor  # [B, depth] tokens of the path, -1 beyond ``accepted``


def verify_tree(p: torch.Tensor, tree: DraftTree, generator: torch.Generator | None = None) -> TreeVerdict:
    """Verify a batch of draft trees with the rule of the module docstring.

    Args:
        p: ``[B, N+1, V]`` target distributions; row 0 is the root's, row ``i + 1`` node ``i``'s.
        tree: the ``N`` nodes per row.
        generator: source of every random draw (one uniform per node, then the residual/bonus sample).

    Vectorised over batch, nodes and vocabulary; the only Python loop walks ``tree.depth`` levels
    down the accepted path. No host sync.
    """
    bsz, n = tree.tokens.shape
    if p.dim() != 3 or p.shape[:2] != (bsz, n + 1):
        raise ValueError(f"p must be [B, N+1, V] = [{bsz}, {n + 1}, V] for a tree of {n} nodes, "
                         f"got {tuple(p.shape)}")
    p = p.float()
    rows = torch.arange(bsz, device=p.device)
    par = tree.parents + 1  # [B, N] p-row of each node's parent
    tok = tree.tokens
    accepted, cur, path_t, path_tokens = _walk(_first_accepted_children(p, par, tok, generator), tree)

    # Emit from p at the last reached node with its children's tokens zeroed ([B, V]).
    p_row = p[rows, cur]
    is_child = (par == cur[:, None]).float()  # [B, N]
    hit = torch.zeros_like(p_row).scatter_add_(1, tok, is_child) > 0  # scatter_add: duplicate tokens are fine
    residual = torch.where(hit, torch.zeros_like(p_row), p_row)
    # Exactly, a rejection of every child leaves mass outside them; float rounding can leave none
    # (the children held all of p), and then p itself is the right distribution, as in verify_chain.
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_row, residual)
    return TreeVerdict(accepted, path_t, sample_from(residual, generator), path_tokens)


def verify_tree_greedy(logits: torch.Tensor, tree: DraftTree) -> TreeVerdict:
    """:func:`verify_tree` for a greedy target, from its ``logits [B, N+1, V]``: the same verdict without
    building ``p`` or drawing. With ``p`` the point mass at the argmax ``t`` of each row (the first maximum,
    as ``probs`` breaks ties), a child is accepted exactly when its token is its parent row's ``t`` and no
    earlier sibling carries it (``r_j(c) = 1``; every other child has ``p(c) = 0``), and the token emitted
    where the walk stops is that row's ``t`` (no child holds it, so zeroing the children leaves ``p``)."""
    bsz, n = tree.tokens.shape
    if logits.dim() != 3 or logits.shape[:2] != (bsz, n + 1):
        raise ValueError(f"logits must be [B, N+1, V] = [{bsz}, {n + 1}, V] for a tree of {n} nodes, "
                         f"got {tuple(logits.shape)}")
    t = greedy_argmax(logits)  # [B, N+1]
    par = tree.parents + 1
    hit = tree.tokens == t.gather(1, par)  # [B, N] the node is its parent's argmax
    first = torch.where(hit, torch.arange(n, device=t.device).expand(bsz, n), n)
    chosen = torch.full((bsz, n + 1), n, dtype=torch.long, device=t.device).scatter_reduce(1, par, first, "amin")
    accepted, cur, path_t, path_tokens = _walk(chosen, tree)
    return TreeVerdict(accepted, path_t, t.gather(1, cur[:, None]).squeeze(1), path_tokens)


def _walk(chosen: torch.Tensor, tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Descend from the root through each row's first accepted child (``chosen [B, N+1]``: per p-row, a node
    index or ``N`` for none): ``(accepted depth [B], p-row reached [B], path [B, depth] with -1 after a stop,
    path tokens [B, depth] with -1 after a stop)``."""
    bsz, n = tree.tokens.shape
    dev = chosen.device
    path = []
    cur = torch.zeros(bsz, dtype=torch.long, device=dev)  # p-row of the node reached so far
    accepted = torch.zeros(bsz, dtype=torch.long, device=dev)
    for _ in range(tree.depth):
        nxt = chosen.gather(1, cur[:, None]).squeeze(1)  # [B] node index, n = no child accepted
        ok = nxt < n
        path.append(torch.where(ok, nxt, -1))
        cur = torch.where(ok, nxt + 1, cur)  # a stopped row stays put: its chosen child stays "none"
        accepted = accepted + ok.long()
    path_t = torch.stack(path, 1) if path else tree.tokens.new_zeros(bsz, 0)
    path_tokens = torch.where(path_t >= 0, tree.tokens.gather(1, path_t.clamp_min(0)), -1)
    return accepted, cur, path_t, path_tokens


def _first_accepted_children(p: torch.Tensor, par: torch.Tensor, tok: torch.Tensor,
                             generator: torch.Generator | None) -> torch.Tensor:
    """``[B, N+1]``: for every p-row, the index of its first accepted child (``N`` when none is).

    ``par [B, N]`` p-row of each node's parent, ``tok [B, N]`` its token. Masses are float64 sums of
    the float32 ``p``, so ``R_j`` = (row total) - (earlier siblings' mass) loses no precision to
    cancellation until the remaining mass is ~1e-12, a state reached with that probability at most.
    """
    bsz, n = tok.shape
    dev = p.device
    p_child = p[torch.arange(bsz, device=dev)[:, None], par, tok].double()  # [B, N] p_parent(c)
    total = p.sum(-1, dtype=torch.float64).gather(1, par)  # [B, N] mass of the parent's row
    idx = torch.arange(n, device=dev)
    sibling_before = (par[:, :, None] == par[:, None, :]) & (idx[None, :] < idx[:, None])[None]  # [B, N(i), N(j)]
    repeat = (sibling_before & (tok[:, :, None] == tok[:, None, :])).any(-1)  # token already tried at this node
    removed = (sibling_before.double() @ torch.where(repeat, 0.0, p_child)[..., None]).squeeze(-1)  # [B, N]
    u = torch.rand(bsz, n, generator=generator, device=dev, dtype=torch.float64)
    # u < p(c) / R without dividing: R <= p(c) (all remaining mass on c) is a certain acceptance.
    accept = ~repeat & (u * (total - removed) < p_child)
    first = torch.where(accept, idx.expand(bsz, n), n)
    return torch.full((bsz, n + 1), n, dtype=torch.long, device=dev).scatter_reduce(1, par, first, "amin")
