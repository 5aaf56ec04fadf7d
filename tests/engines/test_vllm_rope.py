"""The head's RoPE under every variant it accepts equals the rotation vLLM builds from the *exported* config.json:
vLLM's own ``get_config`` reads the export and ``get_rope`` builds the rotary embedding with the arguments its Llama
layer passes (vLLM 0.32's ``LlamaAttention._init_rotary_emb``). One vLLM process for all variants (~10 s).

The transformers side of the same parity (the head's attention against transformers' ``LlamaAttention`` from the
export) is ``tests/draftheads/test_rope_export.py``; this one is what the engine computes.
"""

import json
import subprocess

import pytest
import torch

from eaglehead.draftheads import Eagle3Head
from eaglehead.draftheads.checkpoint import export_eagle3
from eaglehead.draftheads.rope import apply_rope
from eaglehead.engines import vllm_python
from tests.draftheads.common import randomise, tiny_config
from tests.draftheads.test_rope_export import MAX_POSITIONS, ROPES

from pathlib import Path

PROBE = Path(__file__).with_name("vllm_rope_probe.py")
POSITIONS = [0, 1, 2, 7, 100, 4095, 4096, 5000, 9000, 20000, 131071]
# A control: the export with its rope_parameters/rope_scaling removed must leave the bound for YaRN.
CONTROL = "yarn-gpt-oss-without-rope-keys"


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_rope")
    heads, dirs = {}, {}
    for name, (theta, scaling) in ROPES.items():
        heads[name] = randomise(Eagle3Head(tiny_config(rope_theta=theta, rope_scaling=scaling,
                                                       max_position_embeddings=MAX_POSITIONS)), seed=1)
        dirs[name] = str(export_eagle3(heads[name], root / name))
    control = root / CONTROL
    export_eagle3(heads["yarn-gpt-oss"], control)
    cfg = json.loads((control / "config.json").read_text())
    cfg.pop("rope_parameters"), cfg.pop("rope_scaling")
    (control / "config.json").write_text(json.dumps(cfg))
    dirs[CONTROL], heads[CONTROL] = str(control), heads["yarn-gpt-oss"]
    d = heads["default"].config.head_dim
    query = torch.randn(len(POSITIONS), d, generator=torch.Generator().manual_seed(0))
    (root / "spec.json").write_text(json.dumps({"heads": dirs, "positions": POSITIONS, "query": query.tolist()}))
    subprocess.run([str(vllm_python()), str(PROBE), str(root / "spec.json"), str(root / "out.json")], check=True,
                   timeout=300, capture_output=True)
    return heads, query, json.loads((root / "out.json").read_text())


def ours(head: Eagle3Head, query: torch.Tensor) -> torch.Tensor:
    cos, sin = head.rope(torch.tensor([POSITIONS]))  # [1, T, d]
    return apply_rope(query[None, None], cos, sin)[0, 0]


@pytest.mark.parametrize("name", list(ROPES))
def test_vllm_rotates_as_the_head_does(rotated, name):
    heads, query, out = rotated
    assert "error" not in out[name], out[name]
    # float32 angles up to 131071 rad lose ~1e-5 in cos/sin on both sides: 1e-4 on unit-scale queries
    torch.testing.assert_close(torch.tensor(out[name]), ours(heads[name], query), atol=1e-4, rtol=1e-4)


def test_a_config_without_its_rope_keys_leaves_the_bound(rotated):
    heads, query, out = rotated
    assert not torch.allclose(torch.tensor(out[CONTROL]), ours(heads[CONTROL], query), atol=1e-2)
