"""EAGLE-3 draft head: ``fc`` over fused target features, one Llama-style decoder layer, reduced-vocab ``lm_head``.

Alignment convention (the EAGLE one). Let ``x_0..x_n`` be tokens and ``f_t`` the fused target features at
position ``t`` (the target has read ``x_0..x_t``). Draft row ``t`` pairs ``f_t`` with the embedding of the
*next* token ``x_{t+1}``, uses RoPE position ``t``, and its logits predict ``x_{t+2}``. Equivalently: the
embedding of token ``t`` pairs with the feature of position ``t-1``. At a self-fed draft step the layer's
output of row ``t`` (the *carried hidden*) replaces ``f_t`` (already width ``H``, so ``fc`` is skipped), is
paired with the token just drafted, and gets position ``t+1``.

EAGLE 3.1 (``Eagle3Config.fc_norm`` / ``norm_output``, both off by default): ``fc_norm`` normalises each fused
feature (one RMSNorm per fused layer, ``fc_norm.{i}.weight``) before ``fc``; with ``norm_output`` the carried
hidden is the final-normed one, so :meth:`Eagle3Head.logits` does not norm it again. EAGLE-3 carries the
pre-norm one. Every caller goes through ``project``/``finish``/``logits``, so training and drafting agree.

Usage::

    head = Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=32000))
    head.bind_embedding(target.get_input_embeddings())       # shared and frozen; not in state_dict
    with FeatureTaps(target, head.config.fused_layer_ids).capture() as cap:
        target(input_ids)                                     # input_ids [B, T]
    hidden = head(input_ids, cap.fused())                     # [B, T-1, H]: row t = (f_t, x_{t+1})
    logits = head.logits(hidden)                              # [B, T-1, Vd]: row t predicts x_{t+2}

    cache = DraftKVCache.for_head(head, batch_size=B)         # incremental drafting
    h = head.layer_forward(head.embed(next_ids), head.project(feats), positions, cache=cache)
    cache.crop_to(kept_lengths)                               # per-row rollback

Rollout pieces (training-time test, keys linear in depth)::

    q, k0, v0, res = head.qkv(emb, h, pos)                    # step 0
    mask0 = causal_mask(valid, T)
    out = head.finish(attend(q, k0, v0, mask0), res)
    q, k1, v1, res = head.qkv(emb1, out, pos + 1)             # step 1: step-0 keys + own diagonal keys
    out = head.finish(attend(q, k0, v0, mask0, k1[:, :, None], v1[:, :, None]), res)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from eaglehead.builtin.attention import gqa_sdpa, grouped_attention

from .config import Eagle3Config
from .rope import apply_rope, rope_cos_sin, rope_frequencies, rope_inv_freq  # noqa: F401 (re-exported)
from .vocab import check_vocab_mapping


def positions_from_mask(valid: torch.Tensor) -> torch.Tensor:
    """Positions ``[B, T]`` counting only valid entries (left padding gets position 0)."""
    return (valid.long().cumsum(-1) - 1).clamp(min=0)


def causal_mask(valid: torch.Tensor | None, length: int, device=None) -> torch.Tensor:
    """Boolean ``[B|1, 1, T, T]`` mask, true = may attend: causal, keys limited to ``valid [B, T]``.

    Every query may attend its own key, so a padded query never has an empty row (no NaN).
    """
    device = valid.device if valid is not None else device
    idx = torch.arange(length, device=device)
    eye = idx[:, None] == idx[None, :]
    mask = idx[None, :] <= idx[:, None]  # [T, T]
    if valid is None:
        return mask[None, None]
    return ((mask[None] & valid.bool()[:, None, :]) | eye[None])[:, None]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
           diag_k: torch.Tensor | None = None, diag_v: torch.Tensor | None = None) -> torch.Tensor:
    """Attention output ``[B, Tq, heads * d]`` (before ``o_proj``).

    ``q [B, heads, Tq, d]``; ``k, v [B, kv_heads, Tk, d]`` (grouped-query: query head ``j`` reads kv head
    ``j // (heads // kv_heads)``); ``mask`` bool, broadcastable to ``[B, 1, Tq, Tk]``, true = attend
    (``None``: every key, only without ``diag_k``).
    ``diag_k, diag_v [B, kv_heads, S, Tq, d]`` are S extra keys per query position: query ``t`` also attends
    ``diag_k[:, :, s, t]`` for every ``s`` (the rollout's own keys from steps ``1..i``), sharing one softmax
    with the block keys. Scores cost ``Tq * (Tk + S)``, linear in depth.
    """
    b, heads, tq, d = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads
    if diag_k is None and tq == 1 and q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        # One query (each self-fed draft step) in half precision on a CPU: SDPA's kernel costs ~2.3x grouped
        # matmuls here (BENCHMARKS.md, "The draft step's attention"), and the kv heads are not copied.
        return grouped_attention(q, k, v, mask).reshape(b, 1, heads * d)
    if diag_k is None:
        if groups > 1 and q.device.type == "cpu":  # the CPU kernels read kv head j // groups in place: no copy
            return gqa_sdpa(q, k, v, mask).reshape(b, tq, heads * d)
        if groups > 1:  # elsewhere enable_gqa with a mask leaves the fused kernels: repeat the kv heads
            k = k[:, :, None].expand(b, kv_heads, groups, *k.shape[2:]).reshape(b, heads, *k.shape[2:])
            v = v[:, :, None].expand(b, kv_heads, groups, *v.shape[2:]).reshape(b, heads, *v.shape[2:])
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, tq, heads * d)
    scale = 1.0 / math.sqrt(d)
    qg = q.view(b, kv_heads, groups, tq, d)
    block = torch.einsum("bhgqd,bhkd->bhgqk", qg, k) * scale  # [B, kvH, g, Tq, Tk]
    block = block.masked_fill(~mask[:, :, None], float("-inf"))
    diag = torch.einsum("bhgqd,bhsqd->bhgqs", qg, diag_k) * scale  # [B, kvH, g, Tq, S]
    probs = torch.softmax(torch.cat((block, diag), dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
    tk = k.shape[2]
    out = torch.einsum("bhgqk,bhkd->bhgqd", probs[..., :tk], v)
    out = out + torch.einsum("bhgqs,bhsqd->bhgqd", probs[..., tk:], diag_v)
    return out.reshape(b, heads, tq, d).transpose(1, 2).reshape(b, tq, heads * d)


class DraftKVCache:
    """The draft layer's keys/values for incremental drafting, with a length per batch row.

    ``k, v [B, kv_heads, capacity, d]`` hold post-RoPE keys and values; slot ``j`` of row ``b`` is the
    ``j``-th position appended to that row. ``valid [B, capacity]`` marks slots that may be attended and
    ``lengths [B]`` counts the slots in use. Capacity grows (doubling) as needed.
    """

    def __init__(self, batch_size: int, num_kv_heads: int, head_dim: int, *, capacity: int = 256,
                 dtype: torch.dtype = torch.float32, device=None):
        if batch_size < 1 or capacity < 1:
            raise ValueError(f"batch_size and capacity must be >= 1, got {batch_size}, {capacity}")
        self.k = torch.zeros(batch_size, num_kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.valid = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self._span = 0  # == int(lengths.max()), tracked on the host to avoid a sync per step
        # Host-side flag: every row has length _span and no invalid slot. Appends then write one slice
        # and a single new row needs no mask at all (the common batch-1 drafting step).
        self._dense = True

    @classmethod
    def for_head(cls, head: Eagle3Head, batch_size: int, capacity: int = 256) -> DraftKVCache:
        cfg = head.config
        return cls(batch_size, cfg.num_key_value_heads, cfg.head_dim, capacity=capacity,
                   dtype=head.dtype, device=head.fc.weight.device)

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None = None):
        """Write ``k, v [B, kv_heads, T, d]`` after each row's current length.

        Returns ``(keys, values, mask)``: the cache up to the longest row and the ``[B, 1, T, span]`` mask
        under which new query ``t`` of row ``b`` sees valid slots ``<= lengths[b] + t`` (always its own).
        ``valid [B, T]`` marks which new rows later queries may attend (``None``: all). While every row
        is dense (same length, no invalid slot) and ``valid`` is ``None``, the mask is ``[1, 1, T, span]``
        causal, or ``None`` for a single new row (every key visible).
        """
        b, _, t, _ = k.shape
        if b != self.k.shape[0]:
            raise ValueError(f"append: batch size {b} differs from the cache's {self.k.shape[0]}")
        span = self._span + t
        if span > self.capacity:
            self._grow(max(span, 2 * self.capacity))
        if self._dense and valid is None:  # every row is [0, _span) valid: slice writes, a shared mask
            start = self._span
            self.k[:, :, start:span] = k
            self.v[:, :, start:span] = v
            self.valid[:, start:span] = True
            self.lengths = self.lengths + t
            self._span = span
            mask = None
            if t > 1:
                j = torch.arange(span, device=k.device)
                mask = (j <= start + torch.arange(t, device=k.device)[:, None])[None, None]
            return self.k[:, :, :span], self.v[:, :, :span], mask
        self._dense = False
        slots = self.lengths[:, None] + torch.arange(t, device=k.device)  # [B, T]
        index = slots[:, None, :, None].expand(k.shape)
        self.k.scatter_(2, index, k.to(self.k.dtype))
        self.v.scatter_(2, index, v.to(self.v.dtype))
        new_valid = torch.ones_like(slots, dtype=torch.bool) if valid is None else valid.bool()
        self.valid.scatter_(1, slots, new_valid)
        self.lengths = self.lengths + t
        self._span = span
        j = torch.arange(span, device=k.device)
        mask = ((j <= slots[..., None]) & self.valid[:, None, :span]) | (j == slots[..., None])
        return self.k[:, :, :span], self.v[:, :, :span], mask[:, None]

    def contents(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(k, v, valid)`` up to the longest row; ``valid [B, span]`` is None while every slot is valid."""
        span = self._span
        return self.k[:, :, :span], self.v[:, :, :span], None if self._dense else self.valid[:, :span]

    def crop_to(self, lengths: torch.Tensor) -> None:
        """Keep the first ``lengths[b]`` slots of each row (a rollback; one host sync)."""
        lengths = torch.as_tensor(lengths, device=self.lengths.device)
        if lengths.shape != self.lengths.shape or lengths.dtype.is_floating_point:
            raise ValueError(f"crop_to: lengths must be integer [{self.lengths.shape[0]}], "
                             f"got {lengths.dtype} {list(lengths.shape)}")
        bad, longest, shortest = torch.stack(
            [((lengths < 0) | (lengths > self.lengths)).any().long(), lengths.max(), lengths.min()]).tolist()
        if bad:
            raise ValueError(f"crop_to: lengths {lengths.tolist()} must lie in 0..current {self.lengths.tolist()}")
        self.lengths = lengths.to(torch.int64).clone()
        self.valid &= torch.arange(self.capacity, device=self.valid.device) < self.lengths[:, None]
        self._span = longest
        self._dense = self._dense and longest == shortest

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` (e.g. drop finished sequences)."""
        self.k, self.v = self.k[rows], self.v[rows]
        self.valid, self.lengths = self.valid[rows], self.lengths[rows]
        self._span = int(self.lengths.max()) if self.lengths.numel() else 0
        # A dense cache stays dense; otherwise the kept rows may have become so (checked once here).
        self._dense = self._dense or bool(self.lengths.numel() and (self.valid[:, :self._span].all()))

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        self.k = torch.cat((self.k, self.k.new_zeros(*self.k.shape[:2], extra, self.k.shape[3])), dim=2)
        self.v = torch.cat((self.v, self.v.new_zeros(*self.v.shape[:2], extra, self.v.shape[3])), dim=2)
        self.valid = torch.cat((self.valid, self.valid.new_zeros(self.valid.shape[0], extra)), dim=1)


class RMSNorm(nn.Module):
    """Llama RMSNorm (statistics in float32, weight applied in the input dtype)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # one kernel, same formula
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Eagle3Attention(nn.Module):
    """Projections only: q/k/v read ``cat(emb, hidden)`` of width 2H; the attention itself is :func:`attend`."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(2 * h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(2 * h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(2 * h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)


class Eagle3DecoderLayer(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def qkv(self, emb, h, cos, sin):
        b, t, _ = h.shape
        normed = self.hidden_norm(h)
        residual = normed if self.cfg.norm_before_residual else h
        x = torch.cat((self.input_layernorm(emb), normed), dim=-1)  # [B, T, 2H], embedding first
        d = self.cfg.head_dim
        q = self.self_attn.q_proj(x).view(b, t, -1, d).transpose(1, 2)  # [B, heads, T, d]
        k = self.self_attn.k_proj(x).view(b, t, -1, d).transpose(1, 2)  # [B, kv_heads, T, d]
        v = self.self_attn.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, residual

    def finish(self, attn, residual):
        h = residual + self.self_attn.o_proj(attn)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """The EAGLE-3 draft head. Parameter names are the EAGLE-3 export keys (see module docstring)."""

    head_type = "eagle3"

    def __init__(self, config: Eagle3Config):
        super().__init__()
        self.config = config
        # EAGLE 3.1: one RMSNorm per fused target layer, applied before fc. Absent (not a zero-size module) when
        # off, so an EAGLE-3 head's state_dict keeps exactly the EAGLE-3 keys.
        self.fc_norm = nn.ModuleList(RMSNorm(config.target_hidden_size, config.rms_norm_eps)
                                     for _ in config.fused_layer_ids) if config.fc_norm else None
        self.fc = nn.Linear(config.fused_width, config.hidden_size, bias=False)
        self.midlayer = Eagle3DecoderLayer(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        # Default mapping: the first draft_vocab_size target ids (all zeros d2t); set_vocab replaces it.
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.int64))
        t2d = torch.zeros(config.target_vocab_size, dtype=torch.bool)
        t2d[: config.draft_vocab_size] = True
        self.register_buffer("t2d", t2d)
        self.__dict__["_embedding"] = None  # plain attribute: never a submodule, never in state_dict
        self._rope_tables: dict = {}  # (device, dtype) -> (inv_freq, scaling, cos [P, d], sin [P, d]); derived, not state

    @classmethod
    def config_from_target(cls, hf_config, **overrides) -> Eagle3Config:
        return Eagle3Config.from_target_config(hf_config, **overrides)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    # ---- embedding (the target's, shared) ----
    def bind_embedding(self, embedding: nn.Embedding) -> None:
        cfg = self.config
        if embedding.embedding_dim != cfg.hidden_size or embedding.num_embeddings < cfg.target_vocab_size:
            raise ValueError(
                f"embedding: expected [>= {self.config.target_vocab_size}, {self.config.hidden_size}], "
                f"got [{embedding.num_embeddings}, {embedding.embedding_dim}]"
            )
        self.__dict__["_embedding"] = embedding

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self._embedding is None:
            raise ValueError("embed: no embedding bound; call bind_embedding(target.get_input_embeddings()) "
                             "or pass embeddings")
        # The table's rows, never the module's forward: vLLM and SGLang share the target's embedding *weight*
        # with the draft model and look it up plainly, so a scaled embedding (Gemma's ``embed * sqrt(H)``,
        # applied in its module's forward) must not reach the head here either, in training or drafting.
        with torch.no_grad():
            return F.embedding(input_ids, self._embedding.weight).to(self.dtype)

    # ---- pieces ----
    def project(self, fused_features: torch.Tensor) -> torch.Tensor:
        """``fc`` (after ``fc_norm`` when on): fused target features ``[B, T, len(ids) * H_t]`` -> ``[B, T, H]``."""
        if fused_features.shape[-1] != self.config.fused_width:
            raise ValueError(f"fused_features: last dim must be {self.config.fused_width}, "
                             f"got {fused_features.shape[-1]}")
        x = fused_features.to(self.dtype)
        if self.fc_norm is not None:  # the features are concatenated low..high, H_t wide each
            parts = x.split(self.config.target_hidden_size, dim=-1)
            x = torch.cat([norm(part) for norm, part in zip(self.fc_norm, parts)], dim=-1)
        return self.fc(x)

    def rope(self, positions: torch.Tensor, position_bound: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin [B, T, head_dim]`` at ``positions``. With ``position_bound`` (every position is below
        it) they are looked up in a cached table instead of recomputed: the drafting step's fast path."""
        key = (positions.device, self.dtype)
        entry = self._rope_tables.get(key)
        if entry is None:
            cfg = self.config
            inv, scaling = rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling,
                                            max_position_embeddings=cfg.max_position_embeddings,
                                            device=positions.device)
            entry = (inv, scaling, None, None)
            self._rope_tables[key] = entry
        inv, scaling, cos, sin = entry
        if position_bound is None:
            return rope_cos_sin(positions, inv, self.dtype, scaling)
        if cos is None or cos.shape[0] < position_bound:
            size = max(256, 1 << (position_bound - 1).bit_length())
            cos, sin = rope_cos_sin(torch.arange(size, device=positions.device)[None], inv, self.dtype, scaling)
            cos, sin = cos[0], sin[0]
            self._rope_tables[key] = (inv, scaling, cos, sin)
        return cos[positions], sin[positions]

    def qkv(self, emb: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, position_bound: int | None = None):
        """``(q [B, heads, T, d], k, v [B, kv_heads, T, d], residual [B, T, H])``, RoPE applied at ``positions``."""
        cos, sin = self.rope(positions, position_bound)
        return self.midlayer.qkv(emb, h, cos, sin)

    def finish(self, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``o_proj``, residual, MLP: attention output ``[B, T, heads * d]`` -> carried hidden ``[B, T, H]``
        (pre-norm; final-normed with ``norm_output``)."""
        out = self.midlayer.finish(attn, residual)
        return self.norm(out) if self.config.norm_output else out

    def layer_forward(self, emb: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, *,
                      attention_mask: torch.Tensor | None = None, cache: DraftKVCache | None = None) -> torch.Tensor:
        """The decoder layer: ``emb, h [B, T, H]``, ``positions [B, T]`` -> carried hidden ``[B, T, H]`` (``finish``).

        Without ``cache``: causal over the T rows, ``attention_mask [B, T]`` marks valid keys. With ``cache``:
        the rows are appended after each row's cached length and attend to the cache; ``attention_mask``
        then marks which new rows are valid keys for later steps, and every position must be below the
        row's slot count after the append (true when positions count the row's real entries).
        """
        if cache is None:
            q, k, v, residual = self.qkv(emb, h, positions)
            mask = causal_mask(attention_mask, h.shape[1], h.device)
            return self.finish(attend(q, k, v, mask), residual)
        # A row's position never exceeds its slot in the cache (positions count real rows, slots all rows),
        # so the cached RoPE table covers every position below the cache's new span.
        q, k, v, residual = self.qkv(emb, h, positions, position_bound=cache._span + h.shape[1])
        keys, values, mask = cache.append(k, v, attention_mask)
        return self.finish(attend(q, keys, values, mask), residual)

    def step(self, emb: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, cache: DraftKVCache,
             valid: torch.Tensor | None = None) -> torch.Tensor:
        """One incremental drafting call: ``layer_forward(..., attention_mask=valid, cache=cache)``."""
        return self.layer_forward(emb, h, positions, attention_mask=valid, cache=cache)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + ``lm_head``: carried hidden ``[..., H]`` -> draft-vocab logits ``[..., Vd]``. With
        ``norm_output`` the carried hidden is already final-normed (a second RMSNorm would rescale it)."""
        return self.lm_head(hidden if self.config.norm_output else self.norm(hidden))

    def forward(self, input_ids: torch.Tensor | None = None, fused_features: torch.Tensor | None = None, *,
                inputs_embeds: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced step 0 over a whole sequence; returns the carried hidden ``[B, R, H]``, ``R = T - 1``.

        ``input_ids [B, T]`` (or ``inputs_embeds [B, T, H]``) are tokens ``x_0..x_{T-1}``; ``fused_features``
        (or already-projected ``hidden``) has ``R`` or ``T`` positions (a last feature without a following
        token is ignored). Row ``r`` pairs feature ``r`` with the embedding of ``x_{r+1}``, RoPE position
        ``positions[:, r]`` (default ``r``, or counted over ``attention_mask`` when given) and predicts
        ``x_{r+2}``. ``attention_mask [B, T]`` is the token mask; row ``r`` is a valid key iff token ``r`` is.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("forward: pass exactly one of input_ids and inputs_embeds")
        if (fused_features is None) == (hidden is None):
            raise ValueError("forward: pass exactly one of fused_features and hidden")
        emb = self.embed(input_ids) if inputs_embeds is None else inputs_embeds.to(self.dtype)
        batch, rows = emb.shape[0], emb.shape[1] - 1
        if rows < 1:
            raise ValueError(f"forward: need at least 2 tokens, got {emb.shape[1]}")
        feats = fused_features if hidden is None else hidden
        if feats.shape[:1] != (batch,) or feats.shape[1] not in (rows, rows + 1):
            raise ValueError(f"forward: features must be [{batch}, {rows} or {rows + 1}, ...], got {list(feats.shape)}")
        h = self.project(feats[:, :rows]) if hidden is None else hidden[:, :rows].to(self.dtype)
        valid = None
        if attention_mask is not None:
            if attention_mask.shape != (batch, rows + 1):
                raise ValueError(f"forward: attention_mask must be [{batch}, {rows + 1}], "
                                 f"got {list(attention_mask.shape)}")
            valid = attention_mask[:, :rows].bool()
        if positions is None:
            positions = (positions_from_mask(valid) if valid is not None
                         else torch.arange(rows, device=emb.device).expand(batch, rows))
        elif positions.shape != (batch, rows):
            raise ValueError(f"forward: positions must be [{batch}, {rows}], got {list(positions.shape)}")
        return self.layer_forward(emb[:, 1:], h, positions, attention_mask=valid)

    # ---- vocabulary maps ----
    def set_vocab(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        check_vocab_mapping(d2t, t2d, self.config.draft_vocab_size, self.config.target_vocab_size)
        with torch.no_grad():
            self.d2t.copy_(d2t)
            self.t2d.copy_(t2d)

    @property
    def target_ids(self) -> torch.Tensor:
        """Target id of every draft id: ``arange(Vd) + d2t`` (int64 ``[Vd]``)."""
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def target_to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Draft id of each target id, ``-1`` where the token is outside the draft vocabulary."""
        rank = torch.cumsum(self.t2d, 0) - 1
        return torch.where(self.t2d[target_ids], rank[target_ids], torch.full_like(target_ids, -1))

    def to_target_probs(self, draft_probs: torch.Tensor) -> torch.Tensor:
        """Scatter ``[..., Vd]`` probabilities into ``[..., V_target]`` (zero outside the draft vocab)."""
        out = draft_probs.new_zeros(*draft_probs.shape[:-1], self.config.target_vocab_size)
        return out.index_copy_(draft_probs.dim() - 1, self.target_ids, draft_probs)

    def restrict_to_draft(self, target_values: torch.Tensor) -> torch.Tensor:
        """Gather the draft-vocab columns of ``[..., V_target]`` values (e.g. target logits) -> ``[..., Vd]``."""
        return target_values.index_select(-1, self.target_ids)
