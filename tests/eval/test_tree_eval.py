"""Tree methods (``eagle3-tree``, ``eagle1-tree``) in ``eaglehead eval``: greedy identity with vanilla and a
consistent report in every gamma mode, the tree axis tuned by the gamma rule, tree records and their
metrics, journal round trips and the bad tree options, named."""

import json

import pytest
import torch

from eaglehead.decode import GenerationResult, TreeRoundRecord
from eaglehead.eval.journal import result_from_dict, result_to_dict
from eaglehead.eval.metrics import compute_metrics
from eaglehead.eval.plan_options import DEFAULT_TREE_AXIS, DEFAULT_TREE_TOKENS
from eaglehead.eval.report import check_report_consistency, run_record
from eaglehead.eval.runner import run_eval

from tests.eval.test_runner import _args, workspace  # noqa: F401  (the shared tiny target and prompts)


@pytest.fixture(scope="module")
def heads(workspace, tmp_path_factory):  # noqa: F811
    """Saved random EAGLE-3 (full draft vocabulary) and EAGLE-1 heads for the tiny target."""
    from transformers import AutoConfig

    from eaglehead.draftheads.checkpoint import save_pretrained
    from eaglehead.draftheads.config import Eagle3Config
    from eaglehead.draftheads.eagle1 import Eagle1Head
    from eaglehead.draftheads.eagle3 import Eagle3Head

    root = tmp_path_factory.mktemp("heads")
    cfg = AutoConfig.from_pretrained(workspace["root"] / "target")
    torch.manual_seed(3)
    save_pretrained(Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=workspace["vocab"])), root / "e3")
    save_pretrained(Eagle1Head(Eagle1Head.config_from_target(cfg)), root / "e1")
    return root


def _tree_args(ws, heads, out, *extra):
    return _args(ws, out, "--methods", "vanilla,eagle3,eagle3-tree,eagle1-tree", "--draft", str(heads / "e3"),
                 "--eagle1", str(heads / "e1"), "--tree-depth", "3", "--tree-topk", "2", *extra)


def _check_tree_runs(report, shapes):
    """Every tree record: its shape, verified nodes within the tree, depths within its depth, identity."""
    assert report["consistency_violations"] == [] and check_report_consistency(report) == []
    assert report["identity"]["all_identical"] is True
    trees = [r for r in report["runs"] if r["method"].endswith("-tree")]
    assert {r["method"] for r in trees} == {"eagle3-tree", "eagle1-tree"}
    for r in trees:
        depth, topk, n = r["tree_depth"], r["tree_topk"], r["tree_tokens"]
        assert (depth, topk, n) == (min(3, r["gamma"]), 2, r["gamma"]) and n in shapes
        assert r["identical_to_vanilla"] is True and r["engine"] == "torch"
        assert 0 < r["verified_mean"] <= n and max(r["gamma_values"]) <= n
        assert max(r["depth_values"]) <= depth and len(r["survival"]) == max(r["depth_values"])
        assert r["tau"] >= 1 and r["tau"] <= 1 + depth
    return trees


def test_fixed_tree_at_batch_sizes_1_and_2(workspace, heads, tmp_path):  # noqa: F811
    report = run_eval(_tree_args(workspace, heads, tmp_path / "f", "--gamma", "2", "--tree-tokens", "4",
                                 "--batch-sizes", "1,2"))
    trees = _check_tree_runs(report, {4})
    assert {r["batch_size"] for r in trees} == {1, 2}
    md = (tmp_path / "f" / "report.md").read_text()
    assert (tmp_path / "f" / "survival.png").is_file() and "| verified/round |" in md and "d3 k2 n4" in md


def test_sweep_measures_every_tree_size(workspace, heads, tmp_path):  # noqa: F811
    report = run_eval(_tree_args(workspace, heads, tmp_path / "s", "--gamma", "1..2", "--tree-tokens", "2,5"))
    _check_tree_runs(report, {2, 5})
    swept = {(s["method"], s["gamma"]) for s in report["sweeps"]}
    assert {("eagle3-tree", 2), ("eagle3-tree", 5), ("eagle3", 1), ("eagle3", 2)} <= swept


def test_auto_chooses_the_tree_size_on_the_tune_split(workspace, heads, tmp_path):  # noqa: F811
    report = run_eval(_tree_args(workspace, heads, tmp_path / "a", "--gamma", "auto:1..2", "--tree-tokens", "1,3,6",
                                 "--max-new-tokens", "6"))
    _check_tree_runs(report, {1, 3, 6})
    sel = {s["method"]: s for s in report["gamma_selection"]}
    for m in ("eagle3-tree", "eagle1-tree"):
        assert sel[m]["axis"] == "verified tree nodes" and [row["gamma"] for row in sel[m]["table"]] == [1, 3, 6]
        run = next(r for r in report["runs"] if r["method"] == m and r["category"] == "all")
        assert run["split"] == "test" and run["gamma"] == sel[m]["chosen"] == run["tree_tokens"]
    assert [row["gamma"] for row in sel["eagle3"]["table"]] == [1, 2]
    assert "gamma = verified tree nodes" in (tmp_path / "a" / "report.md").read_text()


