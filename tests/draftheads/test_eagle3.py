"""Eagle3Head: RoPE and layer parity with transformers, incremental == full, rollout attention, vocab maps.

All comparisons run in float32; 1e-5 absolute tolerance covers reassociation in matmuls of width <= 64
(values are O(1)), anything structurally wrong differs by O(0.1).
"""

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv

from eaglehead.draftheads import (DraftKVCache, Eagle1Head, Eagle3Head, apply_rope, attend, build_draft_vocab,
                                  causal_mask, rope_cos_sin, rope_inv_freq)

from .common import VOCAB, tiny_config, tiny_head

ATOL = 1e-5
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


@pytest.mark.parametrize("theta,scaling", [(10000.0, None), (500000.0, LLAMA3),
                                           (10000.0, {"rope_type": "linear", "factor": 4.0})])
def test_rope_matches_transformers(theta, scaling):
    head_dim, heads = 16, 4
    hf_cfg = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, head_dim=head_dim,
                         rope_theta=theta, rope_scaling=dict(scaling) if scaling else None,
                         max_position_embeddings=131072)  # transformers edits the dict it is given
    positions = torch.tensor([[0, 1, 2, 7, 100, 5000], [3, 3, 40, 9000, 20000, 131071]])
    x = torch.randn(2, heads, 6, head_dim)
    cos_ref, sin_ref = LlamaRotaryEmbedding(hf_cfg)(x, positions)
    cos, sin = rope_cos_sin(positions, rope_inv_freq(head_dim, theta, scaling), torch.float32)
    torch.testing.assert_close(cos, cos_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, sin_ref, atol=1e-6, rtol=0)
    k = torch.randn(2, 2, 6, head_dim)
    q_ref, k_ref = apply_rotary_pos_emb(x, k, cos_ref, sin_ref)
    torch.testing.assert_close(apply_rope(x, cos, sin), q_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(apply_rope(k, cos, sin), k_ref, atol=1e-6, rtol=0)


def reference_layer(head: Eagle3Head, emb, h, positions):
    """The EAGLE-3 layer written out with transformers' Llama pieces and eager causal attention."""
    cfg, layer = head.config, head.midlayer

    def rms(norm, x):
        ref = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        ref.weight.data.copy_(norm.weight)
        return ref(x)

    b, t, _ = h.shape
    residual = rms(layer.hidden_norm, h) if cfg.norm_before_residual else h
    x = torch.cat((rms(layer.input_layernorm, emb), rms(layer.hidden_norm, h)), dim=-1)
    att = layer.self_attn
    q = (x @ att.q_proj.weight.T).view(b, t, -1, cfg.head_dim).transpose(1, 2)
    k = (x @ att.k_proj.weight.T).view(b, t, -1, cfg.head_dim).transpose(1, 2)
    v = (x @ att.v_proj.weight.T).view(b, t, -1, cfg.head_dim).transpose(1, 2)
    rot = LlamaRotaryEmbedding(LlamaConfig(hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
                                           head_dim=cfg.head_dim, rope_theta=cfg.rope_theta,
                                           rope_scaling=dict(cfg.rope_scaling) if cfg.rope_scaling else None))
    cos, sin = rot(x, positions)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    groups = cfg.num_attention_heads // cfg.num_key_value_heads
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    scores = q @ k.transpose(-1, -2) / math.sqrt(cfg.head_dim)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1) @ att.o_proj.weight.T
    h1 = residual + out
    mlp = layer.mlp
    y = rms(layer.post_attention_layernorm, h1)
    y = (torch.nn.functional.silu(y @ mlp.gate_proj.weight.T) * (y @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T
    return h1 + y


@pytest.mark.parametrize("overrides", [{}, {"norm_before_residual": True},
                                       {"head_dim": 16, "rope_theta": 500000.0, "rope_scaling": LLAMA3}])
def test_forward_matches_reference_layer(overrides):
    head = tiny_head(**overrides)
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    feats = torch.randn(2, 9, head.config.fused_width, generator=torch.Generator().manual_seed(2))
    out = head(ids, feats)
    assert out.shape == (2, 8, 32)
    emb, h = head.embed(ids[:, 1:]), head.project(feats[:, :8])
    ref = reference_layer(head, emb, h, torch.arange(8).expand(2, 8))
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)


def test_forward_alignment_convention():
    """Row r pairs feature r with token r+1: x_0 never matters, x_{T-1} only affects the last row."""
    head = tiny_head()
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (1, 7), generator=gen)
    feats = torch.randn(1, 7, head.config.fused_width, generator=gen)
    out = head(ids, feats)
    torch.testing.assert_close(head(ids, feats[:, :6]), out, atol=0, rtol=0)  # the last feature is unused
    changed_first = ids.clone()
    changed_first[0, 0] = (ids[0, 0] + 1) % VOCAB
    torch.testing.assert_close(head(changed_first, feats), out, atol=0, rtol=0)
    changed_last = ids.clone()
    changed_last[0, -1] = (ids[0, -1] + 1) % VOCAB
    moved = head(changed_last, feats)
    torch.testing.assert_close(moved[:, :-1], out[:, :-1], atol=0, rtol=0)
    assert (moved[:, -1] - out[:, -1]).abs().max() > 1e-3
    by_embeds = head(inputs_embeds=head.embed(ids), hidden=head.project(feats))
    torch.testing.assert_close(by_embeds, out, atol=0, rtol=0)


