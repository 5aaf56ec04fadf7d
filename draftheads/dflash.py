"""DFlash block drafter: a whole block of draft tokens from one forward pass, conditioned on the target's features.

Architecture (DFlash, Chen, Liang, Liu 2026; the layout vLLM's ``qwen3_dflash.py`` and z-lab's ``dflash/model.py``
build). ``K`` target hidden states (``fused_layer_ids``, our boundary indexing: id ``k`` is
``output_hidden_states[k]``, the input of decoder layer ``k``) are concatenated, projected by ``fc`` (``K*H -> H``)
and normed (``hidden_norm``): one *context state* per committed position. Every drafter layer (Qwen3-style: q/k
RMSNorms per head, SwiGLU MLP) projects the context states with its own ``k_proj``/``v_proj`` (then ``k_norm`` and
RoPE at the context positions) into keys/values it attends to besides the block's own. The block is
``[last committed token, MASK x (block_size - 1)]`` at positions ``p .. p + block_size - 1`` (``p``: the last
token's position, whose target features are not known yet), embedded by the *target's* embedding (raw table rows),
attends non-causally to itself and to every context position ``< p``; the final-normed output of block slot
``k >= 1`` is scored by the *target's* output layer and predicts the token at position ``p + k`` (slot 0's output
is unused). Nothing of the target is stored in the drafter: ``bind_target`` shares the embedding and output weights.

The drafter's state while decoding is the context keys/values of each layer for exactly the committed prefix
(``ContextCache``); the block itself is recomputed each round, so there is nothing to roll back.

Usage::

    head = DFlashHead(DFlashConfig.from_target_config(target.config, num_hidden_layers=2, mask_token_id=m))
    head.bind_target(target)
    ctx = head.context_states(fused)                             # fused [B, T, K*H] -> [B, T, H]
    cache = ContextCache.for_head(head, batch_size=B)
    cache.append(head.context_kv(ctx, positions))                # positions [B, T]
    logits = head.draft_logits(last_token, block_positions, cache)   # [B, block_size - 1, V]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import normalise_rope_scaling, target_dims
from .eagle3 import DraftKVCache, RMSNorm, SwiGLU
from .rope import apply_rope, rope_cos_sin, rope_frequencies

DEFAULT_BLOCK_SIZE = 16
DEFAULT_NUM_FUSED = 5


def default_dflash_layer_ids(num_target_layers: int, count: int = DEFAULT_NUM_FUSED) -> list[int]:
    """``count`` boundary ids evenly spaced over the outputs of layers 1 .. L-3 (z-lab's rule, whose ids name a
    layer's *output*: ours are theirs plus one). One id: the output of layer L // 2."""
    if count == 1:
        return [num_target_layers // 2 + 1]
    start, end = 1, num_target_layers - 3
    if end <= start:
        raise ValueError(f"fused_layer_ids: a target of {num_target_layers} layers is too shallow for the default "
                         f"rule (layers 1..L-3); pass fused_layer_ids explicitly")
    span = end - start
    return [int(round(start + i * span / (count - 1))) + 1 for i in range(count)]


@dataclass
class DFlashConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    target_num_hidden_layers: int
    target_vocab_size: int
    fused_layer_ids: list[int]
    mask_token_id: int
    num_hidden_layers: int = 2  # drafter layers
    block_size: int = DEFAULT_BLOCK_SIZE
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    target_name_or_path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # kept as written (provenance); never read

    def __post_init__(self):
        for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                     "num_hidden_layers", "target_num_hidden_layers", "target_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DFlashConfig.{name}: expected a positive integer, got {value!r}")
        if self.block_size < 2:
            raise ValueError(f"DFlashConfig.block_size: expected >= 2 (the last token plus at least one MASK), "
                             f"got {self.block_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"DFlashConfig: num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads={self.num_key_value_heads}")
        ids = list(self.fused_layer_ids)
        if not ids or any(not 1 <= i <= self.target_num_hidden_layers for i in ids) or ids != sorted(set(ids)):
            raise ValueError(f"DFlashConfig.fused_layer_ids: expected increasing ids in 1..{self.target_num_hidden_layers} "
                             f"(boundary indices of the target's output_hidden_states), got {ids}")
        if not 0 <= self.mask_token_id < self.target_vocab_size:
            raise ValueError(f"DFlashConfig.mask_token_id: expected a token id in 0..{self.target_vocab_size - 1}, "
                             f"got {self.mask_token_id}")
        if self.hidden_act != "silu":
            raise ValueError(f"DFlashConfig.hidden_act: only 'silu' (SwiGLU) is implemented, got {self.hidden_act!r}")
        self.fused_layer_ids = ids
        self.rope_scaling = normalise_rope_scaling(self.rope_scaling)

    @property
    def target_hidden_size(self) -> int:  # the drafter shares the target's embedding and output layer
        return self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DFlashConfig:
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"DFlashConfig: unknown key(s) {unknown}")
        return cls(**d)

    @classmethod
    def from_target_config(cls, hf_config: Any, *, mask_token_id: int, **overrides: Any) -> DFlashConfig:
        """The drafter of a target: its width, heads, MLP size, RoPE and norm eps; ``fused_layer_ids`` default to
        :func:`default_dflash_layer_ids`. ``overrides`` replace any field (unknown names raise)."""
        t = target_dims(hf_config)
        derived = {
            "hidden_size": t["hidden_size"], "num_attention_heads": t["num_attention_heads"],
            "num_key_value_heads": t["num_key_value_heads"], "head_dim": t["head_dim"],
            "intermediate_size": t["intermediate_size"], "target_num_hidden_layers": t["num_hidden_layers"],
            "target_vocab_size": t["vocab_size"], "rms_norm_eps": t["rms_norm_eps"], "rope_theta": t["rope_theta"],
            "rope_scaling": t["rope_scaling"], "max_position_embeddings": t["max_position_embeddings"],
            "target_name_or_path": t["name_or_path"], "mask_token_id": mask_token_id,
        }
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"DFlashConfig: unknown override(s) {unknown}")
        derived.update({k: v for k, v in overrides.items() if v is not None})
        if "fused_layer_ids" not in derived:
            derived["fused_layer_ids"] = default_dflash_layer_ids(t["num_hidden_layers"])
        return cls(**derived)


