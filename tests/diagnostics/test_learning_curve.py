"""The learning-curve tool on real snapshots of tiny runs: every snapshot measured once, as head_accuracy
measures it; a new snapshot alone on the next call; the verdict on curves of known slope; the figure."""

import json
import shutil

import pytest

from eaglehead.builtin.models import load_target
from eaglehead.builtin.typed_config import load_config
from eaglehead.diagnostics import head_accuracy as ha
from eaglehead.diagnostics import learning_curve as lc
from eaglehead.train.recipe import TrainConfig
from eaglehead.train.trainer import train
from tests.train.tiny_run import make_workspace, write_config

TEXTS = ["def add(a, b):\n    return a + b\n", "The quick brown fox jumps over the lazy dog."]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An EAGLE-3 and an EAGLE-1 run of 4 steps, each with snapshots at steps 2 and 4, and a prompt set."""
    root = make_workspace(tmp_path_factory.mktemp("curve"))
    train(load_config(TrainConfig, write_config(root, "e3")))
    train(load_config(TrainConfig, write_config(root, "e1", **{"head.type": "eagle1"})))
    prompts = root / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "category": "c", "prompt": t}) + "\n"
                               for i, t in enumerate(TEXTS)))
    return root


def args(root, out, *more):
    return ["--run", str(root / "e3"), "--run", str(root / "e1"), "--target", str(root / "target"), "--prompts",
            str(root / "p.jsonl"), "--max-new-tokens", "8", "--depth", "2", "--out", str(out), *more]


def test_measures_each_snapshot_once_as_head_accuracy_does(runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "curve"
    measured = []
    real = lc.agreement_records
    monkeypatch.setattr(lc, "agreement_records", lambda t, d, dirs, *a: measured.extend(dirs) or real(t, d, dirs, *a))
    assert lc.main(args(runs, out)) == 0
    assert sorted(measured) == sorted(str(runs / r / "snapshots" / f"step_{s}") for r in ("e3", "e1") for s in (2, 4))
    curve = json.loads((out / "curve.json").read_text())
    assert [c["head_type"] for c in curve["runs"]] == ["EAGLE-3", "EAGLE-1"]
    e3 = curve["runs"][0]["points"]
    assert [p["step"] for p in e3] == [2, 4] and 0 < e3[0]["answer_tokens"] < e3[1]["answer_tokens"]
    assert (out / "curve.png").stat().st_size > 10_000
    # The same numbers as the head_accuracy command on that snapshot (same continuations, same rollout).
    target, tok = load_target(str(runs / "target"), dtype="float32")
    ref = ha.heads_accuracy(target, tok, [str(runs / "e3" / "snapshots" / "step_4")], TEXTS, max_new_tokens=8,
                            depth=2, decode_check=False)[0]
    assert e3[1]["accuracy_by_depth"] == ref["accuracy_by_depth"]
    assert e3[1]["predicted_greedy_tau_by_gamma"] == ref["predicted_greedy_tau_by_gamma"] and e3[1]["tau"] == ref[
        "predicted_greedy_tau_by_gamma"][-1]

    # Again: nothing new, so nothing measured and the target is not even loaded.
    measured.clear()
    monkeypatch.setattr(lc, "load_target", lambda *a, **k: pytest.fail("the target was loaded with nothing to measure"))
    assert lc.main(args(runs, out)) == 0
    assert measured == [] and "0 snapshot(s) to measure, 4 measured before" in capsys.readouterr().out
    assert json.loads((out / "curve.json").read_text()) == curve

    # A new snapshot (a run that trained on): measured alone, on the cached continuations.
    new = runs / "e3" / "snapshots" / "step_6"
    shutil.copytree(runs / "e3" / "snapshots" / "step_4", new)
    snap = json.loads((new / "snapshot.json").read_text())
    (new / "snapshot.json").write_text(json.dumps({**snap, "step": 6, "answer_tokens": 2 * snap["answer_tokens"]}))
    monkeypatch.undo()
    monkeypatch.setattr(lc, "agreement_records", lambda t, d, dirs, *a: measured.extend(dirs) or real(t, d, dirs, *a))
    monkeypatch.setattr(lc, "target_continuations", lambda *a, **k: pytest.fail("continuations generated twice"))
    try:
        assert lc.main(args(runs, out)) == 0
    finally:
        shutil.rmtree(new)
    assert measured == [str(new)]
    points = json.loads((out / "curve.json").read_text())["runs"][0]["points"]
    assert [p["step"] for p in points] == [2, 4, 6] and points[2]["accuracy_by_depth"] == points[1]["accuracy_by_depth"]
    assert len((out / "measurements.jsonl").read_text().splitlines()) == 5


def test_other_settings_need_another_out(runs, tmp_path, capsys):
    out = tmp_path / "curve"
    assert lc.main(args(runs, out)) == 0
    assert lc.main(args(runs, out, "--max-prompts", "1")) == 2
    assert "max_prompts" in capsys.readouterr().err


def points(taus, start=1000):
    return [{"answer_tokens": start * 2 ** i, "tau": t} for i, t in enumerate(taus)]


def test_the_verdict_is_the_tau_gained_per_doubling_over_the_last_doubling():
    # Rising by 0.1 per doubling early, then 0.01: the last doubling (2 points at 0.5 doubling spacing) decides.
    rising = lc.flat_verdict(points([1.0, 1.1, 1.2, 1.3, 1.4]) + [{"answer_tokens": 1000 * 2 ** 3.5, "tau": 1.35}])
    assert rising["window_points"] == 3 and rising["gain_per_doubling"] == pytest.approx(0.1, abs=1e-4)
    assert not rising["flattened"]
    flat = [{"answer_tokens": int(1000 * 2 ** (k / 4)), "tau": 1.0 + 0.1 * min(k, 8) / 4 + 0.005 * k / 4}
            for k in range(17)]  # +0.1 per doubling for 2 doublings, then +0.005
    v = lc.flat_verdict(flat)
    assert v["flattened"] and v["gain_per_doubling"] == pytest.approx(0.005, abs=2e-4) and v["window_points"] == 5
    assert not lc.flat_verdict(flat, flat_gain=0.004)["flattened"]
    few = lc.flat_verdict(points([1.0, 1.0, 1.0]))  # one point per doubling: too few in the last one
    assert not few["flattened"] and few["gain_per_doubling"] is None and "need 3" in few["reason"]
    assert lc.flat_verdict([])["reason"] == "no snapshot with answer tokens"


def test_tokens_counted_from_a_late_step_are_estimated(runs, tmp_path):
    run = tmp_path / "late"
    shutil.copytree(runs / "e3" / "snapshots", run / "snapshots")
    for step in (2, 4):
        path = run / "snapshots" / f"step_{step}" / "snapshot.json"
        snap = json.loads(path.read_text())
        path.write_text(json.dumps({**snap, "answer_tokens": 100 * (step - 1), "answer_tokens_since_step": 1}))
    got = lc.run_snapshots(run)
    assert [(s["answer_tokens"], s["answer_tokens_estimated"]) for s in got] == [(200, True), (400, True)]


def test_snapshots_of_an_anneal_are_marked_and_left_out_of_the_verdict(runs, tmp_path):
    """A wsd run decaying over its last 4 of 6 steps: the snapshot at step 2 is at the peak rate, those at 4 and 6
    anneal (the rate of their last update: 3/4, 1/4). The trainer records it; for older snapshots (no such field)
    the run's logged rates tell the same. A wsd run with no decay ends at its peak: not annealing."""
    cfg = load_config(TrainConfig, write_config(runs, "wsd", **{"optim.max_steps": 6, "optim.schedule": "wsd",
                                                                 "optim.decay_steps": 4}))
    train(cfg)
    run = runs / "wsd"
    written = lc.run_snapshots(run)
    assert [(s["step"], s["annealing"], s["lr_factor"]) for s in written] == [
        (2, False, 1.0), (4, True, 0.75), (6, True, 0.25)]
    old = tmp_path / "old"  # the same run as written before snapshots recorded it
    shutil.copytree(run, old)
    for s in written:
        path = old / "snapshots" / f"step_{s['step']}" / "snapshot.json"
        snap = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in snap.items() if k not in ("annealing", "lr_factor")}))
    assert [s["annealing"] for s in lc.run_snapshots(old)] == [False, True, True]
    assert [s["annealing"] for s in lc.run_snapshots(runs / "e3")] == [False, False]  # cosine: no anneal phase
    flat = runs / "wsd0"
    train(load_config(TrainConfig, write_config(runs, "wsd0", **{"optim.schedule": "wsd", "optim.decay_steps": 0})))
    assert [s["annealing"] for s in lc.run_snapshots(flat)] == [False, False]
    for step in (2, 4):  # and as derived: the rate logged at its last step is 0, the one before is the peak
        path = flat / "snapshots" / f"step_{step}" / "snapshot.json"
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "annealing"}))
    assert [s["annealing"] for s in lc.run_snapshots(flat)] == [False, False]
    # Three points, one at the peak rate: the verdict sees that one only; the figure draws all three.
    measured = [{**s, "run": str(run), "accuracy_by_depth": [0.5, 0.4],
                 "predicted_greedy_tau_by_gamma": [1.5, 1.5 + 0.1 * i]} for i, s in enumerate(written)]
    settings = {"target": "t", "prompts": "p", "max_prompts": 2, "max_new_tokens": 8, "depth": 2}
    curve = lc.build_curve(measured, [str(run)], settings)
    c = curve["runs"][0]
    assert [p["annealing"] for p in c["points"]] == [False, True, True]
    assert c["verdict"]["window_points"] == 1 and c["verdict"]["gain_per_doubling"] is None
    png = lc.plot_curve(curve, tmp_path / "curve.png")
    assert png.stat().st_size > 10_000
