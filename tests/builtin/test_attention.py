"""builtin.attention: the target's few-query attention on a CPU in half precision.

- The grouped path equals a float64 reference of masked attention (bool and additive masks, a mask per head
  or shared, 1 to 64 queries, grouped-query 1:1 and 3:1) within bfloat16 tolerance: atol 4e-2 on outputs up to
  ~3 (scores up to ~5 rounded to bf16 move a weight by up to 2^-9 x 5 = 1 %, the values' and the output's own
  roundings add 2^-9 of |v| and |out|), and float16 (8x finer) within 6e-3;
  and it equals transformers' own ``eager`` attention on the same bfloat16 inputs to 1e-2 (same numerics,
  no repeated kv heads). A fully masked row is finite (uniform weights, as ``eager``), not NaN.
- Dispatch: float32, more than 64 queries, no mask over several queries, softcap, sinks, dropout go to
  transformers' SDPA with the call's arguments; the rest never reach SDPA.
- A bfloat16 target loaded through ``load_causal_lm`` runs it and its logits equal the ``sdpa`` model's (atol
  bf16); a float32 target keeps ``sdpa``; a model that is moved to float32 after the switch falls back per call.

The families (mask dicts, sliding windows, ragged caches, trees) are covered in tests/decode/test_families.py
with the grouped path forced in float32.
"""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from eaglehead.builtin import attention
from eaglehead.builtin.attention import NAME, few_query_attention, grouped_attention, use_few_query_attention


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


@pytest.fixture
def calls(monkeypatch):
    seen = {"grouped": 0, "sdpa": 0}

    def spy_grouped(*a, **k):
        seen["grouped"] += 1
        return real_grouped(*a, **k)

    def spy_sdpa(*a, **k):
        seen["sdpa"] += 1
        return sdpa_attention_forward(*a, **k)

    real_grouped = attention.grouped_attention
    monkeypatch.setattr(attention, "grouped_attention", spy_grouped)
    monkeypatch.setattr("transformers.integrations.sdpa_attention.sdpa_attention_forward", spy_sdpa)
    return seen


BF16, FP16 = torch.bfloat16, torch.float16
NONE = {}


@pytest.mark.parametrize("dtype,tq,masked,kwargs,path", [
    (BF16, 4, True, NONE, "grouped"), (FP16, 1, False, NONE, "grouped"), (BF16, 64, True, NONE, "grouped"),
    (torch.float32, 4, True, NONE, "sdpa"), (BF16, 65, True, NONE, "sdpa"), (BF16, 4, False, NONE, "sdpa"),
    (BF16, 4, True, {"softcap": 30.0}, "sdpa"), (BF16, 4, True, {"s_aux": torch.zeros(4)}, "sdpa"),
    (BF16, 4, True, {"dropout": 0.1}, "sdpa")])
def test_dispatch(calls, dtype, tq, masked, kwargs, path):
    q, k, v, allowed = _inputs(1, 4, 2, tq, 20)
    try:
        out, _ = few_query_attention(_Module(), q.to(dtype), k.to(dtype), v.to(dtype), allowed if masked else None,
                                     **kwargs)
    except ValueError as err:  # SDPA refuses softcap itself
        assert "softcap" in kwargs and "softcap" in str(err)
    else:
        assert out.shape == (1, tq, 4, 16) and out.dtype == dtype
    assert calls == {"grouped": int(path == "grouped"), "sdpa": int(path == "sdpa")}


def test_a_half_precision_target_runs_it_and_matches_sdpa(tmp_path, calls):
    from transformers import LlamaConfig, LlamaForCausalLM

    from eaglehead.builtin.models import load_causal_lm

    cfg = LlamaConfig(vocab_size=128, hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    assert load_causal_lm(str(tmp_path), dtype="float32").config._attn_implementation == "sdpa"
    model = load_causal_lm(str(tmp_path), dtype="bfloat16")
    assert model.config._attn_implementation == NAME
    plain = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert plain.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pre = model(ids[:, :36], use_cache=True)  # prefill, no mask: SDPA's causal kernel
        calls.update(grouped=0, sdpa=0)
        step = model(ids[:, 36:], cache=pre.past_key_values).logits  # 4 queries: grouped
        assert calls["grouped"] == cfg.num_hidden_layers and calls["sdpa"] == 0
        want = plain(ids).logits[:, 36:]
    torch.testing.assert_close(step.float(), want.float(), atol=5e-2, rtol=0)
    model.float()  # moved to float32 after the switch: every call goes to SDPA again
    calls.update(grouped=0, sdpa=0)
    with torch.no_grad():
        model(ids[:, :4])
    assert calls["grouped"] == 0 and calls["sdpa"] == cfg.num_hidden_layers


def test_models_it_does_not_apply_to_are_left_alone():
    from tests.families import tiny_family

    eager = tiny_family("gemma2", dtype=torch.bfloat16)  # transformers: eager only
    assert use_few_query_attention(eager).config._attn_implementation == "eager"
    fp32 = tiny_family("llama")
    assert use_few_query_attention(fp32).config._attn_implementation == "sdpa"
