"""The DFlash block drafter as a drafter for ``speculative_generate``: ``gamma`` drafts from one drafter call.

State between rounds: the drafter's context cache holds the keys/values of exactly the committed prefix minus the
pending last token (whose target features the next verification computes), one slot per committed position; the
block ``[last, MASK x (block_size - 1)]`` is recomputed each round at positions ``p .. p + block_size - 1`` and never
cached, so nothing is rolled back. ``commit`` appends the features the verification forward computed for
``[last, d_1 .. d_A]`` (no extra target pass).

Why the chain verifier stays exact. ``verify_chain`` needs, at draft ``i``, that ``d_i`` was drawn from ``q_i`` given
everything the verifier conditions on (the context and ``d_1 .. d_{i-1}``), and it uses ``q_i`` as that
distribution. Here ``q_i`` is slot ``i``'s distribution, a function of the committed context alone, and every slot
draws with its own independent randomness: so given the context and ``d_1 .. d_{i-1}``, ``d_i`` is still distributed
as ``q_i`` (independence), which is the only property the acceptance proof uses (accept with ``min(1, p/q)``,
resample from the normalised ``(p - q)+``, bonus when all pass). A proposal that ignores the earlier drafts is a
special case of one that may depend on them; it accepts less, never wrongly. ``tests/decode/test_dflash_decode.py``
checks it as ``verify_chain`` was checked: greedy identity on every family, the full-loop chi-square at T = 1 and
with top-p, and a negative control (a drafter that reports a ``q`` other than the one it drew from) caught.

Usage::

    drafter = load_dflash_drafter("runs/smollm2-135m-instruct/dflash/head", target)
    speculative_generate(target, drafter, input_ids, gamma=7, sampling=..., max_new_tokens=128)
"""

from __future__ import annotations

import torch
from torch import nn

from eaglehead.draftheads.checkpoint import check_compatible, load_head
from eaglehead.draftheads.dflash import ContextCache, DFlashHead
from eaglehead.draftheads.taps import target_output_weight

from .sampling import SamplingConfig, greedy_argmax, probs, sample_from


class DFlashDrafter:
    """Adapts a :class:`DFlashHead` bound to ``target`` to the drafter protocol (``decode/drafters.py``)."""

    def __init__(self, head: DFlashHead, target: nn.Module, sampling: SamplingConfig | None = None):
        check_compatible(head.config, target.config)
        self.head = head.eval()
        head.bind_target(target, target_output_weight(target))
        self.vocab_size = head.config.target_vocab_size
        self.feature_layer_ids = list(head.config.fused_layer_ids)
        self.max_gamma = head.config.block_size - 1
        self.sampling = sampling
        self.cache: ContextCache | None = None

    def begin(self, input_ids, valid, target_features) -> None:
        bsz, t = input_ids.shape
        self.cache = ContextCache.for_head(self.head, bsz, capacity=max(256, 2 * t))
        real = valid.long()
        pos = (real.cumsum(1) - 1).clamp_min(0)  # each token's position among its row's real tokens
        self.next_pos, self.last = pos[:, -1], input_ids[:, -1]
        if t > 1:
            ok = valid[:, :-1]
            self._append(target_features, pos[:, :-1], None if bool(ok.all()) else ok)

    @torch.no_grad()
    def propose(self, gamma, sampling, generator=None):
        sampling = self.sampling or sampling
        bsz, dev = self.last.shape[0], self.last.device
        if gamma == 0:
            return torch.zeros(bsz, 0, dtype=torch.long, device=dev), torch.zeros(bsz, 0, self.vocab_size, device=dev)
        if gamma > self.max_gamma:
            raise ValueError(f"gamma={gamma}: a DFlash drafter of block_size {self.head.config.block_size} drafts at "
                             f"most {self.max_gamma} tokens a round")
        positions = self.next_pos[:, None] + torch.arange(self.head.config.block_size, device=dev)
        logits = self.head.draft_logits(self.last, positions, self.cache, slots=gamma)  # [B, gamma, V]
        if sampling.greedy:
            d = greedy_argmax(logits)
            return d, torch.zeros(*d.shape, self.vocab_size, device=dev).scatter_(-1, d[..., None], 1.0)
        q = probs(logits, sampling)  # each slot's own distribution, drawn independently
        return sample_from(q, generator), q

    def commit(self, n_accepted, draft, next_token, target_features) -> None:
        dev = next_token.device
        acc = torch.tensor(n_accepted, device=dev)
        width = int(max(n_accepted)) + 1
        j = torch.arange(width, device=dev)[None, :]
        ok = None if min(n_accepted) == max(n_accepted) else j <= acc[:, None]  # slots past a row's A: holes
        self._append(target_features[:, :width], self.next_pos[:, None] + j, ok)
        self.next_pos = self.next_pos + acc + 1
        self.last = next_token

    def _append(self, features, positions, ok) -> None:
        """Context keys/values of ``features [B, T, K*H]`` at ``positions [B, T]``; ``ok`` marks real slots."""
        head = self.head
        self.cache.append(head.context_kv(head.context_states(features), positions), ok)


def load_dflash_drafter(path: str, target: nn.Module, *, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, sampling: SamplingConfig | None = None) -> DFlashDrafter:
    """A saved DFlash drafter directory as a drafter for ``target`` (its device and dtype unless given)."""
    head = load_head(path, target_config=target.config, check=False)
    if not isinstance(head, DFlashHead):
        raise ValueError(f"{path}: a {type(head).__name__}, not a DFlash drafter (use load_eagle_drafter)")
    ref = next(target.parameters())
    return DFlashDrafter(head.to(device=device or ref.device, dtype=dtype or ref.dtype), target, sampling=sampling)
