"""Answer tokens trained and head-only snapshots: counted over micro-batches, carried through a resume,
written at every save and never pruned, loadable as a head."""

import json

import pytest
import torch

from eaglehead.builtin.typed_config import load_config
from eaglehead.draftheads.checkpoint import load_head, load_pretrained
from eaglehead.train.data import build_dataset, collate_tokens
from eaglehead.train.recipe import TrainConfig
from eaglehead.train.rollout import count_loss_tokens
from eaglehead.train.trainer import MicroBatches, train
from tests.train.tiny_run import make_workspace, train_killed_after, write_config


# Two micro-batches per step (the count sums them); deep_stride 2 (deeper steps train fewer rows: the count is
# step 0's, every answer token once); one checkpoint kept (snapshots are not pruned with them).
RUN = {"optim.max_steps": 6, "optim.micro_batch_size": 1, "optim.grad_accum": 2, "keep_checkpoints": 1,
       "rollout.deep_stride": 2}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("snapshots"))


def snapshot(run, step) -> dict:
    return json.loads((run / "snapshots" / f"step_{step}" / "snapshot.json").read_text())


def answer_tokens_by_step(cfg: TrainConfig, steps: int) -> list[int]:
    """Step-0 loss tokens of each optimizer step, counted independently of the trainer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.model.target)
    ds = build_dataset(cfg.data, tok)["train"]
    data = MicroBatches(ds, lambda r: collate_tokens(r, tok.pad_token_id), cfg.optim.micro_batch_size, 1, 0, cfg.seed)
    accum = cfg.optim.grad_accum
    return [sum(int(count_loss_tokens(b["loss_mask"], b["attention_mask"], cfg.rollout.depth)[0])
                for b, _ in (data[s * accum + j] for j in range(accum))) for s in range(steps)]


@pytest.fixture(scope="module")
def baseline(workspace):
    """6 steps, a checkpoint and a snapshot every 2."""
    cfg = load_config(TrainConfig, write_config(workspace, "base", **RUN))
    train(cfg)
    return cfg, workspace / "base"


def test_every_save_leaves_a_snapshot_with_the_answer_tokens_trained(baseline):
    cfg, run = baseline
    per_step = answer_tokens_by_step(cfg, 6)
    assert all(n > 0 for n in per_step)
    snaps = [snapshot(run, s) for s in (2, 4, 6)]
    assert [s["step"] for s in snaps] == [2, 4, 6]
    # Summed over both micro-batches of every step: the count is the data's, not one micro-batch's.
    assert [s["answer_tokens"] for s in snaps] == [sum(per_step[:2]), sum(per_step[:4]), sum(per_step)]
    assert all(s["answer_tokens_since_step"] == 0 and s["utc"] for s in snaps)
    # Checkpoints are pruned to one; snapshots are not. The checkpoint records the same count.
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == ["step_6"]
    state = json.loads((run / "checkpoints" / "step_6" / "trainer_state.json").read_text())
    assert state["answer_tokens"] == snaps[-1]["answer_tokens"]
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == ["step_2", "step_4", "step_6"]  # no .tmp left
    # The last snapshot is the final head, in the layout every head loader reads.
    last, final = load_head(run / "snapshots" / "step_6"), load_pretrained(run / "head")
    for k, v in final.state_dict().items():
        assert torch.equal(last.state_dict()[k], v), k
    first = load_pretrained(run / "snapshots" / "step_2")
    assert not torch.equal(first.fc.weight, last.fc.weight)  # each snapshot is its own step's head


def test_resume_carries_the_count_and_keeps_the_trajectory(workspace, baseline, monkeypatch):
    base_cfg, base = baseline
    path = write_config(workspace, "killed", **RUN)
    train_killed_after(path, 4, monkeypatch)
    train(load_config(TrainConfig, path))  # resume: auto, from step 4
    run = workspace / "killed"
    for step in (2, 4, 6):
        assert snapshot(run, step)["answer_tokens"] == snapshot(base, step)["answer_tokens"]
    a, b = load_pretrained(run / "snapshots" / "step_6"), load_pretrained(base / "snapshots" / "step_6")
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, b.state_dict()[k], atol=1e-6, rtol=1e-6)


def test_a_checkpoint_without_the_count_still_resumes_and_counts_from_its_step(workspace, baseline, capsys):
    base_cfg, base = baseline
    path = write_config(workspace, "old", **RUN)
    cfg = load_config(TrainConfig, path)
    train(load_config(TrainConfig, path, ["optim.max_steps=4"]))  # stands in for a run written before the count
    state_path = workspace / "old" / "checkpoints" / "step_4" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({"step": state["step"], "epoch": state["epoch"]}))
    train(cfg)
    assert "does not record the answer tokens trained; counting them from step 4" in capsys.readouterr().out
    per_step = answer_tokens_by_step(base_cfg, 6)
    last = snapshot(workspace / "old", 6)
    assert last["answer_tokens"] == sum(per_step[4:]) and last["answer_tokens_since_step"] == 4
