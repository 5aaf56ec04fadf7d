"""Segmented decode attention (datagen/segments.py): the segment plan is the optimum of its cost, and a
left-padded decode step through it gives the logits of plain SDPA attention (float64, every family the
tests cover), while a plan that cuts a column some row attends to does not."""

import itertools
import random

import pytest
import torch

from eaglehead.builtin.kvcache import GrowingCache
from eaglehead.builtin.text import left_pad
from eaglehead.datagen import stream
from eaglehead.datagen.segments import plan_segments, segmented_attention
from eaglehead.decode import SamplingConfig
from tests.tiny_models import tiny_llama, tiny_mistral, tiny_qwen2


def _cost(segs, starts, width, call_cost):
    return sum((b - a) * (width - s) + call_cost for a, b, s in segs)


def _brute_force(starts, width, call_cost):
    n, best = len(starts), None
    for cuts in itertools.product((0, 1), repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        segs = [(a, b, min(starts[a:b])) for a, b in zip(bounds, bounds[1:])]
        cost = _cost(segs, starts, width, call_cost)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("call_cost", [0, 5, 40, 10_000])
def test_the_plan_covers_every_row_once_with_the_least_cost(call_cost):
    rng = random.Random(call_cost)
    for _ in range(60):
        n, width = rng.randint(1, 9), rng.randint(1, 60)
        starts = [rng.randint(0, width - 1) for _ in range(n)]
        segs = plan_segments(starts, width, call_cost)
        assert [a for a, _, _ in segs] == [0] + [b for _, b, _ in segs[:-1]] and segs[-1][1] == n
        assert all(s == min(starts[a:b]) for a, b, s in segs)  # no segment drops a column a row attends to
        assert _cost(segs, starts, width, call_cost) == _brute_force(starts, width, call_cost)
    assert plan_segments([], 5) == []
    assert len(plan_segments([0, 0, 9, 9], 10, call_cost=10_000)) == 1  # calls dearer than columns: one call


def _decode_logits(model, prompts, segs_fn):
    """One prefill of the left-padded ``prompts``, then one decode step with the segments ``segs_fn(starts,
    width)`` (``None``: plain attention); the decode step's logits."""
    ids, mask = left_pad(prompts, 0, "cpu")
    cache = GrowingCache(config=model.config)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, cache=cache)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    starts = mask.argmax(-1).tolist()
    mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], 1)
    extra = {} if segs_fn is None else {"kv_segments": segs_fn(starts, mask.shape[1])}
    return model(input_ids=tok, attention_mask=mask, position_ids=mask.sum(-1, keepdim=True) - 1, use_cache=True,
                 cache=cache, **extra).logits[:, -1]


@pytest.mark.parametrize("build", [tiny_llama, tiny_qwen2, tiny_mistral])
def test_segmented_decode_equals_plain_attention_and_a_cut_too_deep_is_caught(build):
    model = build(seed=5).double()
    prompts = [[3, 4, 5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18], [19], [20, 21, 22, 23]]
    with torch.no_grad():
        plain = _decode_logits(model, prompts, None)
        with segmented_attention(model) as on:
            assert on and model.config._attn_implementation != "sdpa"
            planned = _decode_logits(model, prompts, lambda s, w: plan_segments(s, w, call_cost=0))
            per_row = _decode_logits(model, prompts, lambda s, w: [(r, r + 1, x) for r, x in enumerate(s)])
            # Negative control: row 0's segment starts one column late (its first prompt token cut).
            too_deep = _decode_logits(model, prompts, lambda s, w: [(0, 1, s[0] + 1), (1, len(s), min(s[1:]))])
        assert model.config._attn_implementation == "sdpa"  # restored
    torch.testing.assert_close(planned, plain, rtol=0, atol=1e-12)
    torch.testing.assert_close(per_row, plain, rtol=0, atol=1e-12)
    assert (too_deep[0] - plain[0]).abs().max() > 1e-6
    torch.testing.assert_close(too_deep[1:], plain[1:], rtol=0, atol=1e-12)


def test_the_stream_runs_segmented_and_writes_what_plain_attention_writes(monkeypatch):
    eager = tiny_llama(seed=1, attn_implementation="eager")
    with segmented_attention(eager) as on:  # not on SDPA: left as it is
        assert not on and eager.config._attn_implementation == "eager"
    sdpa = tiny_llama(seed=1)
    plans = []
    monkeypatch.setattr(stream, "plan_segments", lambda s, w: plans.append(plan_segments(s, w, 0)) or plans[-1])
    prompts = [[5, 6, 7, 8, 9, 4, 4, 4, 4, 4], [10, 11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26], [30], [31, 32]]
    kw = dict(sampling=SamplingConfig(temperature=0), max_new_tokens=7, eos_ids=set(), pad_id=0,
              generator=torch.Generator().manual_seed(0))
    rows_eager, _ = stream.sample_stream(eager, prompts, batch_size=4, **kw)
    assert plans == []
    rows_sdpa, _ = stream.sample_stream(sdpa, prompts, batch_size=4, **kw)
    assert rows_sdpa == rows_eager and sdpa.config._attn_implementation == "sdpa"
    assert max(len(p) for p in plans) > 1  # rows of unequal lengths ran in more than one segment