def test_incremental_equals_full_forward():
    head = tiny_head()
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, VOCAB, (2, 13), generator=gen)
    feats = torch.randn(2, 12, head.config.fused_width, generator=gen)
    full = head(ids, feats)  # [2, 12, H]
    emb, h = head.embed(ids[:, 1:]), head.project(feats)
    pos = torch.arange(12).expand(2, 12)
    cache = DraftKVCache.for_head(head, batch_size=2, capacity=3)  # forces growth
    pieces, start = [], 0
    for size in (5, 1, 2, 4):
        sl = slice(start, start + size)
        pieces.append(head.step(emb[:, sl], h[:, sl], pos[:, sl], cache))
        start += size
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=ATOL, rtol=0)
    assert cache.lengths.tolist() == [12, 12] and cache.capacity >= 12


def test_crop_rolls_back_each_row_separately():
    """Row 0 keeps 2 of 3 speculative rows, row 1 keeps 1; continuing must match each row's full forward."""
    head = tiny_head()
    gen = torch.Generator().manual_seed(5)
    emb = torch.randn(2, 10, 32, generator=gen)
    h = torch.randn(2, 10, 32, generator=gen)
    pos = torch.arange(10).expand(2, 10)
    full = head.layer_forward(emb, h, pos)
    cache = DraftKVCache.for_head(head, batch_size=2)
    head.layer_forward(emb[:, :6], h[:, :6], pos[:, :6], cache=cache)
    junk = torch.randn(2, 3, 32, generator=gen)
    spec_emb = torch.stack([torch.cat([emb[0, 6:8], junk[0, :1]]), torch.cat([emb[1, 6:7], junk[1, :2]])])
    spec_h = torch.stack([torch.cat([h[0, 6:8], junk[0, :1]]), torch.cat([h[1, 6:7], junk[1, :2]])])
    spec = head.layer_forward(spec_emb, spec_h, pos[:, 6:9], cache=cache)
    torch.testing.assert_close(spec[0, :2], full[0, 6:8], atol=ATOL, rtol=0)
    cache.crop_to(torch.tensor([8, 7]))
    rows = [torch.tensor([8, 9]), torch.tensor([7, 8])]  # rows now continue at different positions
    nxt = head.layer_forward(torch.stack([emb[0, rows[0]], emb[1, rows[1]]]),
                             torch.stack([h[0, rows[0]], h[1, rows[1]]]),
                             torch.stack(rows), cache=cache)
    torch.testing.assert_close(nxt[0], full[0, 8:10], atol=ATOL, rtol=0)
    torch.testing.assert_close(nxt[1], full[1, 7:9], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="lengths"):
        cache.crop_to(torch.tensor([11, 0]))
    cache.select_rows(torch.tensor([1]))  # drop row 0; row 1 continues alone
    last = head.step(emb[1:, 9:], h[1:, 9:], pos[1:, 9:], cache)
    torch.testing.assert_close(last[0], full[1, 9:], atol=ATOL, rtol=0)


