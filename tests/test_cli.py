"""The command line on tiny local models: generate (three drafters), export, errors."""

import json

import pytest
import torch

from eaglehead.cli import main
from eaglehead.draftheads.checkpoint import load_head, save_pretrained
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from tests.tiny_models import save_tiny_target


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    target, tok = save_tiny_target(root / "target")
    torch.manual_seed(1)
    head = Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=len(tok)))
    save_pretrained(head, root / "head")
    save_tiny_target(root / "draft_lm", seed=3, layers=1)
    return root


def _generate(capsys, *args):
    rc = main(["generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_generate_streams_the_same_greedy_text_with_every_drafter(assets, capsys):
    target = ["--target", str(assets / "target")]
    rc, vanilla, _ = _generate(capsys, *target)
    assert rc == 0 and vanilla.strip()
    for extra in (["--prompt-lookup"], ["--draft", str(assets / "head")], ["--draft", str(assets / "draft_lm")]):
        rc, text, err = _generate(capsys, *target, *extra, "--gamma", "3")
        assert rc == 0
        assert text == vanilla, extra
        assert "tau=" in err


def test_export_round_trip_and_refusal(assets, capsys, tmp_path):
    for fmt in ("eagle3", "speculators"):
        out = tmp_path / fmt
        assert main(["export", str(assets / "head"), "--format", fmt, "--out", str(out)]) == 0
        cfg = json.loads((out / "config.json").read_text())
        assert ("speculators_model_type" in cfg) == (fmt == "speculators")
        back = load_head(out)
        ref = load_head(assets / "head")
        for k, v in ref.state_dict().items():
            assert torch.equal(back.state_dict()[k], v)
        assert main(["export", str(assets / "head"), "--format", fmt, "--out", str(out)]) == 2
        assert "--overwrite" in capsys.readouterr().err


def test_export_names_the_target_as_engines_load_it(assets, tmp_path):
    from eaglehead.builtin.models import SMOLLM2, hub_name

    assert hub_name(SMOLLM2) == "HuggingFaceTB/SmolLM2-135M-Instruct"  # what training records for the built-in
    assert hub_name("runs/my-target") == "runs/my-target"
    out = tmp_path / "named"
    assert main(["export", str(assets / "head"), "--out", str(out), "--target-name", "org/model"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eaglehead"]["target_name_or_path"] == "org/model"
    assert load_head(out).config.target_name_or_path == "org/model"
    out = tmp_path / "spec"
    assert main(["export", str(assets / "head"), "--format", "speculators", "--out", str(out),
                 "--target-name", "org/model"]) == 0
    assert json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == "org/model"


def test_bad_input_exits_2_with_the_parameter_named(assets, capsys):
    target = ["--target", str(assets / "target")]
    rc, _, err = _generate(capsys, *target, "--prompt-lookup", "--gamma", "0")
    assert rc == 2 and "gamma" in err
    rc, _, err = _generate(capsys, *target, "--temperature", "-1")
    assert rc == 2 and "temperature" in err
    rc, _, err = _generate(capsys, *target, "--top-p", "0")
    assert rc == 2 and "top_p" in err
    assert main(["export", str(assets / "missing"), "--out", str(assets / "x")]) == 2
    assert "CKPT" in capsys.readouterr().err
    assert main(["export", str(assets / "target"), "--out", str(assets / "y")]) == 2  # a full LM, not a head
    assert "num_hidden_layers" in capsys.readouterr().err


def test_export_gguf_writes_the_head_llama_cpp_loads_and_it_loads_back(tmp_path, capsys):
    """``export --format gguf`` on the shipped SmolLM2 head: a file that loads back (``load_head`` takes a .gguf)
    with the same weights as float16 rounding of the source; without --target, or with an --out that is not a
    .gguf name, a named error and nothing written."""
    from eaglehead.demos.smollm2_assets import llamacpp_head

    src = llamacpp_head()
    out = tmp_path / "head.gguf"
    assert main(["export", str(src), "--format", "gguf", "--out", str(out)]) == 2
    assert "--format gguf needs --target" in capsys.readouterr().err and not out.exists()
    assert main(["export", str(src), "--format", "gguf", "--target", "builtin:smollm2-135m-instruct",
                 "--out", str(tmp_path / "head")]) == 2
    assert "name it NAME.gguf" in capsys.readouterr().err
    assert main(["export", str(src), "--format", "gguf", "--target", "builtin:smollm2-135m-instruct",
                 "--out", str(out)]) == 0
    back, orig = load_head(out), load_head(src)
    assert back.config.fused_layer_ids == orig.config.fused_layer_ids == [2, 15, 27]
    assert torch.equal(back.d2t, orig.d2t)
    assert torch.equal(back.lm_head.weight.half(), orig.lm_head.weight.half())
