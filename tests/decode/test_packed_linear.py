"""Packed linear layers (oneDNN on weights packed once): same numbers as F.linear, same module surface, and the
speculative loops on a packed target and head still reproduce vanilla decoding."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.decode.packed_linear import PackedLinear, pack_linears, packed_dtypes
from tests.decode.test_eagle_drafter import make_head
from tests.tiny_models import tiny_llama

GREEDY = SamplingConfig(temperature=0)


def _linear(inp, out, bias, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(inp, out, bias=bias).to(dtype).eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 96), (5, 96), (2, 7, 96), (3, 1, 96)])
def test_float32_matches_f_linear(shape, bias):
    lin = _linear(96, 200, bias)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    packed = PackedLinear(lin)
    with torch.no_grad():
        ref = F.linear(x.double(), lin.weight.double(), None if lin.bias is None else lin.bias.double())
        got = packed(x)
    assert got.shape == ref.shape and got.dtype == torch.float32
    # float32 sums of 96 products of O(1) terms: a few ulps of the result's scale
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_the_pinned_torch_build_packs_float32():
    assert torch.float32 in packed_dtypes()  # torch 2.13 CPU wheels ship oneDNN; without it nothing is packed


def test_bfloat16_matches_f_linear():
    lin = _linear(128, 64, True, dtype=torch.bfloat16)
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    if torch.bfloat16 not in packed_dtypes():  # a CPU without native oneDNN bfloat16: left to F.linear
        model = nn.Sequential(lin)
        assert pack_linears(model) == 0 and type(model[0]) is nn.Linear
        return
    with torch.no_grad():
        ref = F.linear(x.double(), lin.weight.double(), lin.bias.double())
        got = PackedLinear(lin)(x)
    assert got.dtype == torch.bfloat16
    # bfloat16 output rounding (8 bits of mantissa) on values of size ~sqrt(128) * 0.05
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=2e-2)


def test_stale_weights_are_repacked():
    lin = _linear(32, 16, True)
    packed = PackedLinear(lin)
    x = torch.randn(3, 32)
    with torch.no_grad():
        before = packed(x)
        lin.weight.mul_(2.0)  # in place: the version counter moves
        after = packed(x)
        torch.testing.assert_close(after, F.linear(x, lin.weight, lin.bias))
        assert not torch.allclose(before, after)
        lin.weight.data = torch.zeros_like(lin.weight)  # replaced storage
        torch.testing.assert_close(packed(x), lin.bias.expand(3, 16))


def test_gradients_take_the_plain_path():
    lin = _linear(16, 8, True)
    packed = PackedLinear(lin)
    x = torch.randn(4, 16, requires_grad=True)
    packed(x).sum().backward()
    assert packed.weight.grad is lin.weight.grad is not None
    torch.testing.assert_close(x.grad, torch.ones(4, 8) @ lin.weight.detach())
    torch.testing.assert_close(lin.weight.grad, torch.ones(8, 4) @ x.detach())


def test_pack_linears_keeps_ties_and_state_dict():
    model = tiny_llama(seed=0, layers=2, tie_word_embeddings=True)
    keys = list(model.state_dict())
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids).logits
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert pack_linears(model) == n_linear > 0
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    assert list(model.state_dict()) == keys
    with torch.no_grad():
        got = model(ids).logits
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert pack_linears(model) == 0  # already packed: nothing left to replace


def test_pack_linears_leaves_other_dtypes_alone():
    model = tiny_llama(seed=0).to(torch.float16)
    assert pack_linears(model) == 0
    assert any(type(m) is nn.Linear for m in model.modules())


@pytest.mark.parametrize("gamma", [1, 4])
def test_speculative_greedy_on_packed_models_equals_vanilla(gamma):
    """The exactness claim on packed kernels: greedy speculative output = greedy vanilla output, both packed
    (as ``eaglehead eval --cpu-linear packed`` runs them), and the packed vanilla = the plain vanilla."""
    target = tiny_llama(seed=0, layers=4)
    head = make_head(target)
    prompt = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(5))
    plain = vanilla_generate(target, prompt, sampling=GREEDY, max_new_tokens=24).tokens
    assert pack_linears(target) > 0 and pack_linears(head) > 0
    vanilla = vanilla_generate(target, prompt, sampling=GREEDY, max_new_tokens=24).tokens
    spec = speculative_generate(target, Eagle3Drafter(head, target), prompt, gamma=gamma, sampling=GREEDY,
                                max_new_tokens=24).tokens
    assert vanilla == plain
    assert spec == vanilla