def test_left_padding_matches_unpadded_rows():
    head = tiny_head()
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(0, VOCAB, (2, 8), generator=gen)
    feats = torch.randn(2, 8, head.config.fused_width, generator=gen)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0  # row 1 is left-padded by 3
    out = head(ids, feats, attention_mask=mask)
    torch.testing.assert_close(out[0], head(ids[:1], feats[:1])[0], atol=ATOL, rtol=0)
    alone = head(ids[1:, 3:], feats[1:, 3:])[0]  # rows of the real tokens only
    torch.testing.assert_close(out[1, 3:], alone, atol=ATOL, rtol=0)
    assert torch.isfinite(out).all()
    # The same padded batch drafted incrementally (prefill 4 rows, then 3 single steps).
    cache = DraftKVCache.for_head(head, batch_size=2)
    emb, h, valid = head.embed(ids[:, 1:]), head.project(feats[:, :7]), mask[:, :7].bool()
    pos = (valid.long().cumsum(-1) - 1).clamp(min=0)
    steps = [head.step(emb[:, a:b], h[:, a:b], pos[:, a:b], cache, valid[:, a:b])
             for a, b in ((0, 4), (4, 5), (5, 6), (6, 7))]
    torch.testing.assert_close(torch.cat(steps, 1)[valid], out[valid], atol=ATOL, rtol=0)


