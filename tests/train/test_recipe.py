"""The accelerate recipe end to end on a tiny local target: logged loss, resume, offline == online,
two processes == one, atomic checkpoints, configs."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eaglehead.builtin.typed_config import load_config
from eaglehead.draftheads.checkpoint import load_pretrained, save_pretrained
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.train import recipe as recipe_mod
from eaglehead.train import trainer as trainer_mod
from eaglehead.train.data import build_dataset, collate_tokens
from eaglehead.train.features import FeatureDataset, OnlineFeatures
from eaglehead.train.prepare import prepare
from eaglehead.train.recipe import TrainConfig
from eaglehead.train.rollout import count_loss_tokens, rollout
from eaglehead.train.trainer import MicroBatches, train
from tests.tiny_models import save_tiny_target
from tests.train.tiny_run import train_killed_after, write_yaml

ROOT = Path(__file__).resolve().parents[2]
CONVS = [
    ("add two numbers", "def add(a, b):\n    return a + b\n"),
    ("loop to ten", "for i in range(10):\n    print(i)\n"),
    ("a fox", "The quick brown fox jumps over the lazy dog."),
    ("a stack", "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"),
    ("print", "print(i)\nprint(a + b)\n"),
    ("speculate", "Speculative decoding drafts tokens and verifies them."),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    save_tiny_target(root / "target")
    with (root / "data.jsonl").open("w") as f:
        for q, a in CONVS:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}) + "\n")
    torch.manual_seed(0)
    from transformers import AutoConfig

    head = Eagle3Head(Eagle3Config.from_target_config(AutoConfig.from_pretrained(root / "target"), draft_vocab_size=259))
    save_pretrained(head, root / "init_head")
    return root


def write_config(root: Path, name: str, **extra) -> Path:
    cfg = {
        "output_dir": str(root / name),
        "model": {"target": str(root / "target")},
        "data": {"sources": [str(root / "data.jsonl")], "max_length": 96},
        "head": {"init_from": str(root / "init_head")},
        "rollout": {"depth": 3},
        "optim": {"max_steps": 4, "micro_batch_size": 2, "warmup_steps": 1, "lr": 3e-3},
        "log_every": 1,
        "save_every": 2,
    }
    return write_yaml(root / f"{name}.yaml", cfg, extra)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def baseline(workspace):
    cfg = load_config(TrainConfig, write_config(workspace, "base"))
    train(cfg)
    return workspace / "base"


def test_logged_loss_equals_independent_recomputation(workspace, baseline):
    """Step 1's logged loss is the rollout loss of the first global batch under the initial head."""
    cfg = load_config(TrainConfig, workspace / "base.yaml")
    target, tok = recipe_mod.load_recipe_target(cfg.model, torch.device("cpu"))
    ds = build_dataset(cfg.data, tok)["train"]
    batch, _ = MicroBatches(ds, lambda r: collate_tokens(r, tok.pad_token_id), 2, 1, 0, cfg.seed)[0]
    head = load_pretrained(workspace / "init_head")
    head.bind_embedding(target.get_input_embeddings())
    feats = OnlineFeatures(target, head.config.fused_layer_ids)(batch)
    out = rollout(head, feats, target.get_output_embeddings().weight, depth=3)
    logged = metrics(baseline)
    assert [m["step"] for m in logged] == [1, 2, 3, 4]
    assert logged[0]["loss"] == pytest.approx(float(out.loss().detach()), rel=1e-5)
    assert logged[-1]["loss"] < logged[0]["loss"]  # it learns
    assert (baseline / "export_eagle3" / "config.json").is_file()
    assert (baseline / "head" / "model.safetensors").is_file()
    saved = load_config(TrainConfig, baseline / "checkpoints" / "step_4" / "config.yaml")
    assert saved == cfg  # the resolved config travels with the checkpoint


