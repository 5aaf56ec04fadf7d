"""``eaglehead demo --target smollm2-135m-instruct`` at toy sizes with stand-ins for SmolLM2, its shipped
artifacts, MT-bench and HumanEval: the report and its tables, the asset checks (a damaged file, a missing
head), the --retrain commands, and the command line."""

import hashlib
import json
import lzma
import shutil
from pathlib import Path

import pytest
import torch

from eaglehead.builtin.mtbench import CATEGORIES
from eaglehead.builtin.shipped import file_sha256
from eaglehead.cli import build_parser, main
from eaglehead.draftheads.checkpoint import save_pretrained
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle1 import Eagle1Head
from eaglehead.draftheads.eagle3 import Eagle3Head
from tests.tiny_models import save_tiny_target

WORDS = ["sea", "wind", "code", "loop", "fox", "dog", "list", "stack"]


def _recipe(path, commands=("built by the test",)):
    names = sorted(p.name for p in path.iterdir() if p.is_file() and p.name != "recipe.json")
    (path / "recipe.json").write_text(json.dumps({"files": {n: file_sha256(path / n) for n in names},
                                                  "commands": list(commands)}))


def _data_asset(path, text):
    """A shipped chat data asset holding ``text`` (conversations.jsonl), as ship-data lays it out."""
    path.mkdir(parents=True)
    (path / "conversations.jsonl.xz").write_bytes(lzma.compress(text.encode()))
    _recipe(path)
    recipe = json.loads((path / "recipe.json").read_text())
    recipe["inputs"] = {"conversations_sha256": hashlib.sha256(text.encode()).hexdigest()}
    (path / "recipe.json").write_text(json.dumps(recipe))


def _chat(topic, n=4):
    return "".join(json.dumps({"id": f"chat-{i:06d}", "messages": [
        {"role": "user", "content": f"{topic} {i}"},
        {"role": "assistant", "content": f"def {topic}(a, b):\n    return a + b + {i}\n"}]}) + "\n" for i in range(n))


def _write_assets(root, target, tok):
    torch.manual_seed(1)
    save_pretrained(Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=len(tok))),
                    root / "smollm2_eagle3")
    save_pretrained(Eagle1Head(Eagle1Head.config_from_target(target.config)), root / "smollm2_eagle1")
    save_tiny_target(root / "smollm2_draft_lm", seed=3, layers=1)
    for name in ("smollm2_eagle3", "smollm2_eagle1", "smollm2_draft_lm"):
        _recipe(root / name)
    _data_asset(root / "smollm2_data", _chat("add"))  # both chat data files, their ids alike as in the real ones
    _data_asset(root / "smollm2_data_tasks", _chat("task"))


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("smollm2")
    target, tok = save_tiny_target(root / "target")
    _write_assets(root / "assets", target, tok)
    # MT-bench-like: every category, two questions of two turns each (1 tune + 1 test per category).
    questions = [{"question_id": 81 + 2 * i + k, "category": c,
                  "turns": [f"write about the {WORDS[i]} {k}", f"now shorter, the {WORDS[(i + k) % 8]}"]}
                 for i, c in enumerate(CATEGORIES) for k in range(2)]
    (root / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    code = [{"id": f"HumanEval/{i}", "category": "code", "prompt": f"def f{i}(a, b):\n    return a"} for i in range(8)]
    (root / "humaneval.jsonl").write_text("".join(json.dumps(c) + "\n" for c in code))
    return root


def _argv(root, out, assets=None):
    return ["demo", "--target", "smollm2-135m-instruct", "--size", "tiny", "--out", str(out),
            "--model", str(root / "target"), "--assets", str(assets or root / "assets"),
            "--mt-bench", str(root / "question.jsonl"), "--humaneval", str(root / "humaneval.jsonl")]


@pytest.fixture(scope="module")
def demo_run(stand_ins, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_smollm2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))  # the turn-1 answers' cache
        assert main(_argv(stand_ins, out)) == 0
    return out


