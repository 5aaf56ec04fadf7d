"""Learning-rate schedules: cosine (the default, unchanged) and warmup-stable-decay, which a long run can end on
its learning curve by resuming with a new max_steps."""

import json
import math

import pytest

from eaglehead.builtin.typed_config import load_config
from eaglehead.train.recipe import OptimConfig, TrainConfig, lr_factor
from eaglehead.train.trainer import train
from tests.train.tiny_run import make_workspace, write_config


def test_cosine_is_the_default_and_unchanged():
    opt = OptimConfig(warmup_steps=2, max_steps=10)
    assert opt.schedule == "cosine"
    assert [lr_factor(opt, s) for s in (0, 1)] == [0.5, 1.0]
    assert lr_factor(opt, 6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert lr_factor(opt, 10) == pytest.approx(0.0)


def test_wsd_holds_the_peak_then_decays_linearly_to_zero():
    opt = OptimConfig(warmup_steps=2, max_steps=10, schedule="wsd", decay_steps=4)
    assert [lr_factor(opt, s) for s in range(11)] == pytest.approx(
        [0.5, 1, 1, 1, 1, 1, 1.0, 0.75, 0.5, 0.25, 0.0])
    flat = OptimConfig(warmup_steps=1, max_steps=5, schedule="wsd")  # no decay: the peak to the end
    assert [lr_factor(flat, s) for s in range(5)] == [1.0] * 5


@pytest.mark.parametrize("kw, match", [({"decay_steps": -1, "schedule": "wsd"}, "decay_steps: expected an integer >= 0"),
                                       ({"decay_steps": 5}, "used only with schedule: wsd")])
def test_bad_decay_steps_are_refused_by_name(kw, match):
    with pytest.raises(ValueError, match=match):
        OptimConfig(**kw)


def test_a_stable_run_resumed_with_a_later_end_anneals_from_where_it_stopped(tmp_path):
    root = make_workspace(tmp_path)
    first = write_config(root, "run", **{"optim.schedule": "wsd", "optim.decay_steps": 2, "optim.max_steps": 4,
                                         "optim.warmup_steps": 1, "optim.lr": 0.01, "save_every": 4})
    train(load_config(TrainConfig, first))
    longer = write_config(root, "run", **{"optim.schedule": "wsd", "optim.decay_steps": 2, "optim.max_steps": 6,
                                          "optim.warmup_steps": 1, "optim.lr": 0.01, "save_every": 4})
    train(load_config(TrainConfig, longer))
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in rows if "lr" in r}
    # the log at step n holds the rate of the next step (lr_factor(n)): the first launch decays to 0 at its end;
    # the resumed one recomputes from the new end (the rate of its first step, lr_factor(4), is the peak again)
    assert [lrs[s] for s in (1, 2, 3, 4)] == pytest.approx([0.01, 0.01, 0.005, 0.0])
    assert [lrs[s] for s in (5, 6)] == pytest.approx([0.005, 0.0])


def test_a_resume_that_changes_what_the_run_trains_is_refused_by_key(tmp_path):
    root = make_workspace(tmp_path)
    base = {"optim.max_steps": 2, "save_every": 2}
    train(load_config(TrainConfig, write_config(root, "run", **base)))
    saved = (root / "run" / "config.yaml").read_text()
    for key, value in (("head.fc_norm", True), ("data.max_length", 48), ("seed", 3)):
        changed = write_config(root, "run", **{**base, "optim.max_steps": 4, key: value})
        with pytest.raises(ValueError, match=rf"resume: the checkpoint .*step_2 .*{key}: .* -> {value!r}"):
            train(load_config(TrainConfig, changed))
        assert (root / "run" / "config.yaml").read_text() == saved  # the run's record is not overwritten
    # A checkpoint written before a head field existed: the field counts at its default (False), still refused.
    ckpt_config = root / "run" / "checkpoints" / "step_2" / "config.yaml"
    ckpt_config.write_text(ckpt_config.read_text().replace("  fc_norm: false\n", ""))
    with pytest.raises(ValueError, match="head.fc_norm: False -> True"):
        train(load_config(TrainConfig, write_config(root, "run", **base, **{"head.fc_norm": True})))
    # Named explicitly, a checkpoint may start a run on other data (its head must still match).
    explicit = write_config(root, "other", **{**base, "optim.max_steps": 3, "data.max_length": 48,
                                              "resume": str(root / "run" / "checkpoints" / "step_2")})
    train(load_config(TrainConfig, explicit))
    rows = [json.loads(line) for line in (root / "other" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [3]
    # The schedule may change between launches (the anneal): steps 3 and 4 run.
    train(load_config(TrainConfig, write_config(root, "run", **{**base, "optim.max_steps": 4})))
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