def test_accuracy_on_every_second_step_changes_nothing_but_what_is_measured(workspace, baseline):
    """accuracy_every=2 with log_every=2: each window's acc_i is exactly its second step's (the baseline
    logs every step), its loss the mean of both steps, and the weights are the baseline's."""
    train(load_config(TrainConfig, write_config(workspace, "acc2", log_every=2, accuracy_every=2)))
    got, ref = metrics(workspace / "acc2"), metrics(baseline)
    assert [m["step"] for m in got] == [2, 4]
    for window, (first, second) in zip(got, (ref[0:2], ref[2:4])):
        assert window["loss"] == pytest.approx((first["loss"] + second["loss"]) / 2, rel=1e-6)
        for i in range(3):
            assert window[f"acc_{i}"] == pytest.approx(second[f"acc_{i}"], abs=1e-7)
    w1 = load_pretrained(workspace / "acc2" / "head").state_dict()
    w2 = load_pretrained(baseline / "head").state_dict()
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="accuracy_every=3 must divide log_every=2"):
        load_config(TrainConfig, write_config(workspace, "bad", log_every=2, accuracy_every=3))
    with pytest.raises(ValueError, match="accuracy_every: expected a positive"):
        load_config(TrainConfig, write_config(workspace, "bad", accuracy_every=0))


def test_resume_after_kill_reproduces_trajectory(workspace, baseline, monkeypatch):
    path = write_config(workspace, "killed")
    train_killed_after(path, 2, monkeypatch)
    train(load_config(TrainConfig, path))  # resume: auto
    got, ref = metrics(workspace / "killed"), metrics(baseline)
    assert [m["step"] for m in got] == [1, 2, 3, 4]
    for a, b in zip(got, ref):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-7)
    w1 = load_pretrained(workspace / "killed" / "head").state_dict()
    w2 = load_pretrained(baseline / "head").state_dict()
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-6, rtol=1e-6)
    launches = [json.loads(line) for line in (workspace / "killed" / "launches.jsonl").read_text().splitlines()]
    assert [r["start_step"] for r in launches] == [0, 2]  # each launch of the run, with its code and threads
    assert all(r["threads"] >= 1 and "torch" in r["versions"] and "commit" in r for r in launches)


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_the_same_command_resumes(workspace, baseline,
                                                                                       monkeypatch, capsys):
    """A real SIGTERM in the middle of step 3 (off the save_every=2 cadence): the run finishes that step, writes
    checkpoints/step_3 (no snapshot off the cadence), exits 143, and the relaunched command ends on the
    uninterrupted run's losses and weights."""
    import signal

    from eaglehead.train.__main__ import main

    path = write_config(workspace, "sigterm")
    real_step = trainer_mod._step

    def step_then_signal(cfg, run, step, window):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered mid-step: the handler only sets the flag
        return real_step(cfg, run, step, window)

    previous = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as mp:
        mp.setattr(trainer_mod, "_step", step_then_signal)
        assert main(["--config", str(path)]) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is gone with the loop
    assert "stopped by SIGTERM after step 3 of 4" in capsys.readouterr().err
    run_dir = workspace / "sigterm"
    store = recipe_mod.CheckpointStore(run_dir, 2)
    assert store.latest().name == "step_3"
    assert json.loads((store.latest() / "trainer_state.json").read_text())["step"] == 3
    assert sorted(p.name for p in (run_dir / "snapshots").iterdir()) == ["step_2"]
    assert not (run_dir / "head").exists()  # a stopped run writes no final head
    assert main(["--config", str(path)]) == 0  # resume: auto
    got, ref = metrics(run_dir), metrics(baseline)
    assert [m["step"] for m in got] == [1, 2, 3, 4]
    for a, b in zip(got, ref):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-7)
    w1 = load_pretrained(run_dir / "head").state_dict()
    w2 = load_pretrained(baseline / "head").state_dict()
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-6, rtol=1e-6)