def test_tree_calls_resume_from_the_journal(workspace, heads, tmp_path, monkeypatch):  # noqa: F811
    import eaglehead.eval.schedule as schedule

    args = ("--gamma", "2", "--tree-tokens", "4", "--max-new-tokens", "6")
    out = tmp_path / "j"
    report = run_eval(_tree_args(workspace, heads, out, *args))
    calls = []
    monkeypatch.setattr(schedule, "run_call", lambda *a, **k: calls.append(a[1]))
    again = run_eval(_tree_args(workspace, heads, out, *args, "--resume"))
    assert calls == [] and again["runs"] == report["runs"]  # every tree call replayed, timings included
    group = json.loads((out / "calls.jsonl").read_text().splitlines()[0])
    tree = next(c for m, _, c in group["calls"] if m == "eagle3-tree")["result"]
    assert all("depth" in r for r in tree["rounds"]) and isinstance(result_from_dict(tree).rounds[0], TreeRoundRecord)


def test_tree_result_round_trips_and_its_metrics_use_depths():
    rounds = [TreeRoundRecord(8, [2], [3], [True], 0.01, 0.02, 0.001, depth=4),
              TreeRoundRecord(8, [0], [1], [True], 0.01, 0.02, 0.001, depth=4),
              TreeRoundRecord(8, [4], [5], [True], 0.01, 0.02, 0.001, depth=4)]
    res = GenerationResult(tokens=[list(range(10))], rounds=rounds, token_times=[[0.1 * i for i in range(10)]],
                           t_start=0.0, t_end=1.0, prompt_lengths=[5], finished_by_eos=[False], prefill_tokens=0)
    assert result_from_dict(json.loads(json.dumps(result_to_dict(res)))) == res
    m = compute_metrics(res)
    assert m.tau == 1 + 6 / 3 and m.depth_values == [4] and m.gamma_values == [8] and m.verified_mean == 8
    assert m.survival == [2 / 3, 2 / 3, 1 / 3, 1 / 3]  # by depth: Pr(A >= i), i = 1..4
    assert m.acceptance_rate == 6 / 24  # accepted tokens per verified node
    state = dict(prompt_set="p", split="test", category="all", temperature=0.0, batch_size=1)
    report = {"config": {}, "versions": {}, "hardware": {}, "runs": [run_record("eagle3-tree", m, gamma=8, **state)]}
    assert check_report_consistency(report) == []  # tail sum over depths: tau = 1 + sum(survival)
    report["runs"][0]["survival"] = [2 / 3, 2 / 3, 1 / 3, 0.0]
    assert any("tail-sum" in v for v in check_report_consistency(report))


def test_tree_defaults_follow_the_gamma_mode(workspace, heads, tmp_path):  # noqa: F811
    assert _tree_args(workspace, heads, tmp_path / "d1", "--gamma", "3").tree_tokens == (DEFAULT_TREE_TOKENS,)
    plan = _tree_args(workspace, heads, tmp_path / "d2", "--gamma", "auto", "--tree-depth", "6", "--tree-topk", "4")
    assert plan.tree_tokens == DEFAULT_TREE_AXIS and plan.axis("eagle3-tree") == DEFAULT_TREE_AXIS
    assert plan.tree_shape(2) == (2, 4, 2) and plan.tree_shape(16) == (6, 4, 16)


@pytest.mark.parametrize("extra, match", [
    (["--tree-topk", "0"], "--tree-topk"),
    (["--tree-topk", "17"], "--tree-topk"),
    (["--tree-depth", "0"], "--tree-depth"),
    (["--tree-tokens", "0"], "--tree-tokens"),
    (["--tree-tokens", "x"], "--tree-tokens"),
    (["--tree-tokens", "65"], "--tree-tokens"),
    (["--tree-tokens", "4,8"], "--tree-tokens: a fixed --gamma"),
    (["--tree-topk", "1", "--tree-tokens", "5"], "--tree-tokens 5 exceeds the 3 nodes"),
])
def test_bad_tree_options_are_named(workspace, heads, tmp_path, extra, match):  # noqa: F811
    with pytest.raises(ValueError, match=match):
        run_eval(_tree_args(workspace, heads, tmp_path / "o", *extra))


def test_tree_methods_need_their_head(workspace, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--methods eagle3-tree needs --draft"):
        run_eval(_args(workspace, tmp_path / "o", "--methods", "vanilla,eagle3-tree"))
    with pytest.raises(ValueError, match="--methods eagle1-tree needs --eagle1"):
        run_eval(_args(workspace, tmp_path / "o", "--methods", "vanilla,eagle1-tree"))
