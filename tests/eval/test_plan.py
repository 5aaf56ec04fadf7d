"""``EvalPlan``: every bad option is refused on construction, before anything is loaded, with the
command-line option named; the command line and Python build the same plan."""

import argparse

import pytest

from eaglehead.decode import DEFAULT_GAMMA, PromptLookupDrafter
from eaglehead.eval.plan import EvalPlan, add_eval_arguments, plan_from_args


@pytest.fixture
def base(tmp_path):
    (tmp_path / "target").mkdir()
    return dict(target=str(tmp_path / "target"), prompts="humaneval", out=str(tmp_path / "out"), device="cpu")


@pytest.mark.parametrize("bad, option", [
    (dict(gammas=(0,)), "--gamma"),
    (dict(gammas=(17,)), "--gamma"),
    (dict(gammas=(2, 3)), "--gamma"),                     # fixed mode holds one gamma
    (dict(gamma_mode="often"), "--gamma"),
    (dict(temperatures=(-1.0,)), "--temperature"),
    (dict(temperatures=()), "--temperature"),
    (dict(temperatures=(float("nan"),)), "--temperature"),
    (dict(batch_sizes=(1, 0)), "--batch-sizes"),
    (dict(batch_sizes=()), "--batch-sizes"),
    (dict(max_new_tokens=0), "--max-new-tokens"),
    (dict(repeats=0), "--repeats"),
    (dict(report_to="tensorboard"), "--report-to"),
    (dict(max_new_tokens=True), "--max-new-tokens"),
    (dict(max_prompts=0), "--max-prompts"),
    (dict(tune_fraction=1.0), "--tune-fraction"),
    (dict(dtype="int8"), "--dtype"),
    (dict(device="abacus"), "--device"),
    (dict(target="no-such-dir"), "--target"),
    (dict(methods=["vanilla", "medusa"]), "--methods"),
    (dict(methods=[]), "--methods"),
    (dict(methods=["vanilla", "eagle3"]), "--methods eagle3 needs --draft"),
    (dict(methods=["vanilla", "eagle1"]), "--methods eagle1 needs --eagle1"),
    (dict(methods=["vanilla", "draft-lm"]), "--methods draft-lm needs --draft-lm"),
    (dict(drafts={"medusa": "x"}), "drafts"),
    (dict(drafter_factories={"medusa": lambda t: None}), "drafter_factories"),
])
def test_each_bad_option_is_named(base, bad, option):
    with pytest.raises(ValueError, match=option):
        EvalPlan(**{**base, **bad})


def test_non_empty_out_needs_overwrite(base, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(ValueError, match="--out .*--overwrite"):
        EvalPlan(**base)
    EvalPlan(**base, overwrite=True)


def test_prompt_errors_name_prompts(base, tmp_path):
    with pytest.raises(ValueError, match="--prompts.*no such file"):
        EvalPlan(**{**base, "prompts": str(tmp_path / "missing.jsonl")}).load_prompts()


def test_defaults_and_resolved_methods(base):
    plan = EvalPlan(**base, drafts={"eagle3": "h"}, drafter_factories={"eagle1": lambda t: PromptLookupDrafter(8)})
    assert plan.methods == ["vanilla", "hf-generate", "prompt-lookup", "eagle3", "eagle1"]
    assert plan.gamma_mode == "fixed" and plan.gammas == (DEFAULT_GAMMA,)
    assert EvalPlan(**base, methods=["prompt-lookup", "vanilla"]).methods == ["vanilla", "prompt-lookup"]
    assert plan.prompt_set == "humaneval" and plan.to_dict()["drafter_factories"] == ["eagle1"]


def test_command_line_and_python_build_the_same_plan(base):
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--target", base["target"], "--prompts", "humaneval", "--out", base["out"],
                              "--device", "cpu", "--draft", "h", "--gamma", "auto:2..4", "--temperature", "0", "1",
                              "--batch-sizes", "1,4,1", "--methods", "vanilla,eagle3"])
    assert plan_from_args(args) == EvalPlan(**base, drafts={"eagle3": "h"}, methods=["vanilla", "eagle3"],
                                            gamma_mode="auto", gammas=(2, 3, 4), temperatures=(0.0, 1.0),
                                            batch_sizes=(1, 4))
    assert parser.get_default("gamma") == str(DEFAULT_GAMMA)


def test_generate_and_eval_share_the_gamma_default():
    from eaglehead.cli import build_parser

    parser = build_parser()
    gen = parser.parse_args(["generate", "--target", "t", "--prompt", "p"])
    ev = parser.parse_args(["eval", "--target", "t", "--prompts", "humaneval"])
    assert gen.gamma == DEFAULT_GAMMA and int(ev.gamma) == DEFAULT_GAMMA