def test_attend_with_diagonal_equals_dense_mask():
    """The rollout primitive equals attention over keys laid out as [step-0 block | step-1 | ... ] densely."""
    gen = torch.Generator().manual_seed(7)
    b, heads, kv_heads, t, d, steps = 2, 4, 2, 6, 8, 3
    q = torch.randn(b, heads, t, d, generator=gen)
    k0, v0 = torch.randn(2, b, kv_heads, t, d, generator=gen)
    dk, dv = torch.randn(2, b, kv_heads, steps, t, d, generator=gen)
    valid = torch.ones(b, t, dtype=torch.bool)
    valid[1, :2] = False
    mask0 = causal_mask(valid, t)
    out = attend(q, k0, v0, mask0, dk, dv)
    keys = torch.cat([k0] + [dk[:, :, s] for s in range(steps)], dim=2)  # [B, kvH, t * (1 + steps), d]
    values = torch.cat([v0] + [dv[:, :, s] for s in range(steps)], dim=2)
    eye = torch.eye(t, dtype=torch.bool).expand(b, 1, t, t)
    dense = torch.cat([mask0.expand(b, 1, t, t)] + [eye] * steps, dim=-1)
    ref = attend(q, keys, values, dense)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    torch.testing.assert_close(attend(q, k0, v0, mask0, dk[:, :, :0], dv[:, :, :0]), attend(q, k0, v0, mask0),
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_query_half_precision_attention_equals_float32_sdpa(dtype):
    """A draft step's single query in half precision takes the grouped-matmul path (no SDPA, no kv copy): it
    equals float32 SDPA over the expanded kv heads to half-precision rounding, with masked keys (padding, the
    cache's dense [1, 1, 1, T] mask and none at all)."""
    gen = torch.Generator().manual_seed(3)
    b, heads, kv_heads, tk, d = 2, 9, 3, 37, 64
    q = torch.randn(b, heads, 1, d, generator=gen)
    k, v = torch.randn(2, b, kv_heads, tk, d, generator=gen)
    keep = torch.rand(b, 1, 1, tk, generator=gen) < 0.8
    keep[..., -1] = True  # a query always sees its own key
    expand = lambda x: x[:, :, None].expand(b, kv_heads, heads // kv_heads, tk, d).reshape(b, heads, tk, d)
    for mask in (keep, keep[:1], None):
        ref = torch.nn.functional.scaled_dot_product_attention(q, expand(k), expand(v), attn_mask=mask)
        ref = ref.transpose(1, 2).reshape(b, 1, heads * d)
        got = attend(q.to(dtype), k.to(dtype), v.to(dtype), mask)
        assert got.dtype == dtype and got.shape == ref.shape
        torch.testing.assert_close(got.float(), ref, atol=2e-2, rtol=2e-2)
    # a masked key with a huge value must not leak into the output
    v_big = v.clone()
    v_big[0, :, 0] = 1e4
    mask = torch.ones(b, 1, 1, tk, dtype=torch.bool)
    mask[0, ..., 0] = False
    assert attend(q.to(dtype), k.to(dtype), v_big.to(dtype), mask)[0].abs().max() < 10


def test_vocab_maps():
    head = tiny_head()
    counts = torch.arange(VOCAB) % 7
    d2t, t2d = build_draft_vocab(counts, 40)
    head.set_vocab(d2t, t2d)
    draft = torch.arange(40)
    target = head.draft_to_target(draft)
    assert t2d[target].all() and (target[1:] > target[:-1]).all()
    assert torch.equal(head.target_to_draft(target), draft)
    assert (head.target_to_draft(torch.nonzero(~t2d).flatten()) == -1).all()
    probs = torch.softmax(torch.randn(3, 40), -1)
    full = head.to_target_probs(probs)
    assert full.shape == (3, VOCAB)
    assert (full[:, ~t2d] == 0).all() and torch.equal(full[:, target], probs)
    assert torch.equal(head.restrict_to_draft(full), probs)
    with pytest.raises(ValueError, match="t2d"):
        head.set_vocab(d2t, ~t2d)


def test_embedding_is_shared_not_saved():
    head = tiny_head()
    assert not any("embed" in k for k in head.state_dict())
    assert sum(p.numel() for p in head.parameters()) == sum(
        v.numel() for k, v in head.state_dict().items() if k not in ("d2t", "t2d"))
    with pytest.raises(ValueError, match="embedding"):
        head.bind_embedding(torch.nn.Embedding(VOCAB, 16))
    unbound = Eagle3Head(tiny_config())
    with pytest.raises(ValueError, match="bind_embedding"):
        unbound.embed(torch.tensor([[1]]))


def test_eagle1_head_shapes():
    cfg = tiny_config(fused_layer_ids=[4], draft_vocab_size=VOCAB)
    head = Eagle1Head(cfg)
    assert head.fc.weight.shape == (32, 32)
    assert head.lm_head.weight.shape == (VOCAB, 32)
    assert torch.equal(head.d2t, torch.zeros(VOCAB, dtype=torch.int64)) and head.t2d.all()
    assert head.midlayer.self_attn.q_proj.weight.shape == (32, 64)
    head.bind_embedding(torch.nn.Embedding(VOCAB, 32))
    out = head(torch.randint(0, VOCAB, (1, 5)), torch.randn(1, 5, 32))
    assert head.logits(out).shape == (1, 4, VOCAB)
    with pytest.raises(ValueError, match="fused_layer_ids"):
        Eagle1Head(tiny_config(draft_vocab_size=VOCAB))
    reduced = Eagle1Head(tiny_config(fused_layer_ids=[4]))  # the fusion-only ablation: a draft vocabulary
    assert reduced.fc.weight.shape == (32, 32)
    assert reduced.lm_head.weight.shape[0] == reduced.config.draft_vocab_size < VOCAB