def test_report_goals_and_category_turn_table(demo_run):
    summary = json.loads((demo_run / "report.json").read_text())
    assert set(summary["reports"]) == {"mt-bench", "mt-bench-t0.7", "humaneval"}
    for name, rel in summary["reports"].items():
        rep = json.loads((demo_run / rel).read_text())
        assert rep["consistency_violations"] == [] and (demo_run / f"eval_{name}" / "report.html").is_file()
    head = json.loads((demo_run / "eval_mt-bench" / "report.json").read_text())
    assert {r["method"] for r in head["runs"]} == {"vanilla", "hf-generate", "eagle3", "eagle3-tree", "eagle1",
                                                   "draft-lm", "prompt-lookup", "hf-assisted"}
    assert summary["identity"] == {"mt-bench": True, "mt-bench-t0.7": True, "humaneval": True}
    goals = [g for g, _, _ in summary["goals"]]
    assert goals[0] == "EAGLE-3 tau >= 3.2"
    assert goals[1].startswith("EAGLE-3 time per token >= 1.6x better than the fastest non-speculative baseline")
    assert goals[2] == "stretch: >= 2.0x" and "chain ceiling" in goals[3]
    assert goals[4] == "EAGLE-3 faster than every peer (draft-lm, prompt-lookup, hf-assisted)"
    assert goals[5] == "EAGLE-3 tree tau >= 2.1 with at most 16 verified draft tokens"
    assert summary["goals"][5][1] in (True, False) and "4 tokens" in summary["goals"][5][2]  # the tiny size's tree
    assert goals[6].startswith("EAGLE-3 tau >= 1.1x the EAGLE-1") and summary["goals"][6][1] in (True, False)
    ceiling = summary["chain_ceiling"]
    assert ceiling["ceiling"] > 0 and ceiling["reached"] == pytest.approx(ceiling["achieved"] / ceiling["ceiling"])
    table = summary["eagle3_tau_by_category_and_turn"]
    assert list(table) == [*CATEGORIES, "all"]
    assert all(set(row) == {"1", "2", "all"} and all(v >= 1.0 for v in row.values()) for row in table.values())
    text = (demo_run / "report.md").read_text()
    for line in ("| goal | met | measured |", "| category | turn 1 | turn 2 | all |", "| writing |",
                 "- `eagle3` read ", "- `draft-lm` read "):
        assert line in text
    # Every MT-bench category once in the test split, both turns; the tune question is the stem one.
    assert len(summary["evaluated"]["mt-bench"]["test"]) == 8 and summary["evaluated"]["mt-bench"]["turns"] == 2
    assert summary["evaluated"]["mt-bench-t0.7"]["test"] == summary["evaluated"]["mt-bench"]["test"][:1]
    check = summary["first_token_check"]
    assert check["rows"] == 60 and check["temperature"] == 0.7 and check["passed"] is True
    assert {"eval_mt-bench", "eval_mt-bench-t0.7", "eval_humaneval", "verify_assets", "conversion",
            "first_token_check"} <= set(summary["timings_s"])


