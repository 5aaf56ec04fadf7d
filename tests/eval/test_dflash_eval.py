"""The DFlash block drafter in ``eaglehead eval`` (method ``dflash``, ``--dflash DIR``): a saved drafter of the tiny
target is loaded by path, decodes exactly beside vanilla at batch 1 and 2 (greedy identity, and at T = 1 through the
same runner), reports tau and survival per draft position; the options that cannot work are refused by name."""

import pytest

from eaglehead.draftheads.checkpoint import save_pretrained
from eaglehead.eval.runner import run_eval
from tests.decode.test_dflash_decode import BLOCK, make_dflash

from .test_runner import _args, workspace  # noqa: F401  (the tiny target)


@pytest.fixture(scope="module")
def dflash_dir(workspace, tmp_path_factory):  # noqa: F811
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(workspace["root"] / "target")
    return save_pretrained(make_dflash(target, seed=3), tmp_path_factory.mktemp("dflash") / "head")


def _overall(report, method, batch_size, temperature=0.0):
    rows = [r for r in report["runs"] if r["method"] == method and r["batch_size"] == batch_size
            and r["temperature"] == temperature and r["category"] == "all" and r.get("turn") in (None, "all")]
    assert len(rows) == 1
    return rows[0]


def test_dflash_method_decodes_exactly_beside_vanilla(workspace, dflash_dir, tmp_path):  # noqa: F811
    gamma = BLOCK - 1
    report = run_eval(_args(workspace, tmp_path / "out", "--dflash", str(dflash_dir), "--methods", "vanilla,dflash",
                            "--gamma", str(gamma), "--temperature", "0", "1", "--batch-sizes", "1,2"))
    assert report["consistency_violations"] == []
    assert report["identity"]["all_identical"] and report["identity"]["greedy_runs_checked"] >= 2
    for bsz in (1, 2):
        row = _overall(report, "dflash", bsz)
        assert row["engine"] == "torch" and row["gamma"] == gamma and row["mismatched_prompts"] == 0
        assert row["tau"] >= 1.0 and len(row["survival"]) == gamma
    assert _overall(report, "dflash", 1, 1.0)["tau"] >= 1.0  # sampled rounds run through the same loop


def test_a_gamma_past_the_block_is_refused_naming_both(workspace, dflash_dir, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match=rf"--gamma \[{BLOCK}\].*block size {BLOCK}"):
        run_eval(_args(workspace, tmp_path / "out", "--dflash", str(dflash_dir), "--methods", "vanilla,dflash",
                       "--gamma", str(BLOCK)))


def test_dflash_needs_its_option_and_an_eagle_head_is_not_a_dflash_drafter(workspace, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--methods dflash needs --dflash PATH"):
        _args(workspace, tmp_path / "a", "--methods", "vanilla,dflash")
    from eaglehead.draftheads import Eagle3Config, Eagle3Head
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(workspace["root"] / "target")
    eagle = save_pretrained(Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=cfg.vocab_size)),
                            tmp_path / "eagle")
    with pytest.raises(ValueError, match=r"--dflash .*not a DFlash drafter"):
        run_eval(_args(workspace, tmp_path / "b", "--dflash", str(eagle), "--methods", "vanilla,dflash"))
