"""builtin.attention: the target's attention on a CPU (grouped matmuls in half precision, SDPA without kv copies).

- The grouped path equals a float64 reference of masked attention (bool and additive masks, a mask per head
  or shared, 1 to 64 queries, grouped-query 1:1 and 3:1) within bfloat16 tolerance: atol 4e-2 on outputs up to
  ~3 (scores up to ~5 rounded to bf16 move a weight by up to 2^-9 x 5 = 1 %, the values' and the output's own
  roundings add 2^-9 of |v| and |out|), and float16 (8x finer) within 6e-3;
  and it equals transformers' own ``eager`` attention on the same bfloat16 inputs to 1e-2 (same numerics,
  no repeated kv heads). A fully masked row is finite (uniform weights, as ``eager``), not NaN.
- The enable_gqa path equals transformers' ``sdpa`` (which copies the kv heads with ``repeat_kv``) to the bit:
  float32, float64, and bfloat16 past 64 queries; bool, additive and per-head masks; 2 to 128 queries.
- Dispatch: half precision up to 64 masked queries (or one unmasked) takes the grouped path; a masked call of
  several queries on a grouped-query layer otherwise takes SDPA with enable_gqa (float32, more than 64 queries,
  dropout); one float32 query, no mask, a 1:1 layer, softcap and sinks go to transformers' SDPA with the call's
  arguments. Each call reaches exactly one path.
- A bfloat16 target loaded through ``load_causal_lm`` runs it and its logits equal the ``sdpa`` model's (atol
  bf16); a float32 target runs it too (the enable_gqa path, its logits equal to the ``sdpa`` model's to the
  bit); a model that is moved to float32 after the switch leaves the grouped path per call.

The families (mask dicts, sliding windows, ragged caches, trees) are covered in tests/decode/test_families.py
with the grouped path forced in float32.
"""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from eaglehead.builtin import attention
from eaglehead.builtin.attention import NAME, few_query_attention, gqa_sdpa, grouped_attention, use_few_query_attention


def _inputs(b, heads, kv, tq, tk, d=16, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, heads, tq, d, generator=g, dtype=torch.float64)
    k, v = (torch.randn(b, kv, tk, d, generator=g, dtype=torch.float64) for _ in range(2))
    allowed = torch.rand(b, 1, tq, tk, generator=g) < 0.7
    allowed[..., -1] = True  # every row sees one key
    return q, k, v, allowed