def test_goals_of_any_report_from_the_command_line(demo_run, capsys, tmp_path):
    from eaglehead.demos.smollm2 import main as tool

    assert tool(["goals", "--report", str(demo_run / "eval_mt-bench" / "report.json")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("| goal | met | measured |\n") and "| EAGLE-3 tau >= 3.2 |" in text
    # Both heads' tables, every category; the EAGLE-3 one is the demo summary's.
    assert "### EAGLE-3 tau per category and turn" in text and "### EAGLE-1 (the ablation) tau per" in text
    assert text.count("| writing |") == 2
    summary = (demo_run / "report.md").read_text()
    e3_table = text[text.index("### EAGLE-3"):text.index("### EAGLE-1")].strip()
    assert e3_table in summary
    with pytest.raises(ValueError, match="--report .*no such file"):
        tool(["goals", "--report", str(tmp_path / "none.json")])


def test_a_report_without_peers_does_not_pass_the_peer_goal(demo_run):
    import json

    from eaglehead.demos.smollm2 import PEERS, goals

    report = json.loads((demo_run / "eval_mt-bench" / "report.json").read_text())
    with_peers = {g: ok for g, ok, _ in goals(report)}
    assert any(g.startswith("EAGLE-3 faster than every peer (") and ok is not None for g, ok in with_peers.items())
    report["runs"] = [r for r in report["runs"] if r["method"] not in PEERS]
    row = next(r for r in goals(report) if r[0].startswith("EAGLE-3 faster than every peer"))
    assert row[1] is None and "no peer" in row[2]


def test_a_damaged_asset_is_refused_naming_the_file(stand_ins, tmp_path, capsys):
    assets = tmp_path / "assets"
    shutil.copytree(stand_ins / "assets", assets)
    weights = assets / "smollm2_eagle3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert main(_argv(stand_ins, tmp_path / "out", assets)) == 2
    err = capsys.readouterr().err
    assert str(weights) in err and "sha256" in err
    assert not list((tmp_path / "out").glob("eval_*"))


def test_a_missing_head_stops_before_any_work_with_the_retrain_command(stand_ins, tmp_path, capsys, monkeypatch):
    import eaglehead.builtin.models as models

    def no_conversion(*args, **kwargs):
        raise AssertionError("the target was resolved before the missing head was reported")

    monkeypatch.setattr(models, "resolve_target", no_conversion)
    assets = tmp_path / "assets"
    shutil.copytree(stand_ins / "assets", assets)
    shutil.rmtree(assets / "smollm2_eagle3")
    assert main(_argv(stand_ins, tmp_path / "out", assets)) == 2
    err = capsys.readouterr().err
    assert str(assets / "smollm2_eagle3") in err
    assert "eaglehead demo --target smollm2-135m-instruct --retrain" in err
    assert not list((tmp_path / "out").glob("eval_*"))


def test_eagle1_is_optional(stand_ins, tmp_path, capsys, demo_run):
    from eaglehead.demos.smollm2 import goals
    from eaglehead.demos.smollm2_assets import locate_assets

    assets = tmp_path / "assets"
    shutil.copytree(stand_ins / "assets", assets)
    shutil.rmtree(assets / "smollm2_eagle1")
    found = locate_assets(assets, tmp_path / "out")
    assert set(found) == {"eagle3", "draft-lm"} and "no EAGLE-1 ablation" in capsys.readouterr().out
    report = json.loads((demo_run / "eval_mt-bench" / "report.json").read_text())
    report["runs"] = [r for r in report["runs"] if r["method"] != "eagle1"]
    assert goals(report)[-1][1:] == (None, "no EAGLE-1 head: not evaluated")


def test_retrain_runs_the_recipe_commands_and_packages_the_heads(stand_ins, tmp_path):
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.demos.smollm2 import _base_sizes
    from eaglehead.demos.smollm2_assets import CONFIG, DRAFT_LM_CONFIG, retrain, verify_asset
    from eaglehead.pretrain.draft_lm import DraftLMConfig
    from eaglehead.train.recipe import VOCAB_FILE, TrainConfig

    ran = []

    def fake_run(cmd, log):  # stands in for the subprocesses: prepare counts, the trainings write their models
        ran.append(cmd)
        if cmd[:3] == ["python", "-m", "eaglehead.pretrain.draft_lm"]:
            assert load_config(DraftLMConfig, DRAFT_LM_CONFIG, cmd[5:]).steps == 2  # valid overrides
            shutil.copytree(stand_ins / "assets" / "smollm2_draft_lm", cmd[-1].split("=", 1)[1], dirs_exist_ok=True)
            return
        out_dir = tmp_path / "retrain" / next(a for a in cmd if a.startswith("output_dir=")).split("/")[-1]
        if cmd[:2] == ["eaglehead", "prepare"]:  # it writes the counts to output_dir and beside the features
            feats = Path(cmd[cmd.index("--cache-features") + 1])
            for d in (out_dir, feats):
                d.mkdir(parents=True, exist_ok=True)
                (d / VOCAB_FILE).write_bytes(b"token counts")
        else:  # both heads read the draft vocabulary's counts from beside the shared features
            assert not (out_dir / VOCAB_FILE).exists() and (tmp_path / "retrain" / "features" / VOCAB_FILE).is_file()
            shutil.copytree(stand_ins / "assets" / f"smollm2_{out_dir.name}", out_dir / "head")

    extra = _base_sizes("tiny")["retrain"]
    retrain(tmp_path, stand_ins / "assets", "builtin:smollm2-135m-instruct", extra, run=fake_run)
    assert [c[:2] for c in ran] == [["eaglehead", "prepare"], ["accelerate", "launch"], ["accelerate", "launch"],
                                    ["python", "-m"]]
    # Both shipped data files, unpacked each to its own directory, in the recipe's order.
    data = [tmp_path / "data" / name / "conversations.jsonl" for name in ("smollm2_data", "smollm2_data_tasks")]
    assert [p.read_text() for p in data] == [_chat("add"), _chat("task")]
    assert f"data.sources={json.dumps([str(p) for p in data])}" in ran[0]
    prepared = load_config(TrainConfig, CONFIG, ran[0][ran[0].index("--cache-features") + 2:])
    assert prepared.data.sources == [str(p) for p in data]
    draft_cfg = load_config(DraftLMConfig, DRAFT_LM_CONFIG, ran[3][5:])
    assert draft_cfg.data == [str(p) for p in data] and f"data={json.dumps([str(p) for p in data])}" in ran[3]
    for cmd, kind in zip(ran[1:], ("eagle3", "eagle1")):
        cfg = load_config(TrainConfig, CONFIG, cmd[cmd.index(str(CONFIG)) + 1:])  # the commands are valid configs
        assert cfg.head.type == kind and cfg.optim.max_steps == 2 and cfg.head.draft_vocab_size == 128
        assert cfg.features.dir == str(tmp_path / "retrain" / "features")
        recipe = verify_asset(tmp_path / "assets" / f"smollm2_{kind}")
        assert "config.json" in recipe["files"] and recipe["commands"][1].startswith("accelerate launch --config_file")
        assert recipe["inputs"]["data_sha256s"] == [file_sha256(p) for p in data]
    assert "head.eagle1_vocab=draft" in ran[2]
    verify_asset(tmp_path / "assets" / "smollm2_draft_lm")
    retrain(tmp_path, stand_ins / "assets", "builtin:smollm2-135m-instruct", extra, run=fake_run)
    assert [c[:2] for c in ran[4:]] == [["python", "-m"]]  # heads unchanged: kept; the draft LM checks itself

    def trainer(data_files, out_dir, target):
        assert data_files == data
        shutil.copytree(stand_ins / "assets" / "smollm2_draft_lm", out_dir, dirs_exist_ok=True)
        return [f"train-draft-lm {' '.join(map(str, data_files))} {out_dir}"]

    retrain(tmp_path, stand_ins / "assets", "builtin:smollm2-135m-instruct", extra, run=fake_run,
            draft_lm_trainer=trainer)
    built = verify_asset(tmp_path / "assets" / "smollm2_draft_lm")
    assert built["commands"][0].startswith("train-draft-lm") and built["inputs"]["data_sha256s"] == [
        file_sha256(p) for p in data]


def test_a_missing_data_asset_is_named_with_the_commands_that_build_it(stand_ins, tmp_path):
    """Without the second chat data file (smollm2_data_tasks), --retrain and ship-run stop with the
    named MissingArtifactError and the commands that build it, before any work."""
    from eaglehead.builtin.shipped import MissingArtifactError
    from eaglehead.demos.smollm2 import _base_sizes
    from eaglehead.demos.smollm2_assets import retrain
    from eaglehead.demos.smollm2_ship import ship_run

    assets = tmp_path / "assets"
    shutil.copytree(stand_ins / "assets", assets)
    shutil.rmtree(assets / "smollm2_data_tasks")

    def no_run(cmd, log):
        raise AssertionError(f"ran {cmd} without the second data file")

    hint = (rf"{assets / 'smollm2_data_tasks'} is not shipped \(no recipe.json\); build it with: eaglehead prepare "
            r"--data-config \S*smollm2-135m-instruct-data-tasks.yaml, then python -m eaglehead.demos.smollm2 "
            rf"ship-data --kind data-tasks --chat-dir runs/smollm2-135m-instruct/chat-tasks --assets {assets}")
    with pytest.raises(MissingArtifactError, match=hint):
        retrain(tmp_path / "out", assets, "builtin:smollm2-135m-instruct", _base_sizes("tiny")["retrain"], run=no_run)
    with pytest.raises(MissingArtifactError, match=hint):
        ship_run(tmp_path / "no-run", "eagle3", assets, overwrite=True)


def test_demo_target_option(capsys):
    parser = build_parser()
    args = parser.parse_args(["demo", "--target", "smollm2-135m-instruct", "--retrain"])
    assert (args.target, args.retrain, args.out) == ("smollm2-135m-instruct", True, None)
    args = parser.parse_args(["demo"])
    assert (args.target, args.retrain) == ("demo", False)
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--target", "llama"])
    assert "invalid choice" in capsys.readouterr().err
    assert main(["demo", "--model", "some/dir"]) == 2  # a stand-in option of the SmolLM2 demo only
    assert "--model: only for --target smollm2-135m-instruct" in capsys.readouterr().err


def test_ship_data_compresses_verifies_and_refuses_to_overwrite(tmp_path):
    from eaglehead.demos.smollm2 import main as ship_main
    from eaglehead.demos.smollm2_assets import DATA_FILE, unpack_data

    chat = tmp_path / "chat"
    chat.mkdir()
    rows = [{"id": f"chat-{i}", "messages": [{"role": "user", "content": f"q{i}"},
                                             {"role": "assistant", "content": "a " * 50}]} for i in range(20)]
    (chat / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {"file": "conversations.jsonl", "sha256": file_sha256(chat / "conversations.jsonl"), "conversations": 20}
    (chat / "manifest.json").write_text(json.dumps(manifest))
    assets = tmp_path / "assets"
    assert ship_main(["ship-data", "--chat-dir", str(chat), "--assets", str(assets)]) == 0
    shipped = assets / "smollm2_data"
    recipe = json.loads((shipped / "recipe.json").read_text())
    assert recipe["inputs"]["conversations_sha256"] == manifest["sha256"]
    assert "eaglehead prepare --data-config" in recipe["commands"][0]
    assert (shipped / DATA_FILE).stat().st_size < (chat / "conversations.jsonl").stat().st_size
    path, digest = unpack_data(shipped, tmp_path / "out")  # what --retrain reads back: byte-identical
    assert path == tmp_path / "out" / "data" / "smollm2_data" / "conversations.jsonl"
    assert path.read_bytes() == (chat / "conversations.jsonl").read_bytes() and digest == manifest["sha256"]
    with pytest.raises(ValueError, match="--overwrite"):
        ship_main(["ship-data", "--chat-dir", str(chat), "--assets", str(assets)])
    (chat / "conversations.jsonl").write_text("changed\n")
    with pytest.raises(ValueError, match="sha256 differs"):
        ship_main(["ship-data", "--chat-dir", str(chat), "--assets", str(assets), "--overwrite"])
    assert not list(assets.glob("*.build*"))


def test_ship_data_of_the_task_chat_is_the_second_data_asset(tmp_path):
    from eaglehead.demos.smollm2 import main as ship_main
    from eaglehead.demos.smollm2_assets import DATA_ASSETS, DATA_FILE, RECIPE_DATA, unpack_data

    assert RECIPE_DATA["small"] == ("data", "data-tasks") and DATA_ASSETS == RECIPE_DATA["large"]
    assert DATA_ASSETS == ("data", "data-tasks", "data-large", "data-large-tasks")
    chat = tmp_path / "chat-tasks"
    chat.mkdir()
    (chat / "conversations.jsonl").write_text(_chat("task", 20))
    manifest = {"file": "conversations.jsonl", "sha256": file_sha256(chat / "conversations.jsonl"), "conversations": 20}
    (chat / "manifest.json").write_text(json.dumps(manifest))
    (chat / "config.json").write_text(json.dumps({"target": "builtin:smollm2-135m-instruct"}))
    assets = tmp_path / "assets"
    with pytest.raises(ValueError, match=r"no such file; write the data-tasks chat data first with: eaglehead "
                                         r"prepare --data-config \S*smollm2-135m-instruct-data-tasks.yaml"):
        ship_main(["ship-data", "--kind", "data-tasks", "--chat-dir", str(tmp_path / "none"), "--assets", str(assets)])
    assert ship_main(["ship-data", "--kind", "data-tasks", "--chat-dir", str(chat), "--assets", str(assets)]) == 0
    assert sorted(p.name for p in assets.iterdir()) == ["smollm2_data_tasks"]  # the first data asset untouched
    shipped = assets / "smollm2_data_tasks"
    recipe = json.loads((shipped / "recipe.json").read_text())
    assert recipe["commands"] == ["eaglehead prepare --data-config configs/smollm2-135m-instruct-data-tasks.yaml"]
    assert recipe["inputs"]["conversations_sha256"] == manifest["sha256"] and DATA_FILE in recipe["files"]
    assert json.loads((shipped / "data_config.json").read_text())["target"] == "builtin:smollm2-135m-instruct"
    path, digest = unpack_data(shipped, tmp_path / "out", "data-tasks")
    assert path == tmp_path / "out" / "data" / "smollm2_data_tasks" / "conversations.jsonl"
    assert path.read_bytes() == (chat / "conversations.jsonl").read_bytes() and digest == manifest["sha256"]
    with pytest.raises(ValueError, match="--overwrite to replace the shipped data-tasks"):
        ship_main(["ship-data", "--kind", "data-tasks", "--chat-dir", str(chat), "--assets", str(assets)])
    with pytest.raises(SystemExit):
        ship_main(["ship-data", "--kind", "eagle3", "--chat-dir", str(chat), "--assets", str(assets)])


def test_ship_built_copies_verified_artifacts(stand_ins, tmp_path):
    from eaglehead.demos.smollm2_ship import ship_built

    out = tmp_path / "out"
    shutil.copytree(stand_ins / "assets", out / "assets")
    root = tmp_path / "shipped"
    shipped = ship_built(out, root, ("eagle3", "draft-lm"))
    assert [p.name for p in shipped] == ["smollm2_eagle3", "smollm2_draft_lm"]
    for p in shipped:
        assert json.loads((p / "recipe.json").read_text())["commands"] == ["built by the test"]
    with pytest.raises(ValueError, match="--overwrite"):
        ship_built(out, root, ("eagle3",))
    weights = out / "assets" / "smollm2_eagle3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="sha256"):
        ship_built(out, root, ("eagle3",), overwrite=True)


@pytest.mark.parametrize("kind, conversations, min_answer_tokens",
                         [("data", 1678, 400_000), ("data-tasks", 640, 200_000), ("data-large", 13917, 5_000_000),
                          ("data-large-tasks", 8000, 2_900_000)])
def test_the_shipped_chat_data_is_intact_and_large_enough(kind, conversations, min_answer_tokens, tmp_path):
    """Each shipped SmolLM2 chat data set: its hashes hold, it unpacks (an archived one: its shards assemble,
    nothing sampled) to the conversations its manifest hashed, it was written by the target, and the small two
    carry the small recipe's 600k+ answer tokens, all four the large recipe's 8M+."""
    from eaglehead.demos.smollm2 import ASSETS
    from eaglehead.demos.smollm2_assets import ARCHIVE_CONFIG, ARCHIVED_DATA, assets_root, unpack_data, verify_asset

    shipped = assets_root() / ASSETS[kind]
    recipe = verify_asset(shipped)
    if kind in ARCHIVED_DATA:
        manifest, data_config = recipe["manifest"], json.loads(lzma.decompress((shipped / ARCHIVE_CONFIG).read_bytes()))
    else:
        manifest = json.loads((shipped / "manifest.json").read_text())
        data_config = json.loads((shipped / "data_config.json").read_text())
    assert manifest["answer_tokens"] >= min_answer_tokens
    assert data_config["target"] == "builtin:smollm2-135m-instruct"
    path, _ = unpack_data(shipped, tmp_path, kind)
    assert file_sha256(path) == manifest["sha256"] == recipe["inputs"]["conversations_sha256"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == manifest["conversations"] == conversations
    assert sum(sum(m["role"] == "user" for m in r["messages"]) == 2 for r in rows) == manifest["followups"]


def test_the_shipped_smollm2_head_and_draft_lm_are_this_recipes_on_the_shipped_data():
    """The shipped EAGLE-3 head and draft LM verify by hash, were trained on both shipped chat data files in
    order, and the head's recorded config is the README recipe's (a config change that alters training makes
    this fail: retrain and reship)."""
    import yaml
    from safetensors import safe_open

    from eaglehead.builtin.typed_config import dump_config, load_config
    from eaglehead.demos.smollm2 import ASSETS
    from eaglehead.demos.smollm2_assets import (DRAFT_LM_CONFIG, RECIPE_CONFIGS, RECIPE_DATA, assets_root,
                                                verify_asset, verify_data)
    from eaglehead.draftheads.checkpoint import load_head
    from eaglehead.pretrain.draft_lm import DraftLMConfig
    from eaglehead.train.recipe import TrainConfig

    root = assets_root()
    recipe = verify_asset(root / ASSETS["eagle3"])
    name = recipe.get("recipe", "small")  # heads shipped before the large recipe existed are the small one's
    data_shas = [r["inputs"]["conversations_sha256"] for r in verify_data(root, RECIPE_DATA[name])]
    assert recipe["inputs"]["data_sha256s"] == data_shas
    shipped = yaml.safe_load(recipe["config"])
    assert recipe["results"]["steps"] == shipped["optim"]["max_steps"]
    argv = recipe["launches"][-1]["argv"]  # the recipe's config with the overrides of the run's last launch
    config = argv.index("--config")
    assert Path(argv[config + 1]).name == RECIPE_CONFIGS[name].name
    current = dump_config(load_config(TrainConfig, RECIPE_CONFIGS[name], argv[:config] + argv[config + 2:]))
    for section, values in shipped.items():
        if isinstance(values, dict):
            assert {k: current[section].get(k) for k in values} == values, section
        else:
            assert current[section] == values, section
    head = load_head(root / ASSETS["eagle3"])
    assert head.config.fused_layer_ids == [2, 15, 27] and head.config.draft_vocab_size == 8192
    assert head.config.target_name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with safe_open(str(root / ASSETS["eagle3"] / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys() if k not in ("d2t", "t2d")} == {"F16"}
    lm = verify_asset(root / ASSETS["draft-lm"])
    assert [f["sha256"] for f in lm["inputs"]["data"]["files"]] == \
        [r["inputs"]["conversations_sha256"] for r in verify_data(root, RECIPE_DATA["small"])]
    want = load_config(DraftLMConfig, DRAFT_LM_CONFIG)
    assert {k: lm["inputs"]["model"]["config"][k] for k in ("num_hidden_layers", "hidden_size")} == \
        {"num_hidden_layers": want.layers, "hidden_size": want.hidden}
    assert lm["inputs"]["model"]["config"]["vocab_size"] == 49152


def test_ship_run_packages_a_finished_recipe_run_in_float16(stand_ins, tmp_path):
    """A run of the README's recipe (here 2 steps on a tiny target, on both shipped chat data files) ships as
    the EAGLE-3 layout in float16, with its commands, config, launches, data hashes and metrics; runs on other
    data, on the first data file only or on both in the wrong order, unfinished runs and occupied
    destinations are refused."""
    import yaml
    from safetensors import safe_open

    from eaglehead.builtin.typed_config import load_config
    from eaglehead.demos.smollm2_assets import verify_asset
    from eaglehead.demos.smollm2_ship import ship_run
    from eaglehead.draftheads.checkpoint import head_layout, load_head
    from eaglehead.train.recipe import TrainConfig
    from eaglehead.train.trainer import train

    chat, tasks = tmp_path / "chat" / "conversations.jsonl", tmp_path / "chat-tasks" / "conversations.jsonl"
    for path, verb in ((chat, "count to"), (tasks, "name")):
        rows = [{"messages": [{"role": "user", "content": f"{verb} {i}"},
                              {"role": "assistant", "content": " ".join(WORDS[: 2 + i % 6])}]} for i in range(6)]
        path.parent.mkdir()
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = tmp_path / "assets"
    _data_asset(root / "smollm2_data", chat.read_text())
    _data_asset(root / "smollm2_data_tasks", tasks.read_text())

    def run_of(kind, name, data=(chat, tasks)):
        cfg = {"output_dir": str(tmp_path / name), "model": {"target": str(stand_ins / "target")},
               "data": {"sources": [str(p) for p in data], "max_length": 64},
               "head": {"type": kind, "draft_vocab_size": 64, **({"fused_layer_ids": None} if kind == "eagle1" else {})},
               "rollout": {"depth": 2, "deep_stride": 2}, "optim": {"max_steps": 2, "micro_batch_size": 2},
               "save_every": 0, "log_every": 1}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        from eaglehead.train.prepare import prepare

        prepare(load_config(TrainConfig, path))
        train(load_config(TrainConfig, path))
        return tmp_path / name

    e3 = run_of("eagle3", "e3")
    dest = ship_run(e3, "eagle3", root)
    got = verify_asset(dest)
    assert head_layout(dest) == "eagle3" and got["inputs"]["data_sha256s"] == [file_sha256(chat), file_sha256(tasks)]
    assert got["results"]["steps"] == 2 and got["launches"][0]["start_step"] == 0 and got["commit"] is not None
    assert got["commands"][1].startswith("accelerate launch --config_file configs/accelerate/cpu.yaml -m eaglehead.train")
    with safe_open(str(dest / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys() if f.get_tensor(k).is_floating_point()} == {torch.float16}
    assert load_head(dest).config.draft_vocab_size == 64
    with pytest.raises(ValueError, match="--overwrite"):
        ship_run(e3, "eagle3", root)
    e1 = run_of("eagle1", "e1")
    assert head_layout(ship_run(e1, "eagle1", root)) == "eaglehead"
    with pytest.raises(ValueError, match="not eagle3"):
        ship_run(e1, "eagle3", root, overwrite=True)
    other = tmp_path / "other.jsonl"
    other.write_text(chat.read_text().replace("count", "list"))
    with pytest.raises(ValueError, match=rf"data.sources\[0\] {other} has sha256 {file_sha256(other)}: not the "
                                         r"shipped chat data \(position 0 must be smollm2_data"):
        ship_run(run_of("eagle3", "e3other", (other, tasks)), "eagle3", root, overwrite=True)

    def sources_changed(name, sources):  # the finished run, as if trained on other data.sources
        run = tmp_path / name
        shutil.copytree(e3, run)
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["data"]["sources"] = [str(p) for p in sources]
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
        return run

    with pytest.raises(ValueError, match=r"its data.sources lists 1 file\(s\) .*: not the shipped chat data; "
                                         r"expected the shipped chat data, 2 file\(s\) in this order: smollm2_data "):
        ship_run(sources_changed("first-only", [chat]), "eagle3", root, overwrite=True)
    with pytest.raises(ValueError, match=rf"data.sources\[0\] {tasks} has sha256 {file_sha256(tasks)}: the shipped "
                                         r"smollm2_data_tasks, in the wrong order \(position 0 must be smollm2_data,"):
        ship_run(sources_changed("swapped", [tasks, chat]), "eagle3", root, overwrite=True)
    assert verify_asset(dest)["inputs"]["data_sha256s"] == got["inputs"]["data_sha256s"]  # the refusals left it
    relaunched = tmp_path / "relaunched"  # finished, then launched again with a longer horizon: not done
    shutil.copytree(e3, relaunched)
    cfg = yaml.safe_load((relaunched / "config.yaml").read_text())
    cfg["optim"]["max_steps"] = 4
    (relaunched / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match="finished at step 2, but its config.yaml .* optim.max_steps 4"):
        ship_run(relaunched, "eagle3", root, overwrite=True)
    (e3 / "summary.json").unlink()
    with pytest.raises(ValueError, match="has not finished"):
        ship_run(e3, "eagle3", root, overwrite=True)



def test_an_archived_data_asset_ships_its_shards_and_unpacks_by_assembling_them(tmp_path, monkeypatch):
    """The large chat data sets ship as their data directory's shards (``ship-data --kind data-large``): the
    recipe lists every shard's sha256 and the conversations' sha256; unpacking restores the shards and assembles
    the same conversations byte for byte without sampling; a damaged shard, another run's extra shard and a
    second ship without --overwrite are refused by name."""
    import yaml

    from eaglehead.builtin.typed_config import dump_config
    from eaglehead.datagen import chat_data as cd
    from eaglehead.datagen import pipeline as datagen
    from eaglehead.demos import smollm2_assets as sa
    from eaglehead.demos.smollm2_ship import ship_data
    from tests.datagen.test_pipeline import _cfg

    monkeypatch.setattr(cd, "clean_user_turn", lambda text, **kw: text.strip() or None)  # an untrained model's turns
    target = tmp_path / "target"
    save_tiny_target(target, seed=3, layers=2)
    chat = tmp_path / "chat-large"
    cfg = _cfg(str(target), chat)
    manifest = datagen.run(cfg)
    config = tmp_path / "data-large.yaml"
    config.write_text(yaml.safe_dump(dump_config(cfg)))
    monkeypatch.setitem(sa.DATA_CONFIGS, "data-large", config)
    dest = tmp_path / "assets" / "smollm2_data_large"
    assert ship_data(chat, dest, kind="data-large") == dest
    recipe = sa.verify_asset(dest)
    shards = sorted(str(p.relative_to(chat)) + ".xz" for p in chat.rglob("*-0*.jsonl"))
    assert sorted(recipe["files"]) == sorted(["config.json.xz", *shards])
    assert recipe["inputs"]["conversations_sha256"] == manifest["sha256"]
    assert recipe["commands"][1] == "eaglehead prepare --assemble-only --data-config configs/data-large.yaml"
    calls = {"n": 0}
    monkeypatch.setattr(datagen, "sample_stream", lambda *a, **k: calls.update(n=calls["n"] + 1))
    path, digest = sa.unpack_data(dest, tmp_path / "out", "data-large")
    assert path.read_bytes() == (chat / "conversations.jsonl").read_bytes() and digest == manifest["sha256"]
    assert calls["n"] == 0
    assert sa.unpack_data(dest, tmp_path / "out", "data-large") == (path, digest)  # stamped: not assembled again
    with pytest.raises(ValueError, match="recipe.json.*--overwrite to replace the shipped data-large"):
        ship_data(chat, dest, kind="data-large")
    assert ship_data(chat, dest, kind="data-large", overwrite=True) == dest
    extra = dest / "answer" / "answer-00099.jsonl.xz"
    extra.write_bytes(lzma.compress(b"{}\n"))
    with pytest.raises(ValueError, match=r"holds 1 archived file\(s\) that .* does not \(answer/answer-00099"):
        ship_data(chat, dest, kind="data-large", overwrite=True)
    extra.unlink()
    shard = dest / shards[0]
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match=rf"{shard} does not match its sha256 .*ship-data --kind data-large"):
        sa.unpack_data(dest, tmp_path / "out2", "data-large")


def test_the_large_recipe_ships_with_the_commands_that_rebuild_it(stand_ins, tmp_path):
    """A large-recipe run's recipe.json: the data commands (decompress the small sets, restore and assemble the
    archived ones) and one training command from the last launch (processes, threads, the annealing max_steps);
    the large recipe needs its archived data assets, and eagle3-plain refuses an EAGLE 3.1 run."""
    import yaml

    from eaglehead.builtin.typed_config import load_config
    from eaglehead.demos.smollm2_ship import _run_commands, ship_run
    from eaglehead.train.recipe import TrainConfig

    cfg = load_config(TrainConfig, Path(__file__).resolve().parents[2] / "configs" / "smollm2-135m-instruct-large.yaml")
    launch = {"argv": ["--config", "configs/smollm2-135m-instruct-large.yaml", "optim.micro_batch_size=4",
                       "optim.max_steps=3600"], "processes": 2, "threads": 1}
    commands = _run_commands("large", cfg, launch)
    assert commands[0] == ("mkdir -p runs/smollm2-135m-instruct/chat && xz -dc builtin/assets/smollm2_data/"
                           "conversations.jsonl.xz > runs/smollm2-135m-instruct/chat/conversations.jsonl")
    assert commands[2] == ("python -m eaglehead.datagen.archive unpack builtin/assets/smollm2_data_large "
                           "runs/smollm2-135m-instruct/chat-large && eaglehead prepare --assemble-only --data-config "
                           "configs/smollm2-135m-instruct-data-large.yaml")
    assert commands[4] == ("OMP_NUM_THREADS=1 accelerate launch --config_file configs/accelerate/cpu_ddp.yaml "
                           "--num_processes 2 -m eaglehead.train --config configs/smollm2-135m-instruct-large.yaml "
                           "optim.micro_batch_size=4 optim.max_steps=3600")
    assert len(commands) == 5
    root = tmp_path / "assets"  # the stand-ins' heads and their two small data sets, none of the large ones
    shutil.copytree(stand_ins / "assets", root)
    with pytest.raises(ValueError, match=r"smollm2_data_large is not shipped .*ship-data --kind data-large"):
        ship_run(tmp_path / "no-run", "eagle3", root, recipe="large", overwrite=True)
    with pytest.raises(ValueError, match="recipe 'large': the draft LM has one recipe, small"):
        ship_run(tmp_path / "no-run", "draft-lm", root, recipe="large", overwrite=True)
    run = tmp_path / "e31"
    run.mkdir()
    cfg31 = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "smollm2-135m-instruct.yaml").read_text())
    cfg31["head"].update(fc_norm=True, norm_output=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg31))
    (run / "summary.json").write_text(json.dumps({"step": cfg31["optim"]["max_steps"]}))
    with pytest.raises(ValueError, match=r"holds an EAGLE 3\.1 head \(head.fc_norm True, head.norm_output True\); "
                                         "eagle3-plain is the head llama.cpp runs"):
        ship_run(run, "eagle3-plain", root, overwrite=True)


def test_llamacpp_reads_the_plain_head_when_one_is_shipped_beside_a_31_head(tmp_path):
    from eaglehead.demos.smollm2_assets import llamacpp_head

    for name in ("smollm2_eagle3", "smollm2_eagle3_plain"):
        (tmp_path / name).mkdir()
    assert llamacpp_head(tmp_path) == tmp_path / "smollm2_eagle3"  # no plain head shipped (no recipe.json)
    (tmp_path / "smollm2_eagle3_plain" / "recipe.json").write_text("{}")
    assert llamacpp_head(tmp_path) == tmp_path / "smollm2_eagle3_plain"
