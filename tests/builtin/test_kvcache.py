"""GrowingCache against transformers' DynamicCache: the same logits through prefill, decoding past
several reallocations, crop, row selection, dropped leading columns and tensors replaced from outside."""

import pytest
import torch
from transformers import DynamicCache

from eaglehead.builtin.kvcache import MIN_GROWTH, GrowingCache, GrowingLayer
from tests.tiny_models import tiny_gpt2, tiny_llama, tiny_mistral

ATOL = 1e-5  # float32; both caches feed attention the same numbers, so this is summation-order noise


def _step(model, cache, ids, mask, pos):
    return model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True).logits


@pytest.mark.parametrize("build", [tiny_llama, tiny_mistral, tiny_gpt2])
def test_growing_cache_matches_dynamic_cache_through_every_operation(build):
    model = build(seed=3)
    gen = torch.Generator().manual_seed(0)
    bsz, prompt = 4, 9
    ids = torch.randint(0, 64, (bsz, prompt), generator=gen)
    mask = torch.ones(bsz, prompt, dtype=torch.long)
    mask[0, :3] = 0  # a left-padded row
    caches = [DynamicCache(config=model.config), GrowingCache(config=model.config)]
    assert isinstance(caches[1].layers[0], GrowingLayer)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        ref, got = (_step(model, c, ids, mask, pos) for c in caches)
        torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
        nxt = pos[:, -1:] + 1
        for step in range(MIN_GROWTH + 40):  # crosses at least one reallocation
            tok = torch.randint(0, 64, (mask.shape[0], 1), generator=gen)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
            ref, got = (_step(model, c, tok, mask, nxt) for c in caches)
            torch.testing.assert_close(got, ref, atol=ATOL, rtol=0, msg=f"step {step}")
            nxt = nxt + 1
            if step == 20:  # verify-style: feed 3 tokens, then crop 2 of them
                toks = torch.randint(0, 64, (mask.shape[0], 3), generator=gen)
                mask3 = torch.cat([mask, mask.new_ones(mask.shape[0], 3)], 1)
                pos3 = nxt + torch.arange(3)
                ref, got = (_step(model, c, toks, mask3, pos3) for c in caches)
                torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
                for c in caches:
                    c.crop(-2)
                mask, nxt = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1), nxt + 1
            if step == 50:  # a row leaves the batch
                keep = torch.tensor([0, 2, 3])
                for c in caches:
                    c.batch_select_indices(keep)
                mask, nxt = mask[keep], nxt[keep]
            if step == 60:  # the first 2 columns are dropped (nobody attends to them any more)
                mask[:, :2] = 0
                for layer in caches[0].layers:
                    layer.keys, layer.values = layer.keys[..., 2:, :], layer.values[..., 2:, :]
                for layer in caches[1].layers:
                    layer.drop_leading(2)
                mask = mask[:, 2:]
            if step == 70:  # someone else's code replaces the tensors: the next update adopts them
                for c in caches:
                    for layer in c.layers:
                        layer.keys, layer.values = layer.keys * 1.0, layer.values * 1.0
    assert caches[1].get_seq_length() == caches[0].get_seq_length()
    assert caches[1].layers[0]._kbuf.shape[-2] > MIN_GROWTH  # it did reallocate


def test_growing_cache_refuses_a_positive_crop():
    cache = GrowingCache(config=tiny_llama().config)
    cache.layers[0].update(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    with pytest.raises(ValueError, match="negative"):
        cache.crop(2)
    cache.crop(-1)
    assert cache.layers[0].keys.shape[-2] == 2
