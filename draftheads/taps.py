"""Read a target's intermediate hidden states through forward hooks, without forking modeling code.

Layer ids use Hugging Face ``output_hidden_states`` indexing: id 0 is the embedding output (the
input of decoder layer 0), id ``i`` in ``1..L-1`` is the output of decoder layer ``i-1`` and id ``L`` the
final-normed state that enters ``lm_head`` (as ``output_hidden_states`` reports it). EAGLE-3
fuses three of them (default ``[2, L//2, L-3]``, as vLLM and the EAGLE reference do).

Usage::

    taps = FeatureTaps(model, [2, 6, 9])
    with taps.capture() as cap:
        out = model(input_ids, ...)
    fused = cap.fused()          # [B, T, 3 * H_target]
    final = cap.final_hidden     # [B, T, H_target], the input of lm_head (after the final norm)
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn


def default_layer_ids(num_layers: int) -> list[int]:
    """The low/mid/high ids vLLM and the EAGLE reference use: ``[2, L//2, L-3]``.

    Below 7 layers those collide, so small (test/demo) targets get the three distinct ids
    ``[L-3, L-2, L-1]``; every id stays below ``L``, which the serving engines can capture.
    """
    if num_layers >= 7:
        return [2, num_layers // 2, num_layers - 3]
    if num_layers >= 3:
        return [num_layers - 3, num_layers - 2, num_layers - 1]
    raise ValueError(f"a target needs at least 3 decoder layers for three fused feature ids, got {num_layers}")


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """Find the stack of decoder layers of a Hugging Face causal LM.

    Known attribute paths first (Llama/Qwen/Mistral ``model.layers``, GPT-2 ``transformer.h``,
    GPT-NeoX ``gpt_neox.layers``); otherwise the only ``ModuleList`` whose length equals
    ``config.num_hidden_layers``.
    """
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers", "transformer.layers"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return obj
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    found = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n]
    if len(found) != 1:
        raise ValueError(
            f"cannot locate the decoder layers of {type(model).__name__}: expected one nn.ModuleList of "
            f"length num_hidden_layers={n}, found {len(found)}"
        )
    return found[0]


def num_decoder_layers(model: nn.Module) -> int:
    return len(decoder_layers(model))


@dataclass
class Capture:
    """Tensors recorded during one forward pass."""

    layer_ids: list[int]
    by_id: dict[int, torch.Tensor] = field(default_factory=dict)
    final_hidden: torch.Tensor | None = None
    final_id: int = -1  # L: the id of the final-normed state

    def set_final(self, hidden: torch.Tensor) -> None:
        """Record the final-normed state (the input of ``lm_head``), also as layer id ``L`` when tapped."""
        self.final_hidden = hidden
        if self.final_id in self.layer_ids:
            self.by_id[self.final_id] = hidden

    def fused(self) -> torch.Tensor:
        """``cat`` of the tapped hidden states, low to high: ``[B, T, len(ids) * H]``."""
        missing = [i for i in self.layer_ids if i not in self.by_id]
        if missing:
            raise RuntimeError(f"layer ids {missing} were not reached in the forward pass")
        return torch.cat([self.by_id[i] for i in self.layer_ids], dim=-1)


class FeatureTaps:
    """Forward hooks on a causal LM's decoder layers and ``lm_head``; installed only inside ``capture``."""

    def __init__(self, model: nn.Module, layer_ids: list[int], capture_final: bool = False):
        self.model = model
        self.layers = decoder_layers(model)
        n = len(self.layers)
        ids = [int(i) for i in layer_ids]
        bad = [i for i in ids if not 0 <= i <= n]
        if bad:
            raise ValueError(
                f"layer_ids {ids} out of range for a target with {n} decoder layers "
                f"(valid: 0..{n} in output_hidden_states indexing)"
            )
        self.layer_ids = ids
        self.capture_final = capture_final

    @property
    def reads_lm_head_input(self) -> bool:
        """Whether a capture records the final-normed state at ``lm_head``'s input: then every row must reach
        ``lm_head`` (no ``logits_to_keep``) for the features to cover every position."""
        return self.capture_final or len(self.layers) in self.layer_ids

    @contextmanager
    def capture(self):
        n = len(self.layers)
        cap = Capture(list(self.layer_ids), final_id=n)
        handles = []

        def pre_hook(layer_id):
            def hook(module, args, kwargs):
                h = args[0] if args else kwargs["hidden_states"]
                cap.by_id[layer_id] = h
            return hook

        try:
            for i in sorted(set(self.layer_ids)):
                if i < n:  # input of layer i == output_hidden_states[i]
                    handles.append(self.layers[i].register_forward_pre_hook(pre_hook(i), with_kwargs=True))
            if self.reads_lm_head_input:
                # output_hidden_states[L] is the final-normed state, i.e. the input of lm_head.
                def final_hook(module, args):
                    cap.set_final(args[0])

                handles.append(self.model.get_output_embeddings().register_forward_pre_hook(final_hook))
            yield cap
        finally:
            for h in handles:
                h.remove()


def logit_scale(target) -> float:
    """What the target divides its ``lm_head`` output by (Granite's ``logits_scaling``; 1 for the others)."""
    return float(getattr(target.config, "logits_scaling", None) or 1.0)


def target_output_weight(target) -> torch.Tensor:
    """The ``[V, H]`` weight whose product with the final-normed state is the target's logits: ``lm_head``'s, divided
    by Granite's ``logits_scaling`` (a copy only then). A final soft-cap (Gemma 2's ``final_logit_softcapping``) is
    not linear: the rollout applies it to this product (``RolloutModule(logit_softcap=...)``)."""
    w = target.get_output_embeddings().weight
    scale = logit_scale(target)
    return w if scale == 1.0 else w / scale
