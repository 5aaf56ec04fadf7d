"""Starting a head from its target: the draft layer from the target's last decoder layer, the output rows and the
final norm from the target's own, on the target's logit scale; and the output weight the rollout scores against.

Per family: Gemma's ``1 + w`` norms are copied as ``1 + w``; Granite's ``logits_scaling`` divides the output rows;
tied embeddings need nothing (the output rows are the embedding's rows); a layer that is not a SwiGLU Llama layer
(Gemma's GELU MLP with extra norms) is refused for ``head.layer_init=target``; a final logit soft-cap (Gemma 2) is
applied by the rollout to the product with :func:`target_output_weight`.

Usage::

    init_output_from_target(head, target)       # True when the final norm's gain was copied
    init_layer_from_target(head, target)        # head.layer_init=target
    weight = target_output_weight(target)       # [V, H], what the rollout multiplies the target's final state by
"""

from __future__ import annotations

import torch

from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.taps import logit_scale, target_output_weight  # noqa: F401 (re-exported)


def init_layer_from_target(head: Eagle3Head, target) -> None:
    """Start ``head.midlayer`` as the target's last decoder layer and add an identity block for the top fused
    feature to ``head.fc``.

    The head's q/k/v read ``[norm(embedding); norm(feature)]`` (width 2H): both halves get half the target's
    weights, so when the two halves are equal the projections are the target's. Both input norms take the
    target layer's input-norm gain. Needs a Llama-style layer (``self_attn.{q,k,v,o}_proj``,
    ``mlp.{gate,up,down}_proj``, two RMSNorms) of the head's sizes; anything else is a ValueError naming
    ``head.layer_init``.
    """
    decoder = target.get_decoder() if hasattr(target, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not layers:
        raise ValueError(f"head.layer_init=target: {type(target).__name__} has no decoder layers to copy "
                         "(expected model.layers); use head.layer_init=random")
    src, dst = layers[-1], head.midlayer
    act = getattr(target.config, "hidden_act", None) or getattr(target.config, "hidden_activation", None)
    if "Gemma" in type(getattr(src, "input_layernorm", None)).__name__ or act not in (None, "silu"):
        # Gemma's layer: GELU MLP, 1 + w norms and extra pre/post-feedforward norms; its weights mean something
        # else in the head's SwiGLU Llama layer (the names match, the function does not).
        raise ValueError(f"head.layer_init=target: the target's last layer ({type(src).__name__}, activation "
                         f"{act!r}) is not a SwiGLU Llama layer the head can start as; use head.layer_init=random")
    halved = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")  # read [emb; feature]
    names = halved + ("self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                      "input_layernorm.weight", "post_attention_layernorm.weight")
    weights = dict(src.named_parameters())
    for name in names:
        w, shape = weights.get(name), dst.get_parameter(name).shape
        want = (shape[0], shape[1] // 2) if name in halved else tuple(shape)
        if w is None or tuple(w.shape) != want:
            got = "missing" if w is None else f"shape {tuple(w.shape)}"
            raise ValueError(f"head.layer_init=target: the target's last layer has {name} {got}, the head needs "
                             f"{want} (a Llama-style layer of the head's sizes; head.intermediate_size must be "
                             "the target's); use head.layer_init=random")
    width = head.config.hidden_size
    top = head.config.fused_layer_ids.index(max(head.config.fused_layer_ids))
    with torch.no_grad():
        for name in names:
            param = dst.get_parameter(name)
            w = weights[name].to(param)
            param.copy_(torch.cat([0.5 * w, 0.5 * w], dim=1) if name in halved else w)
        dst.hidden_norm.weight.copy_(weights["input_layernorm.weight"].to(dst.hidden_norm.weight))
        block = head.fc.weight[:, top * width:(top + 1) * width]
        block += torch.eye(width, dtype=block.dtype, device=block.device)


def norm_gain(norm) -> torch.Tensor | None:
    """The multiplicative gain of a target's RMSNorm as a plain (Llama) RMSNorm would hold it, or None when it has
    none: Gemma's norms compute ``x * (1 + w)`` (stored ``w``), so their gain is ``1 + w``; a LayerNorm (a bias)
    or any other kind is not an RMSNorm gain."""
    name, gain = type(norm).__name__, getattr(norm, "weight", None)
    if not name.endswith("RMSNorm") or gain is None or getattr(norm, "bias", None) is not None:
        return None
    return 1.0 + gain.float() if "Gemma" in name else gain


def init_output_from_target(head: Eagle3Head, target) -> bool:
    """Copy the target's output rows of the draft vocabulary into ``head.lm_head`` (divided by the target's logit
    scaling, Granite's ``logits_scaling``: the head's logits then start on the target's scale) and, when the target's
    final norm is an RMSNorm of the head's width, its gain into ``head.norm`` (Gemma's ``1 + w`` as ``1 + w``).

    Returns whether the norm was copied. Tied embeddings (Gemma) need nothing special: the output rows are the
    embedding's rows. LayerNorms (with a bias) leave the head's own norm initialisation.
    """
    w = target.get_output_embeddings().weight
    with torch.no_grad():
        rows = w.index_select(0, head.target_ids.to(w.device)).float() / logit_scale(target)
        head.lm_head.weight.copy_(rows.to(head.lm_head.weight))
        decoder = target.get_decoder() if hasattr(target, "get_decoder") else None
        norm = getattr(decoder, "norm", None)
        gain = norm_gain(norm) if norm is not None else None
        if gain is None or gain.shape != head.norm.weight.shape:
            return False
        head.norm.weight.copy_(gain.to(head.norm.weight))
    return True
