"""The demo pipeline end to end at toy sizes: every stage runs, the report is complete and consistent,
and a second run reuses what is cached."""

import json

import pytest

from eaglehead.cli import main


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--size", "tiny", "--out", str(out)]) == 0
    return out


def test_demo_writes_a_complete_consistent_report(demo_run):
    summary = json.loads((demo_run / "report.json").read_text())
    assert set(summary["reports"]) == {"stdlib-heldout", "humaneval"}
    for name in summary["reports"]:
        rep = json.loads((demo_run / f"eval_{name}" / "report.json").read_text())
        methods = {r["method"] for r in rep["runs"]}
        assert {"vanilla", "hf-generate", "eagle3", "eagle1", "draft-lm", "prompt-lookup", "hf-assisted"} <= methods
        assert rep["consistency_violations"] == []
        assert rep["identity"]["all_identical"] is True  # greedy: every exact method equals vanilla
        assert {r["temperature"] for r in rep["runs"]} == {0.0, 1.0}  # the tiny size runs both everywhere
        assert list((demo_run / f"eval_{name}").glob("*.png"))
    assert summary["first_token_check"]["rows"] > 0
    assert "goal" in (demo_run / "report.md").read_text()
    assert (demo_run / "eagle3" / "export_eagle3" / "config.json").is_file()
    # Both heads trained from one feature cache, removed once they were done.
    for kind in ("eagle3", "eagle1"):
        saved = (demo_run / kind / "config.yaml").read_text()
        assert f"dir: {demo_run / 'features'}" in saved
    assert not (demo_run / "features").exists()


def test_second_run_reuses_cache_and_rebuilds_damaged_files(demo_run, capsys):
    capsys.readouterr()
    (demo_run / "eagle1" / "head" / "model.safetensors").write_bytes(b"corrupt")
    assert main(["demo", "--size", "tiny", "--out", str(demo_run)]) == 0
    log = capsys.readouterr().out
    assert "eagle3 head: cached" in log
    assert "draft LM: cached" in log
    assert "eagle1 head: cached copy is damaged" in log
    assert "features: running the target once" in log  # rebuilt for the retrained head, then removed
    assert not (demo_run / "features").exists()


def test_head_steps_sets_both_heads_budget(tmp_path):
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.demos.stdlib import CONFIGS, _head_config, _sizes
    from eaglehead.train.recipe import TrainConfig

    sizes = _sizes("full", head_steps=750)
    for kind in ("eagle3", "eagle1"):
        _, cfg = _head_config(tmp_path, kind, "builtin:demo-target", sizes)
        assert cfg.optim.max_steps == 750 and cfg.head.type == kind
    _, default = _head_config(tmp_path, "eagle3", "builtin:demo-target", _sizes("full"))
    assert default.optim.max_steps == load_config(TrainConfig, CONFIGS / "demo.yaml").optim.max_steps
    with pytest.raises(ValueError, match="--head-steps"):
        _sizes("full", head_steps=0)


def test_demo_trains_online_when_the_feature_cache_does_not_fit(tmp_path, monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - 100, 100))
    assert main(["demo", "--size", "tiny", "--out", str(tmp_path)]) == 0
    log = capsys.readouterr().out
    assert "not enough free disk space" in log and "Training with online features instead" in log
    for kind in ("eagle3", "eagle1"):
        assert "dir: null" in (tmp_path / kind / "config.yaml").read_text()  # trained online
        assert (tmp_path / kind / "head" / "model.safetensors").is_file()
    assert not (tmp_path / "features").exists() and (tmp_path / "report.json").is_file()


def test_heads_ship_with_their_recipe_key_and_are_used_only_for_it(demo_run, tmp_path, capsys):
    from eaglehead.demos.stdlib import _head_config, _sizes, head_recipe_key, ship_heads, shipped_head

    # The key ignores this machine's paths (output, target and feature directories): a shipped head matches.
    sizes = _sizes("tiny")
    keys = {head_recipe_key(_head_config(tmp_path / out, "eagle3", str(tmp_path / tgt), sizes)[1], "t")
            for out, tgt in (("a", "x"), ("b", "y"))}
    assert len(keys) == 1
    assert head_recipe_key(_head_config(tmp_path, "eagle1", "x", sizes)[1], "t") not in keys
    root = tmp_path / "assets"
    assert [p.name for p in ship_heads(demo_run, root)] == ["demo_eagle3", "demo_eagle1"]
    key = (demo_run / "eagle3" / "demo_key").read_text()
    recipe = json.loads((root / "demo_eagle3" / "recipe.json").read_text())
    assert recipe["key"] == key and "eaglehead demo --retrain" in recipe["command"] and recipe["files"]
    assert shipped_head("eagle3", key, root) == root / "demo_eagle3"
    capsys.readouterr()
    assert shipped_head("eagle3", "another-recipe", root) is None
    assert "trained from another recipe" in capsys.readouterr().out
    assert shipped_head("eagle3", key, tmp_path / "empty") is None
    with pytest.raises(ValueError, match="--overwrite"):
        ship_heads(demo_run, root)
    weights = root / "demo_eagle1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="sha256"):
        shipped_head("eagle1", (demo_run / "eagle1" / "demo_key").read_text(), root)


def test_the_shipped_heads_match_this_codes_full_size_recipe(tmp_path):
    """`make demo` uses the shipped heads only while the code's recipe key equals theirs: a config field
    added or changed without re-keying (or retraining) them would silently cost every cold demo a
    training run."""
    from eaglehead.demos.stdlib import _head_config, _sizes, head_recipe_key, shipped_head, stage_target

    sizes = _sizes("full")
    target_dir, target_key = stage_target(tmp_path, sizes)
    for kind in ("eagle3", "eagle1"):
        key = head_recipe_key(_head_config(tmp_path, kind, target_dir, sizes)[1], target_key)
        assert shipped_head(kind, key) is not None, kind


def test_a_config_field_added_after_shipping_keeps_the_key_only_at_the_value_the_heads_were_trained_with(tmp_path):
    from eaglehead.demos.stdlib import ADDED_LATER, _head_config, _sizes, head_recipe_key

    cfg = _head_config(tmp_path, "eagle3", "x", _sizes("tiny"))[1]
    key = head_recipe_key(cfg, "t")
    for (section, name), neutral in ADDED_LATER.items():
        assert getattr(getattr(cfg, section), name) == neutral
    cfg.head.layer_init = "target"
    assert head_recipe_key(cfg, "t") != key