def test_a_second_ctrl_c_interrupts_at_once():
    import signal

    from eaglehead.train.stop import StopRequest

    previous = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt, match="second Ctrl-C"):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is previous


def test_crash_mid_checkpoint_keeps_last_good_one(workspace, baseline, monkeypatch):
    path = write_config(workspace, "crash", **{"optim.max_steps": 4, "save_every": 2})
    cfg = load_config(TrainConfig, path)
    from accelerate import Accelerator

    real = Accelerator.save_state

    def broken(self, output_dir=None, **kw):
        if "step_4" in str(output_dir):
            Path(output_dir, "partial.bin").write_bytes(b"half")
            raise OSError("disk full (simulated)")
        return real(self, output_dir, **kw)

    monkeypatch.setattr(Accelerator, "save_state", broken)
    with pytest.raises(OSError):
        train(cfg)
    store = recipe_mod.CheckpointStore(workspace / "crash", 2)
    assert store.latest().name == "step_2"
    assert not (workspace / "crash" / "checkpoints" / "step_4").exists()


def test_coverage_by_size_is_measured_on_held_out_tokens():
    from eaglehead.train.prepare import coverage_by_size

    train_counts = torch.tensor([5, 3, 2, 0, 0, 0])  # ids 0..2 seen in training
    heldout = torch.tensor([1, 0, 1, 2, 0, 0])  # id 3 never seen in training
    table = coverage_by_size(train_counts, heldout, sizes=(1, 2, 3, 100))
    assert list(table) == [1, 2, 3, 6]  # capped at the vocabulary
    assert table[1] == {"train": 0.5, "heldout": 0.25}
    assert table[2] == {"train": 0.8, "heldout": 0.25}
    assert table[3] == {"train": 1.0, "heldout": 0.5}  # all training tokens, half the held-out ones
    assert table[6]["heldout"] == 1.0