class DFlashAttention(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)


class DFlashLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DFlashAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (k_norm, RoPE) and values ``[B, kv_heads, T, d]`` of inputs ``x [B, T, H]`` (already normed)."""
        b, t, _ = x.shape
        d = self.cfg.head_dim
        k = self.self_attn.k_norm(self.self_attn.k_proj(x).view(b, t, -1, d)).transpose(1, 2)
        v = self.self_attn.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(self, h, cos, sin, ctx_k, ctx_v, mask):
        """One layer over the block ``h [B, Q, H]``: keys are the context's then the block's own; ``mask
        [B, 1, Q, Tc + Q]`` bool (True: attend) or None (everything)."""
        b, q_len, _ = h.shape
        d = self.cfg.head_dim
        x = self.input_layernorm(h)
        q = self.self_attn.q_norm(self.self_attn.q_proj(x).view(b, q_len, -1, d)).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k, v = self.kv(x, cos, sin)
        k, v = torch.cat((ctx_k.to(k.dtype), k), dim=2), torch.cat((ctx_v.to(v.dtype), v), dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(d), enable_gqa=True)
        h = h + self.self_attn.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashHead(nn.Module):
    head_type = "dflash"

    def __init__(self, config: DFlashConfig):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(len(config.fused_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.__dict__["_embedding"] = None  # the target's, shared: never a submodule, never in state_dict
        self.__dict__["_output"] = None
        self._rope: dict = {}

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def bind_target(self, target: nn.Module, output_weight: torch.Tensor | None = None) -> None:
        """Share the target's input embedding table and output weight (``output_weight`` overrides it, e.g.
        Granite's scaled one); checks the widths."""
        emb = target.get_input_embeddings().weight
        out = target.get_output_embeddings().weight if output_weight is None else output_weight
        want = (self.config.target_vocab_size, self.config.hidden_size)
        for name, w in (("input embedding", emb), ("output layer", out)):
            if tuple(w.shape) != want:
                raise ValueError(f"bind_target: the target's {name} is {list(w.shape)}, the drafter expects "
                                 f"{list(want)} (target_vocab_size x hidden_size)")
        self.__dict__["_embedding"], self.__dict__["_output"] = emb, out

    def _bound(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._embedding is None:
            raise ValueError("DFlashHead: no target bound; call bind_target(target) first")
        return self._embedding, self._output

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin [B, T, head_dim]`` at integer ``positions [B, T]``."""
        key = str(positions.device)
        if key not in self._rope:
            cfg = self.config
            self._rope[key] = rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling,
                                               max_position_embeddings=cfg.max_position_embeddings,
                                               device=positions.device)
        inv, scaling = self._rope[key]
        return rope_cos_sin(positions, inv, self.dtype, scaling)

    def context_states(self, fused: torch.Tensor) -> torch.Tensor:
        """``hidden_norm(fc(fused))``: ``[B, T, K*H] -> [B, T, H]``."""
        return self.hidden_norm(self.fc(fused.to(self.dtype)))

    def context_kv(self, ctx: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(k, v) [B, kv_heads, T, d]`` of the context states ``ctx [B, T, H]`` at ``positions``."""
        cos, sin = self.rope(positions)
        return [layer.kv(ctx, cos, sin) for layer in self.layers]

    def block_input(self, last: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """Token ids ``[B, width]`` of the block ``[last, MASK ...]`` (``width`` defaults to ``block_size``)."""
        width = width or self.config.block_size
        ids = torch.full((last.shape[0], width), self.config.mask_token_id, dtype=torch.long, device=last.device)
        ids[:, 0] = last
        return ids

    def block_hidden(self, block_ids: torch.Tensor, positions: torch.Tensor,
                     ctx_kv: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor | None) -> torch.Tensor:
        """Final-normed outputs ``[B, Q, H]`` of block tokens ``block_ids [B, Q]`` at ``positions [B, Q]``."""
        emb, _ = self._bound()
        h = F.embedding(block_ids, emb).to(self.dtype)  # raw table rows, as the engines share the embedding
        cos, sin = self.rope(positions)
        for layer, (k, v) in zip(self.layers, ctx_kv):
            h = layer(h, cos, sin, k, v, mask)
        return self.norm(h)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's output layer on drafter outputs (target vocabulary)."""
        _, out = self._bound()
        return F.linear(hidden.to(out.dtype), out)

    def draft_logits(self, last: torch.Tensor, positions: torch.Tensor, cache: ContextCache,
                     slots: int | None = None) -> torch.Tensor:
        """Logits ``[B, slots, V]`` of block slots ``1 .. slots`` (default all, ``block_size - 1``) for the block
        after ``last [B]`` at ``positions [B, block_size]`` (``positions[:, 0]``: ``last``'s), over the cached
        context. The whole block always runs (what training saw); only the wanted slots meet the output layer."""
        contents = [c.contents() for c in cache.layers]
        ctx_kv = [(k, v) for k, v, _ in contents]
        valid, q = contents[0][2], positions.shape[1]
        mask = None
        if valid is not None:  # holes (ragged rounds): each row sees its valid context slots and the whole block
            own = torch.ones(valid.shape[0], q, dtype=torch.bool, device=valid.device)
            mask = torch.cat((valid, own), dim=1)[:, None, None, :].expand(-1, 1, q, -1)
        hidden = self.block_hidden(self.block_input(last, q), positions, ctx_kv, mask)
        return self.logits(hidden[:, 1: 1 + (slots or q - 1)])


class ContextCache:
    """The context keys/values of every drafter layer (one :class:`DraftKVCache` each, same slots): exactly the
    committed prefix's. ``append`` takes :meth:`DFlashHead.context_kv`'s list and a ``valid [B, T]`` mask for
    holes (ragged rounds); ``lengths`` and ``valid`` are layer 0's (every layer shares them)."""

    def __init__(self, layers: list[DraftKVCache]):
        self.layers = layers

    @classmethod
    def for_head(cls, head: DFlashHead, batch_size: int, capacity: int = 256) -> ContextCache:
        cfg = head.config
        return cls([DraftKVCache(batch_size, cfg.num_key_value_heads, cfg.head_dim, capacity=capacity,
                                 dtype=head.dtype, device=head.fc.weight.device) for _ in range(cfg.num_hidden_layers)])

    def append(self, kv: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor | None = None) -> None:
        for cache, (k, v) in zip(self.layers, kv):
            cache.append(k, v, valid)

    @property
    def lengths(self) -> torch.Tensor:
        return self.layers[0].lengths