def _reference(q, k, v, allowed, scale):
    """float64 masked attention in the [B, Tq, heads, d] layout of transformers' attention functions."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


@pytest.mark.parametrize("heads,kv", [(4, 4), (9, 3)])
@pytest.mark.parametrize("tq", [1, 4, 64])
@pytest.mark.parametrize("kind", ["bool", "additive", "per-head"])
def test_grouped_path_equals_a_float64_reference(heads, kv, tq, kind):
    q, k, v, allowed = _inputs(2, heads, kv, tq, 37)
    scale = 0.3
    want = _reference(q, k, v, allowed, scale)
    if kind == "per-head":
        allowed = allowed.expand(-1, heads, -1, -1)
    for dtype, atol in ((torch.bfloat16, 4e-2), (torch.float16, 6e-3)):
        mask = allowed if kind != "additive" else torch.zeros(allowed.shape, dtype=dtype).masked_fill(
            ~allowed, torch.finfo(dtype).min)
        got = grouped_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask, scale)
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=atol, rtol=0)


def test_grouped_path_equals_transformers_eager_in_bfloat16():
    from transformers.integrations.sdpa_attention import repeat_kv

    q, k, v, allowed = _inputs(2, 9, 3, 4, 50)
    q, k, v = (t.bfloat16() for t in (q, k, v))
    additive = torch.zeros(allowed.shape, dtype=torch.bfloat16).masked_fill(~allowed, torch.finfo(torch.bfloat16).min)
    # transformers' eager_attention_forward, step by step (its module argument only supplies these numbers)
    s = torch.matmul(q, repeat_kv(k, 3).transpose(2, 3)) * 0.25 + additive
    w = torch.softmax(s, dim=-1, dtype=torch.float32).to(torch.bfloat16)
    eager = torch.matmul(w, repeat_kv(v, 3)).transpose(1, 2)
    torch.testing.assert_close(grouped_attention(q, k, v, additive, 0.25).float(), eager.float(), atol=1e-2, rtol=0)


def test_a_fully_masked_row_is_finite():
    q, k, v, _ = _inputs(1, 4, 2, 2, 5)
    allowed = torch.ones(1, 1, 2, 5, dtype=torch.bool)
    allowed[0, 0, 1] = False
    out = grouped_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), allowed)
    assert torch.isfinite(out.float()).all()
    uniform = v.mean(2)[0].repeat_interleave(2, 0)  # [heads, d]: every key weighted alike
    torch.testing.assert_close(out[0, 1].double(), uniform, atol=2e-2, rtol=0)


class _Module(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


class _Module3(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("tq", [2, 4, 128])
@pytest.mark.parametrize("kind", ["bool", "additive", "per-head"])
def test_gqa_path_equals_transformers_sdpa_to_the_bit(dtype, tq, kind):
    if dtype == torch.bfloat16 and tq <= attention.MAX_QUERIES:
        tq += attention.MAX_QUERIES  # fewer bfloat16 queries take the grouped path
    q, k, v, allowed = _inputs(3, 9, 3, tq, tq + 90, d=32, dtype=dtype)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    mask = allowed.expand(-1, 9, -1, -1) if kind == "per-head" else allowed
    if kind == "additive":
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    assert attention.takes_gqa_sdpa(_Module3(), q, k, mask)
    got, _ = few_query_attention(_Module3(), q, k, v, mask, scaling=0.2)
    want, _ = sdpa_attention_forward(_Module3(), q, k, v, mask, scaling=0.2)  # repeat_kv, then the same kernel
    assert got.shape == want.shape == (3, tq, 9, 32) and got.dtype == dtype
    assert torch.equal(got, want)


@pytest.fixture
def calls(monkeypatch):
    seen = {"grouped": 0, "gqa": 0, "sdpa": 0}

    def spy(name, real):
        def counted(*a, **k):
            seen[name] += 1
            return real(*a, **k)
        return counted

    monkeypatch.setattr(attention, "grouped_attention", spy("grouped", attention.grouped_attention))
    monkeypatch.setattr(attention, "gqa_sdpa", spy("gqa", gqa_sdpa))
    monkeypatch.setattr("transformers.integrations.sdpa_attention.sdpa_attention_forward",
                        spy("sdpa", sdpa_attention_forward))
    return seen


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
NONE = {}


@pytest.mark.parametrize("dtype,tq,masked,kwargs,path", [
    (BF16, 4, True, NONE, "grouped"), (FP16, 1, False, NONE, "grouped"), (BF16, 64, True, NONE, "grouped"),
    (FP32, 4, True, NONE, "gqa"), (FP32, 2, True, NONE, "gqa"), (BF16, 65, True, NONE, "gqa"),
    (BF16, 4, True, {"dropout": 0.1}, "gqa"), (FP32, 1, True, NONE, "sdpa"), (FP32, 4, False, NONE, "sdpa"),
    (BF16, 4, False, NONE, "sdpa"), (BF16, 4, True, {"softcap": 30.0}, "sdpa"),
    (FP32, 4, True, {"s_aux": torch.zeros(4)}, "sdpa"), (FP32, 4, True, {"one_to_one": True}, "sdpa")])
def test_dispatch(calls, dtype, tq, masked, kwargs, path):
    q, k, v, allowed = _inputs(1, 4, 2, tq, 20)
    module, kwargs = _Module(), dict(kwargs)  # a copy: the parameter's dict stays as pytest made it
    if kwargs.pop("one_to_one", False):  # a layer without grouped queries: nothing to copy, SDPA as it comes
        module.num_key_value_groups = 1
        k, v = (t.repeat_interleave(2, 1) for t in (k, v))
    try:
        out, _ = few_query_attention(module, q.to(dtype), k.to(dtype), v.to(dtype), allowed if masked else None,
                                     **kwargs)
    except ValueError as err:  # SDPA refuses softcap itself
        assert "softcap" in kwargs and "softcap" in str(err)
    else:
        assert out.shape == (1, tq, 4, 16) and out.dtype == dtype
    assert calls == {name: int(path == name) for name in ("grouped", "gqa", "sdpa")}


def _saved_llama(path, dtype: str):
    """(loaded through load_causal_lm, loaded plainly as ``sdpa``, config) of a tiny grouped-query Llama (6:2)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from eaglehead.builtin.models import load_causal_lm

    cfg = LlamaConfig(vocab_size=128, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    plain = LlamaForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    return load_causal_lm(str(path), dtype=dtype), plain, cfg


def test_a_half_precision_target_runs_it_and_matches_sdpa(tmp_path, calls):
    model, plain, cfg = _saved_llama(tmp_path, "bfloat16")
    assert model.config._attn_implementation == NAME
    assert plain.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pre = model(ids[:, :36], use_cache=True)  # prefill, no mask: SDPA's causal kernel
        calls.update(grouped=0, gqa=0, sdpa=0)
        step = model(ids[:, 36:], cache=pre.past_key_values).logits  # 4 queries: grouped
        assert calls == {"grouped": cfg.num_hidden_layers, "gqa": 0, "sdpa": 0}
        want = plain(ids).logits[:, 36:]
    torch.testing.assert_close(step.float(), want.float(), atol=5e-2, rtol=0)
    model.float()  # moved to float32 after the switch: every call goes to SDPA again
    calls.update(grouped=0, gqa=0, sdpa=0)
    with torch.no_grad():
        model(ids[:, :4])
    assert calls == {"grouped": 0, "gqa": 0, "sdpa": cfg.num_hidden_layers}


def test_a_float32_target_runs_it_and_equals_sdpa_to_the_bit(tmp_path, calls):
    """A float32 target's masked verification takes SDPA with enable_gqa: the same logits as ``sdpa``, no kv copy."""
    model, plain, cfg = _saved_llama(tmp_path, "float32")
    assert model.config._attn_implementation == NAME
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # a left-padded row: every call carries a mask
    with torch.no_grad():
        got, want = (m(ids[:, :36], attention_mask=mask[:, :36], use_cache=True) for m in (model, plain))
        assert calls["gqa"] == cfg.num_hidden_layers  # the prefill, masked, on the kv heads in place
        calls.update(grouped=0, gqa=0, sdpa=0)
        step = model(ids[:, 36:], attention_mask=mask, cache=got.past_key_values).logits
        assert calls == {"grouped": 0, "gqa": cfg.num_hidden_layers, "sdpa": 0}
        ref = plain(ids[:, 36:], attention_mask=mask, cache=want.past_key_values).logits
    assert torch.equal(got.logits, want.logits) and torch.equal(step, ref)


def test_models_it_does_not_apply_to_are_left_alone():
    from tests.families import tiny_family

    eager = tiny_family("gemma2", dtype=torch.bfloat16)  # transformers: eager only
    assert use_few_query_attention(eager).config._attn_implementation == "eager"
    moved = tiny_family("llama").to("meta")  # not on a CPU
    assert use_few_query_attention(moved).config._attn_implementation == "sdpa"