def test_offline_features_give_the_online_loss(workspace, baseline):
    path = write_config(workspace, "offline", **{"features.dir": str(workspace / "cache"), "features.dtype": "float32",
                                                  "optim.max_steps": 2})
    cfg = load_config(TrainConfig, path)
    prepare(cfg)
    assert (workspace / "offline" / "draft_vocab.safetensors").is_file()
    train(cfg)
    for a, b in zip(metrics(workspace / "offline"), metrics(baseline)[:2]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


LAUNCH_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def launch_two(launcher: str) -> list[str]:
    """``accelerate launch`` of 2 CPU processes with ``configs/accelerate/{launcher}.yaml``, up to the entry point."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(ROOT / "configs" / "accelerate" / f"{launcher}.yaml"), "--num_processes", "2", "--mixed_precision", "no"]


@pytest.mark.parametrize("launcher", ["cpu_ddp", "zero2", "zero3"])
def test_two_processes_match_one_with_the_same_global_batch(workspace, baseline, launcher):
    """accelerate launch, 2 CPU processes (gloo DDP, or DeepSpeed ZeRO-2 on its CPU backend), micro-batch 1
    each == 1 process, micro-batch 2: same losses and the same final weights (gathered from the shards
    under ZeRO-3, while the frozen target stays whole)."""
    path = write_config(workspace, launcher, **{"optim.micro_batch_size": 1})
    cmd = launch_two(launcher) + ["-m", "eaglehead.train", "--config", str(path)]
    proc = subprocess.run(cmd, env=LAUNCH_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = metrics(workspace / launcher)
    assert [m["step"] for m in got] == [1, 2, 3, 4]
    for a, b in zip(got, metrics(baseline)):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["acc_0"] == pytest.approx(b["acc_0"], abs=1e-6)
    w1 = load_pretrained(workspace / launcher / "head").state_dict()
    w2 = load_pretrained(baseline / "head").state_dict()
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4)


STOP_ONE_RANK = """
import os, signal, sys
from eaglehead.train import trainer
from eaglehead.train.__main__ import main
real = trainer._step
def step(cfg, run, s, window):
    if s == 2 and run.accelerator.process_index == 1:  # rank 1 only: rank 0 must stop after the same step
        os.kill(os.getpid(), signal.SIGTERM)
    return real(cfg, run, s, window)
trainer._step = step
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(workspace, baseline, tmp_path):
    """2 gloo processes, SIGTERM to rank 1 alone during step 3: both ranks stop after step 3 (no hang at the next
    collective), exit 143, and the relaunch ends on the one-process run's losses and weights."""
    path = write_config(workspace, "sigterm_ddp", **{"optim.micro_batch_size": 1})
    script = tmp_path / "stop_one_rank.py"
    script.write_text(STOP_ONE_RANK)
    launch = launch_two("cpu_ddp")
    proc = subprocess.run(launch + [str(script), "--config", str(path)], env=LAUNCH_ENV, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "stopped by SIGTERM after step 3 of 4" in proc.stderr, proc.stderr[-3000:]
    assert recipe_mod.CheckpointStore(workspace / "sigterm_ddp", 2).latest().name == "step_3"
    proc = subprocess.run(launch + ["-m", "eaglehead.train", "--config", str(path)], env=LAUNCH_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = metrics(workspace / "sigterm_ddp")
    assert [m["step"] for m in got] == [1, 2, 3, 4]
    for a, b in zip(got, metrics(baseline)):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    w1 = load_pretrained(workspace / "sigterm_ddp" / "head").state_dict()
    w2 = load_pretrained(baseline / "head").state_dict()
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("entry", ["python -m eaglehead.train", "eaglehead train"])
def test_training_ends_by_tearing_the_process_group_down(workspace, monkeypatch, tmp_path, entry):
    """A launched rank that exits with its gloo group alive can abort in the interpreter's teardown (exit -6
    after a successful run, seen once under ZeRO-3): training ends with a barrier and destroy_process_group,
    after the head is written and only then. One gloo rank here stands in for a launch."""
    import torch.distributed as dist

    from eaglehead import cli as cli_mod
    from eaglehead.train import __main__ as train_main

    seen = []
    finish = trainer_mod._finish
    monkeypatch.setattr(trainer_mod, "_finish", lambda *a: seen.append(dist.is_initialized()) or finish(*a))
    path = write_config(workspace, f"teardown-{entry.split()[-1]}", **{"optim.max_steps": 1})
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        argv = ["--config", str(path)]
        rc = train_main.main(argv) if entry.startswith("python") else cli_mod.main(["train", *argv])
        assert rc == 0
        assert seen == [True]  # trained with the group up ...
        assert not dist.is_initialized()  # ... and tore it down before returning
        assert (Path(path).parent / path.stem / "head" / "config.json").is_file()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_bad_config_names_the_key(workspace, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((workspace / "base.yaml").read_text() + "rollout_depth: 3\n")
    with pytest.raises(ValueError, match="rollout_depth"):
        load_config(TrainConfig, bad)
    with pytest.raises(ValueError, match="rollout.depth"):
        load_config(TrainConfig, workspace / "base.yaml", ["rollout.depth=zero"])
    with pytest.raises(ValueError, match="depth"):
        load_config(TrainConfig, workspace / "base.yaml", ["rollout.depth=0"])


def test_count_loss_tokens_used_for_normalisation_sums_over_micro_batches(workspace):
    cfg = load_config(TrainConfig, workspace / "base.yaml")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.model.target)
    ds = build_dataset(cfg.data, tok)["train"]
    one = MicroBatches(ds, lambda r: collate_tokens(r, 0), 2, 1, 0, 0)
    halves = [MicroBatches(ds, lambda r: collate_tokens(r, 0), 1, 2, k, 0) for k in (0, 1)]
    for g in range(5):  # crosses an epoch boundary
        a = count_loss_tokens(one[g][0]["loss_mask"], one[g][0]["attention_mask"], 3)
        b = sum(count_loss_tokens(h[g][0]["loss_mask"], h[g][0]["attention_mask"], 3) for h in halves)
        assert a.tolist() == b.tolist()


class _Lengths(list):
    """A stand-in dataset: item i is its own index."""

    def __getitem__(self, i):
        return i


def test_length_grouping_keeps_the_order_contract_and_cuts_padding():
    lengths = [int(x) for x in torch.randint(10, 1000, (203,), generator=torch.Generator().manual_seed(0))]
    ds = _Lengths(range(len(lengths)))
    grouped = MicroBatches(ds, list, 4, 1, 0, 7, lengths, group=8)
    plain = MicroBatches(ds, list, 4, 1, 0, 7)
    per_epoch = grouped.per_epoch
    assert per_epoch == 50
    for epoch in (0, 1):
        seen = [j for g in range(epoch * per_epoch, (epoch + 1) * per_epoch) for j in grouped[g][0]]
        assert len(seen) == len(set(seen)) == 200  # no sequence twice within an epoch
    # A restart (a fresh object) at any step sees the same micro-batch: resuming needs the step only.
    again = MicroBatches(ds, list, 4, 1, 0, 7, lengths, group=8)
    assert [again[g] for g in (73, 5, 120)] == [grouped[g] for g in (73, 5, 120)]
    # One process with micro-batch 4 == two processes with 2 each, step by step.
    halves = [MicroBatches(ds, list, 2, 2, k, 7, lengths, group=8) for k in (0, 1)]
    for g in range(0, 110, 9):
        assert grouped[g][0] == halves[0][g][0] + halves[1][g][0]

    def padded(mb):
        return sum(max(lengths[j] for j in mb[g][0]) * 4 for g in range(per_epoch))

    assert padded(grouped) < 0.75 * padded(plain)  # uniform 10..1000: a random 4 pads to ~800 on average
    assert grouped[0][0] != plain[0][0]
    with pytest.raises(ValueError, match="one length per sequence"):
        MicroBatches(ds, list, 4, 1, 0, 7, lengths[:5], group=8)
    with pytest.raises(ValueError, match="length_grouping"):
        recipe_mod.OptimConfig(length_grouping=-1)


def test_wandb_logging_offline(workspace, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(workspace))
    path = write_config(workspace, "wandb", **{"report_to": "wandb", "optim.max_steps": 2, "save_every": 0})
    train(load_config(TrainConfig, path))
    runs = list((workspace / "wandb").glob("offline-run-*"))
    assert runs, "no offline wandb run was written"
    assert any(p.suffix == ".wandb" for p in runs[0].iterdir())


@pytest.mark.parametrize("kind", ["eagle3", "eagle1", "eagle1-draft-vocab"])
def test_lm_head_starts_from_the_targets_output_rows(workspace, kind, tmp_path):
    target, _ = recipe_mod.load_recipe_target(recipe_mod.ModelConfig(target=str(workspace / "target")), torch.device("cpu"))
    vocab = target.get_output_embeddings().weight.shape[0]
    counts = torch.arange(vocab, 0, -1)  # id 0 most frequent
    # Make the target's final-norm gain non-trivial so that copying it is visible.
    with torch.no_grad():
        target.get_decoder().norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(0))
    heads = {}
    for init in ("target", "random"):
        cfg = load_config(TrainConfig, write_config(workspace, "init"),
                          ["head.init_from=null", f"head.type={kind}", f"head.lm_head_init={init}",
                           "head.draft_vocab_size=100"]
                          + (["head.fused_layer_ids=null", "head.type=eagle1"] if kind.startswith("eagle1") else [])
                          + (["head.eagle1_vocab=draft"] if kind == "eagle1-draft-vocab" else []))
        torch.manual_seed(0)
        heads[init] = recipe_mod.build_head(cfg, target, counts)
    head = heads["target"]
    rows = target.get_output_embeddings().weight[head.target_ids]
    assert head.lm_head.weight.shape[0] == (vocab if kind == "eagle1" else 100)
    assert head.head_type == kind[:6]
    assert (len(head.config.fused_layer_ids) == 1) == kind.startswith("eagle1")
    if kind == "eagle1-draft-vocab":  # the most frequent 100 ids (counts fall with the id), and it loads back
        assert torch.equal(head.target_ids, torch.arange(100))
        save_pretrained(head, tmp_path / "e1")
        back = load_pretrained(tmp_path / "e1")
        assert back.head_type == "eagle1" and torch.equal(back.target_ids, head.target_ids)
    assert torch.equal(head.lm_head.weight, rows)
    assert torch.equal(head.norm.weight, target.get_decoder().norm.weight)
    assert not torch.equal(heads["random"].lm_head.weight, rows)
    assert torch.equal(heads["random"].norm.weight, torch.ones_like(head.norm.weight))
    # Everything else is initialised as before (same seed).
    for name, p in heads["random"].state_dict().items():
        if not name.startswith(("lm_head", "norm")):
            assert torch.equal(p, head.state_dict()[name]), name


def test_a_reduced_vocabulary_without_token_counts_names_the_file(workspace):
    cfg = load_config(TrainConfig, write_config(workspace, "nocounts"), ["head.init_from=null", "head.draft_vocab_size=100"])
    target, _ = recipe_mod.load_recipe_target(cfg.model, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"draft_vocab_size=100 .*nocounts/draft_vocab.safetensors .*eaglehead prepare"):
        recipe_mod.build_head(cfg, target, None)


def test_eagle1_trains_from_an_eagle3_feature_cache(workspace):
    """The demo runs the target once: an EAGLE-1 head reads the cache's final hidden state (id L)."""
    common = {"head.init_from": None, "head.type": "eagle1", "head.fused_layer_ids": None, "optim.max_steps": 2,
              "save_every": 0}
    cache_cfg = load_config(TrainConfig, write_config(workspace, "e3prep", **{
        "head.init_from": None, "features.dir": str(workspace / "e3cache"), "features.dtype": "float32"}))
    prepare(cache_cfg)
    assert FeatureDataset(workspace / "e3cache").layer_ids != [4]
    online = load_config(TrainConfig, write_config(workspace, "e1online", **common))
    offline = load_config(TrainConfig, write_config(workspace, "e1offline", **common,
                                                    **{"features.dir": str(workspace / "e3cache")}))
    train(online)
    train(offline)
    for a, b in zip(metrics(workspace / "e1offline"), metrics(workspace / "e1online"), strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)



def test_a_second_head_finds_the_draft_vocabulary_beside_the_features(workspace):
    """prepare leaves the token counts in the feature cache too: the EAGLE-1 ablation trained in its own
    output_dir (no counts there) builds the same reduced draft vocabulary as the EAGLE-3 head."""
    from eaglehead.draftheads.checkpoint import load_pretrained

    small = {"head.init_from": None, "head.draft_vocab_size": 100, "optim.max_steps": 1, "save_every": 0}
    prep = load_config(TrainConfig, write_config(workspace, "vprep", **small, **{
        "features.dir": str(workspace / "vcache"), "features.dtype": "float32"}))
    prepare(prep)
    assert (workspace / "vcache" / recipe_mod.VOCAB_FILE).is_file()
    e1 = load_config(TrainConfig, write_config(workspace, "v_e1", **small, **{
        "features.dir": str(workspace / "vcache"), "head.type": "eagle1", "head.fused_layer_ids": None,
        "head.eagle1_vocab": "draft"}))
    assert not (workspace / "v_e1" / recipe_mod.VOCAB_FILE).exists()
    train(e1)
    target, _ = recipe_mod.load_recipe_target(prep.model, torch.device("cpu"))
    want = recipe_mod.build_head(prep, target, recipe_mod.load_token_counts(workspace / "vprep"))
    got = load_pretrained(workspace / "v_e1" / "head")
    assert got.config.draft_vocab_size == 100
    assert torch.equal(got.target_ids.cpu(), want.target_ids.cpu())


def test_deep_stride_trains_and_normalises_by_its_own_rows(workspace, monkeypatch):
    """rollout.deep_stride=2 end to end: the trainer's global loss-token counts (the normaliser) are the
    rollout's own counts, so the logged per-step losses are means over the rows each step trained."""
    seen = []
    real = recipe_mod.rollout

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append((kwargs["deep_stride"], out.counts.clone()))
        return out

    monkeypatch.setattr(recipe_mod, "rollout", spy)
    normalisers = []
    real_count = recipe_mod.count_loss_tokens

    def count_spy(*args):
        got = real_count(*args)
        normalisers.append(got.clone())
        return got

    monkeypatch.setattr(recipe_mod, "count_loss_tokens", count_spy)
    cfg = load_config(TrainConfig, write_config(workspace, "stride2", **{"rollout.deep_stride": 2,
                                                                          "optim.max_steps": 2, "save_every": 0}))
    train(cfg)
    assert [s for s, _ in seen] == [2, 2]
    for (_, counts), norm in zip(seen, normalisers, strict=True):
        assert torch.equal(counts, norm.float()) and counts[1] < counts[0]
    assert all(math.isfinite(m["loss"]) for m in metrics(workspace / "stride2"))
    with pytest.raises(ValueError, match="deep_stride"):
        recipe_mod.RolloutConfig(deep_stride=0)


def test_bench_step_times_strides_on_the_recipes_batches(workspace, capsys):
    from eaglehead.train import bench_step

    cfg = write_config(workspace, "bench", **{"head.init_from": None, "features.dir": str(workspace / "bcache"),
                                              "features.dtype": "float32"})
    prepare(load_config(TrainConfig, cfg))
    assert bench_step.main(["--config", str(cfg), "--batches", "0,1", "--strides", "1,2", "--repeats", "1"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [r["micro_batch"] for r in lines] == [0, 1]
    assert all(set(r["seconds"]) == {"1", "2"} and r["speedup_vs_first"]["1"] == 1.0 and r["loss_tokens"] > 0
               for r in lines)
    assert bench_step.main(["--config", str(cfg), "--batches", "0", "--strides", "2", "--repeats", "1",
                            "--autocast", "none,bfloat16"]) == 0
    both = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert set(both[0]["seconds"]) == {"2/none", "2/bfloat16"}
    assert set(both[0]["loss_tokens_per_s_per_thread"]) == {"2/none", "2/bfloat16"}
    with pytest.raises(SystemExit):
        bench_step.main(["--config", str(cfg), "--autocast", "fp8"])
    with pytest.raises(ValueError, match="no feature cache"):
        bench_step.main(["--config", str(write_config(workspace, "bench2")), "--repeats", "1"])


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_layer_init_target_starts_the_decoder_layer_as_the_targets_last_layer(workspace, kind):
    target, _ = recipe_mod.load_recipe_target(recipe_mod.ModelConfig(target=str(workspace / "target")), torch.device("cpu"))
    vocab = target.get_output_embeddings().weight.shape[0]
    last = target.get_decoder().layers[-1]
    with torch.no_grad():  # non-trivial norm gains, so that copying them is visible
        for norm in (last.input_layernorm, last.post_attention_layernorm):
            norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    heads = {}
    for init in ("target", "random"):
        overrides = ["head.init_from=null", f"head.layer_init={init}", "head.draft_vocab_size=100"]
        if kind == "eagle1":
            overrides += ["head.type=eagle1", "head.fused_layer_ids=null"]
        cfg = load_config(TrainConfig, write_config(workspace, "layer_init"), overrides)
        torch.manual_seed(0)
        heads[init] = recipe_mod.build_head(cfg, target, torch.arange(vocab, 0, -1))
    head, plain = heads["target"], heads["random"]
    m = head.midlayer
    for name in ("o_proj",):
        assert torch.equal(getattr(m.self_attn, name).weight, getattr(last.self_attn, name).weight)
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert torch.equal(getattr(m.mlp, name).weight, getattr(last.mlp, name).weight)
    assert torch.equal(m.post_attention_layernorm.weight, last.post_attention_layernorm.weight)
    # Equal halves [x; x] give the target's projections of its normed input.
    x = torch.randn(3, 5, target.config.hidden_size, generator=torch.Generator().manual_seed(2))
    both = torch.cat([m.input_layernorm(x), m.hidden_norm(x)], dim=-1)
    normed = last.input_layernorm(x)
    for name in ("q_proj", "k_proj", "v_proj"):
        torch.testing.assert_close(getattr(m.self_attn, name)(both), getattr(last.self_attn, name)(normed),
                                   rtol=1e-5, atol=1e-6)
    # fc: the random init (same seed) plus an identity block on the top fused layer's columns, nothing else.
    width = target.config.hidden_size
    top = head.config.fused_layer_ids.index(max(head.config.fused_layer_ids))
    delta = head.fc.weight - plain.fc.weight
    expected = torch.zeros_like(delta)
    expected[:, top * width:(top + 1) * width] = torch.eye(width)
    torch.testing.assert_close(delta, expected, rtol=0, atol=1e-6)
    assert torch.equal(head.lm_head.weight, plain.lm_head.weight) and torch.equal(head.d2t, plain.d2t)


def test_layer_init_target_with_another_layer_size_is_a_named_error(workspace):
    target, _ = recipe_mod.load_recipe_target(recipe_mod.ModelConfig(target=str(workspace / "target")), torch.device("cpu"))
    cfg = load_config(TrainConfig, write_config(workspace, "layer_init_bad"),
                      ["head.init_from=null", "head.layer_init=target", "head.draft_vocab_size=100",
                       f"head.intermediate_size={target.config.intermediate_size + 8}"])
    vocab = target.get_output_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=r"head.layer_init=target: the target's last layer has mlp.gate_proj.weight"):
        recipe_mod.build_head(cfg, target, torch.arange(vocab, 0, -1))


def test_bfloat16_autocast_trains_close_to_float32_and_keeps_float32_weights(workspace, baseline):
    """optim.autocast=bfloat16: step 1's loss is the float32 loss up to bf16 rounding (8-bit mantissa: ~0.4 % per
    product, a few percent at most through the 3-step rollout), not bit-identical (the autocast really ran), the
    run still learns and the saved head stays float32."""
    cfg = load_config(TrainConfig, write_config(workspace, "bf16", **{"optim.autocast": "bfloat16"}))
    assert cfg.optim.uses_autocast(torch.device("cpu"))
    train(cfg)
    fp32, bf16 = metrics(baseline), metrics(workspace / "bf16")
    assert bf16[0]["loss"] == pytest.approx(fp32[0]["loss"], rel=0.03)
    assert bf16[0]["loss"] != fp32[0]["loss"]
    assert bf16[-1]["loss"] < bf16[0]["loss"]
    head = load_pretrained(workspace / "bf16" / "head")
    assert all(p.dtype == torch.float32 for p in head.parameters())


def test_autocast_auto_follows_the_cpu_flags(monkeypatch):
    cfg = recipe_mod.OptimConfig(autocast="auto")
    monkeypatch.setattr(recipe_mod, "native_bf16", lambda device: False)
    assert not cfg.uses_autocast(torch.device("cpu"))
    monkeypatch.setattr(recipe_mod, "native_bf16", lambda device: True)
    assert cfg.uses_autocast(torch.device("cpu"))
    assert not recipe_mod.OptimConfig().uses_autocast(torch.device("cpu"))  # the default: float32 throughout
