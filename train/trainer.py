"""The training loop of the recipe (see :mod:`eaglehead.train.recipe` for the launch commands).

Reads top to bottom: set up accelerate -> target, data, draft vocabulary, head -> optimizer and
schedule -> resume -> steps (micro-batches, global loss-token normalisation, clip, step) -> logs and
checkpoints -> final head and export.

Each save also writes a head-only snapshot, ``output_dir/snapshots/step_N`` (the head in the layout
``load_head`` reads, plus ``snapshot.json``: step, answer tokens trained, time), that is never pruned: the
learning curve (``python -m eaglehead.diagnostics.learning_curve``) measures every one of them. Answer tokens
trained are the step-0 loss tokens summed over processes and micro-batches, carried through resumes in
``trainer_state.json``. SIGTERM or Ctrl-C stops the run after the step in progress, with a checkpoint there
(:mod:`eaglehead.train.stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from eaglehead.builtin.models import output_vocab_size
from eaglehead.builtin.typed_config import save_config
from eaglehead.draftheads import checkpoint as ckpt_io

from .data import build_dataset, collate_tokens, count_tokens
from .features import FeatureDataset, OnlineFeatures, collate_features
from .recipe import (
    target_output_weight,
    CheckpointStore,
    RolloutModule,
    TrainConfig,
    build_head,
    check_resumable,
    data_config,
    describe_vocab,
    load_recipe_target,
    load_token_counts,
    lr_factor,
    recipe_token_counts,
)
from .dflash_objective import DFlashModule
from .dflash_recipe import build_dflash_head
from .stop import StopRequest


class MicroBatches:
    """Deterministic data order shared by every process count.

    Epoch ``e`` is a permutation seeded by ``seed + e``. Global micro-batch ``g`` is the next
    ``micro_batch_size * world`` sequences; process ``k`` takes the ``k``-th slice. So the data of
    optimizer step ``s`` is a pure function of ``s``: resuming needs only the step number, and one
    process with micro-batch ``2m`` sees exactly what two processes with ``m`` each see together.

    With ``lengths`` (one per sequence) and ``group > 0``, the epoch's permutation is cut into windows of
    ``group`` global micro-batches, each window sorted by length (longest first) and cut into
    micro-batches, and those micro-batches shuffled once more with the epoch's generator: every property
    above still holds, and a micro-batch pads to a length close to its own sequences'.
    """

    def __init__(self, dataset, collate, micro_batch_size: int, world: int, rank: int, seed: int,
                 lengths: list[int] | None = None, group: int = 0):
        self.dataset, self.collate = dataset, collate
        self.mbs, self.world, self.rank, self.seed = micro_batch_size, world, rank, seed
        self.per_epoch = len(dataset) // (micro_batch_size * world)
        if self.per_epoch < 1:
            raise ValueError(f"the dataset has {len(dataset)} sequences: fewer than one global micro-batch "
                             f"({micro_batch_size} x {world} processes)")
        if group and (lengths is None or len(lengths) != len(dataset)):
            raise ValueError(f"length grouping needs one length per sequence ({len(dataset)}), "
                             f"got {None if lengths is None else len(lengths)}")
        self.lengths, self.group = lengths, group
        self._perm_epoch, self._perm = -1, None

    def order(self, epoch: int) -> list[int]:
        """The sequence indices of ``epoch`` in the order global micro-batches take them."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        perm = torch.randperm(len(self.dataset), generator=gen).tolist()
        if not self.group:
            return perm
        size = self.mbs * self.world
        perm = perm[: self.per_epoch * size]
        window = self.group * size
        batches = []
        for w in range(0, len(perm), window):
            ranked = sorted(perm[w: w + window], key=lambda j: -self.lengths[j])
            batches.extend(ranked[b: b + size] for b in range(0, len(ranked), size))
        return [j for b in torch.randperm(len(batches), generator=gen).tolist() for j in batches[b]]

    def __getitem__(self, g: int):
        epoch, i = divmod(g, self.per_epoch)
        if epoch != self._perm_epoch:
            self._perm, self._perm_epoch = self.order(epoch), epoch
        start = i * self.mbs * self.world + self.rank * self.mbs
        return self.collate([self.dataset[j] for j in self._perm[start:start + self.mbs]]), epoch


def _make_accelerator(cfg: TrainConfig):
    import os

    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    log_with = "wandb" if cfg.report_to == "wandb" else None
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    # Without CUDA, cpu=True lets processes started by torchrun (accelerate launch --multi_gpu) join a
    # gloo process group instead of each running alone. DeepSpeed brings its own CPU backend.
    cpu_only = not torch.cuda.is_available()
    handlers = [InitProcessGroupKwargs(backend="gloo")] if cpu_only and deepspeed else []
    accelerator = Accelerator(gradient_accumulation_steps=cfg.optim.grad_accum, log_with=log_with,
                              cpu=cpu_only and not deepspeed, kwargs_handlers=handlers)
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:
        # The recipe owns these numbers; the DeepSpeed config must agree with them.
        ds = plugin.deepspeed_config
        ds["train_micro_batch_size_per_gpu"] = cfg.optim.micro_batch_size
        ds["gradient_accumulation_steps"] = cfg.optim.grad_accum
        ds["gradient_clipping"] = cfg.optim.max_grad_norm
        ds.pop("train_batch_size", None)  # DeepSpeed derives it from the two above and the world size
    return accelerator


@contextlib.contextmanager
def _whole_target_under_zero3(accelerator):
    """Load the frozen target unpartitioned in every process: ZeRO-3 should shard only the head.

    Under a ZeRO-3 plugin transformers' ``from_pretrained`` partitions weights at load time (the
    target's ``lm_head`` would arrive as an empty shard); the HF DeepSpeed hook is lifted meanwhile.
    """
    plugin = accelerator.state.deepspeed_plugin
    if plugin is None or plugin.zero_stage != 3:
        yield
        return
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        plugin.set_deepspeed_weakref()


def _data(cfg: TrainConfig, accelerator, target, tok):
    """(dataset, collate, token counts or None)."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    out_dir = Path(cfg.output_dir)
    if cfg.features.dir and (Path(cfg.features.dir) / "index.json").is_file():
        ds = FeatureDataset(cfg.features.dir)
        return ds, lambda rows: collate_features(rows, pad), recipe_token_counts(cfg)
    with accelerator.main_process_first():
        ds = build_dataset(data_config(cfg), tok, model=target if cfg.data.regenerate else None)["train"]
    counts = load_token_counts(out_dir)
    if counts is None:
        counts = count_tokens(ds, output_vocab_size(target))
    return ds, lambda rows: collate_tokens(rows, pad), counts


@dataclass
class _Run:
    """What one training run holds between steps."""

    accelerator: Any
    model: Any
    optimizer: Any
    scheduler: Any
    data: MicroBatches
    online: OnlineFeatures | None  # None: features come from the cache
    feature_key: str  # the batch key the head reads as its fused features
    store: CheckpointStore
    start: int  # first step to run (> 0 when resumed)
    autocast: bool = False  # bfloat16 autocast of the forward (optim.autocast)
    # Answer (step-0 loss) tokens trained, over every process; counted from step answer_tokens_since (0 unless
    # resumed from a checkpoint written before the count existed).
    answer_tokens: int = 0
    answer_tokens_since: int = 0


def train(cfg: TrainConfig) -> dict:
    """Run the recipe; returns a summary (final step, last logged metrics, output paths).

    Ends the run on every rank (``accelerator.end_training``: trackers closed, the process group of a launched
    run torn down), so it is the last distributed work of its process.
    """
    run = _setup(cfg)
    accelerator, opt, depth = run.accelerator, cfg.optim, cfg.loss_slots
    metrics_path = Path(cfg.output_dir) / "metrics.jsonl"
    bar = tqdm(total=opt.max_steps, initial=run.start, disable=not accelerator.is_main_process, desc="train",
               dynamic_ncols=True)
    last: dict = {}
    window = _new_window(depth)
    with StopRequest() as stop:
        for step in range(run.start, opt.max_steps):
            epoch = _step(cfg, run, step, window)
            bar.update(1)
            done = step + 1
            if done % cfg.log_every == 0 or done == opt.max_steps:
                last = _log(accelerator, window, done, epoch, run.scheduler, metrics_path, bar, cfg)
                window = _new_window(depth)
            saved = None
            if (cfg.save_every and done % cfg.save_every == 0) or done == opt.max_steps:
                saved = _save(cfg, run, done, epoch)
            signum = stop.agreed(accelerator) if done < opt.max_steps else None
            if signum is not None:
                if window["steps"]:  # the steps since the last log line stay on the learning curve
                    last = _log(accelerator, window, done, epoch, run.scheduler, metrics_path, bar, cfg)
                path = saved or _save(cfg, run, done, epoch, snapshot=False)
                bar.close()
                return _stopped(accelerator, cfg, signum, done, path, last)
    bar.close()
    return _finish(accelerator, run.model, cfg, Path(cfg.output_dir), last)


def _save(cfg: TrainConfig, run: _Run, done: int, epoch: int, snapshot: bool = True) -> Path:
    """The checkpoint of step ``done`` (and, on the save_every cadence, its head snapshot first: a kill between
    the two re-trains to this step and writes it again)."""
    state = {"step": done, "epoch": epoch, "answer_tokens": run.answer_tokens,
             "answer_tokens_since_step": run.answer_tokens_since}
    if snapshot:
        # A learning curve tells the snapshots of a wsd run's decay (annealing) from those at its peak rate, by the
        # rate of the update that made it (the last one, step done - 1).
        opt = cfg.optim
        factor = lr_factor(opt, done - 1)
        snap = {**state, "lr_factor": factor,
                "annealing": opt.schedule == "wsd" and done - 1 >= opt.warmup_steps and factor < 1.0}
        save_snapshot(run.accelerator, run.model, Path(cfg.output_dir), snap)
    return run.store.save(run.accelerator, done, state, cfg)


def _stopped(accelerator, cfg: TrainConfig, signum: int, done: int, checkpoint: Path, last: dict) -> dict:
    """End a run that a signal stopped after step ``done`` (its checkpoint written): no final head or export."""
    name = signal.Signals(signum).name
    if accelerator.is_main_process:
        print(f"stopped by {name} after step {done} of {cfg.optim.max_steps}; checkpoint {checkpoint}. The same "
              "command resumes there.", file=sys.stderr, flush=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return {"step": done, "metrics": last, "stopped_by": name, "signal": int(signum), "checkpoint": str(checkpoint)}


def _setup(cfg: TrainConfig) -> _Run:
    """Accelerator, target, data, head, optimizer and schedule, resumed from a checkpoint when one applies."""
    from accelerate.utils import set_seed

    accelerator = _make_accelerator(cfg)
    main = accelerator.is_main_process
    set_seed(cfg.seed)
    out_dir = Path(cfg.output_dir)
    store = CheckpointStore(out_dir, cfg.keep_checkpoints)
    resume_from = store.latest() if cfg.resume == "auto" else (None if cfg.resume == "never" else Path(cfg.resume))
    if resume_from is not None:
        check_resumable(resume_from, cfg, explicit=cfg.resume != "auto")  # before anything is loaded or written
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out_dir / "config.yaml")
    with _whole_target_under_zero3(accelerator):
        target, tok = load_recipe_target(cfg.model, accelerator.device)
    dataset, collate, counts = _data(cfg, accelerator, target, tok)
    head, model = _objective(cfg, target, tok, counts, main)
    layer_ids = list(head.config.fused_layer_ids)
    if isinstance(dataset, FeatureDataset):
        feature_key, online = dataset.source_of(layer_ids), None
    else:
        feature_key, online = "fused", OnlineFeatures(target, layer_ids)
    opt = cfg.optim
    optimizer = torch.optim.AdamW(head.parameters(), lr=opt.lr, betas=tuple(opt.betas), weight_decay=opt.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(opt, s))
    # The schedule is stepped by hand once per optimizer step: accelerate's wrapper would step it once
    # per process (it assumes each process sees 1/N of an epoch), which changes the schedule with N.
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    start = tokens = since = 0
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
        start, tokens, since = _resumed_counts(resume_from, main)
    if main:
        _record_launch(out_dir, start, accelerator.num_processes)
    if cfg.report_to == "wandb":
        from eaglehead.builtin.typed_config import dump_config

        accelerator.init_trackers(cfg.wandb_project, config=dump_config(cfg))
    data = data_order(cfg, dataset, collate, accelerator.num_processes, accelerator.process_index)
    return _Run(accelerator, model, optimizer, scheduler, data, online, feature_key, store, start,
                autocast=cfg.optim.uses_autocast(accelerator.device), answer_tokens=tokens, answer_tokens_since=since)


def _objective(cfg: TrainConfig, target, tok, counts, main: bool):
    """(head, the module whose forward is the loss): the EAGLE rollout, or DFlash's anchor blocks."""
    softcap = getattr(target.config, "final_logit_softcapping", None)
    if cfg.head.type == "dflash":
        head = build_dflash_head(cfg, target, tok)
        head.bind_target(target, target_output_weight(target))
        d = cfg.dflash
        return head, DFlashModule(head, target_output_weight(target), d.num_anchors, d.gamma, d.labels, cfg.seed,
                                  softcap)
    head = build_head(cfg, target, counts)
    head.bind_embedding(target.get_input_embeddings())
    if main:
        print(describe_vocab(head, counts))
    return head, RolloutModule(head, target_output_weight(target), cfg.rollout.depth, cfg.rollout.decay,
                               cfg.rollout.checkpoint_attention, cfg.rollout.labels, cfg.rollout.deep_stride, softcap)


def _resumed_counts(checkpoint: Path, main: bool) -> tuple[int, int, int]:
    """(step, answer tokens trained, the step they are counted from) of a checkpoint's ``trainer_state.json``.
    A checkpoint written before the count existed restarts it at 0 from its own step, and says so."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    step = state["step"]
    if "answer_tokens" not in state:
        if main:
            print(f"note: {checkpoint} does not record the answer tokens trained; counting them from step {step}")
        return step, 0, step
    if main:
        print(f"resuming from {checkpoint} at step {step} ({state['answer_tokens']} answer tokens trained)")
    return step, int(state["answer_tokens"]), int(state.get("answer_tokens_since_step", 0))


SNAPSHOTS_DIR, SNAPSHOT_FILE = "snapshots", "snapshot.json"


def save_snapshot(accelerator, model, out_dir: Path, state: dict) -> Path:
    """Write the head of this step to ``out_dir/snapshots/step_N`` (our head layout plus ``snapshot.json``:
    ``state`` and the time), renamed into place so a reader never sees half a snapshot. Collective: every
    process calls it (under ZeRO-3 the head's shards are gathered)."""
    head = _whole_head(accelerator, model)
    final = out_dir / SNAPSHOTS_DIR / f"step_{state['step']}"
    if head is not None:
        from datetime import datetime, timezone

        tmp = final.with_name(f".{final.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        ckpt_io.save_pretrained(head, tmp)
        utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
        (tmp / SNAPSHOT_FILE).write_text(json.dumps({**state, "utc": utc}, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    accelerator.wait_for_everyone()
    return final


def _whole_head(accelerator, model):
    """A copy of the head with all its weights on the main process (None on the others). Collective: under
    ZeRO-3 ``get_state_dict`` gathers the sharded parameters; elsewhere it is the plain state dict."""
    state = accelerator.get_state_dict(model)
    if not accelerator.is_main_process:
        return None
    head = accelerator.unwrap_model(model).head
    with torch.random.fork_rng(devices=[]):  # a fresh module's init must not move the training RNG
        whole = type(head)(head.config)
    whole.load_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")})
    return whole


def _record_launch(out_dir: Path, start: int, processes: int) -> None:
    """Append who trained from which step to ``launches.jsonl``: a run that spans several launches (resumed
    after a kill) keeps the command, code commit and threads of each, for the recipe a head ships with."""
    import sys
    from datetime import datetime, timezone

    import accelerate
    import transformers

    from eaglehead.builtin.shipped import source_commit

    rec = {"utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "start_step": start,
           "argv": sys.argv[1:], "processes": processes, "threads": torch.get_num_threads(),
           "commit": source_commit(), "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                                   "accelerate": accelerate.__version__}}
    with (out_dir / "launches.jsonl").open("a") as f:
        f.write(json.dumps(rec) + "\n")


def data_order(cfg: TrainConfig, dataset, collate, processes: int = 1, index: int = 0) -> MicroBatches:
    """The recipe's micro-batches of ``dataset`` for process ``index`` of ``processes`` (seeded shuffle,
    length grouping when the config asks): what training steps through, and what ``bench_step`` times."""
    opt = cfg.optim
    lengths = _lengths(dataset) if opt.length_grouping else None
    return MicroBatches(dataset, collate, opt.micro_batch_size, processes, index, cfg.seed, lengths,
                        opt.length_grouping)


def _lengths(dataset) -> list[int]:
    """Tokens per sequence of a feature cache or a tokenised dataset."""
    if isinstance(dataset, FeatureDataset):
        return dataset.lengths()
    return [len(ids) for ids in dataset["input_ids"]]


def _new_window(depth: int) -> dict:
    """Sums over the steps since the last log line."""
    return {"loss_sums": torch.zeros(depth), "counts": torch.zeros(depth), "correct": torch.zeros(depth),
            "acc_counts": torch.zeros(depth), "loss": 0.0, "tokens": 0, "t0": time.perf_counter(), "steps": 0}


def _step(cfg: TrainConfig, run: _Run, step: int, window: dict) -> int:
    """One optimizer step (``grad_accum`` micro-batches); adds its sums to ``window``; returns the epoch."""
    accelerator, model, opt = run.accelerator, run.model, cfg.optim
    micro = [run.data[step * opt.grad_accum + j] for j in range(opt.grad_accum)]
    objective = accelerator.unwrap_model(model)
    counts_local = sum(objective.loss_token_counts(b) for b, _ in micro)
    norms = accelerator.reduce(counts_local.to(accelerator.device).float(), reduction="sum")
    # accelerator.backward divides by grad_accum and DDP/DeepSpeed average over processes; the loss is
    # already normalised by global token counts, so scale those two factors back out.
    scale = accelerator.num_processes * opt.grad_accum
    step_loss = torch.zeros((), device=accelerator.device)
    accuracy = cfg.measures_accuracy(step + 1)
    for b, _ in micro:
        with accelerator.accumulate(model):
            batch = run.online(b) if run.online is not None else {k: v.to(accelerator.device) for k, v in b.items()}
            batch["fused"] = batch[run.feature_key]
            with torch.autocast(accelerator.device.type, dtype=torch.bfloat16, enabled=run.autocast):
                out = model(batch, accuracy=accuracy)
                loss = out.loss(norms)
            accelerator.backward(loss * scale)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), opt.max_grad_norm)
            run.optimizer.step()
            run.optimizer.zero_grad()
        step_loss += loss.detach()
        window["loss_sums"] += out.loss_sums.detach().float().cpu()
        window["counts"] += out.counts.cpu()
        if accuracy:
            window["correct"] += out.correct.cpu()
            window["acc_counts"] += out.counts.cpu()
        window["tokens"] += int(b["attention_mask"].sum())
    run.scheduler.step()
    window["loss"] += float(accelerator.reduce(step_loss, reduction="sum"))
    # Step 0 trains every answer token once; read after the line above has waited for the device anyway.
    run.answer_tokens += int(norms[0])
    window["steps"] += 1
    return micro[-1][1]


def _log(accelerator, window, step, epoch, scheduler, path: Path, bar, cfg: TrainConfig) -> dict:
    sums = accelerator.reduce(window["loss_sums"].to(accelerator.device), reduction="sum").cpu()
    counts = accelerator.reduce(window["counts"].to(accelerator.device), reduction="sum").cpu().clamp_min(1)
    correct = accelerator.reduce(window["correct"].to(accelerator.device), reduction="sum").cpu()
    acc_counts = accelerator.reduce(window["acc_counts"].to(accelerator.device), reduction="sum").cpu().clamp_min(1)
    tokens = accelerator.reduce(torch.tensor(float(window["tokens"]), device=accelerator.device), reduction="sum")
    elapsed = max(1e-9, time.perf_counter() - window["t0"])
    rec = {"step": step, "epoch": epoch, "loss": window["loss"] / max(1, window["steps"]),
           "lr": scheduler.get_last_lr()[0], "tokens_per_s": float(tokens) / elapsed}
    rec.update({f"loss_{i}": float(v) for i, v in enumerate(sums / counts)})
    rec.update({f"acc_{i}": float(v) for i, v in enumerate(correct / acc_counts)})
    if accelerator.is_main_process:
        with path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        shown = {"loss": f"{rec['loss']:.3f}", **{f"acc_{i}": f"{rec[f'acc_{i}']:.2f}" for i in range(min(3, cfg.loss_slots))},
                 "tok/s": f"{rec['tokens_per_s']:.0f}"}
        bar.set_postfix(shown)
    if cfg.report_to == "wandb":
        accelerator.log(rec, step=step)
    return rec


def _finish(accelerator, model, cfg: TrainConfig, out_dir: Path, last: dict) -> dict:
    accelerator.wait_for_everyone()
    head = _whole_head(accelerator, model)
    summary = {"step": last.get("step"), "metrics": last, "head": str(out_dir / "head")}
    if accelerator.is_main_process:
        ckpt_io.save_pretrained(head, out_dir / "head", overwrite=True)
        if cfg.export and cfg.head.type == "dflash":
            summary["export_skipped"] = "DFlash exports are written by eaglehead export (not at the end of training)"
        elif cfg.export:
            try:
                ckpt_io.export_eagle3(head, out_dir / "export_eagle3", overwrite=True)
                summary["export_eagle3"] = str(out_dir / "export_eagle3")
            except ValueError as exc:  # e.g. an eagle1 ablation head: not an EAGLE-3 layout
                summary["export_skipped"] = str(exc)
                print(f"export skipped: {exc}")
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    # Every rank waits for the main one's files, then ends together: trackers closed and the process group torn
    # down. A rank that exited first with its gloo group alive could abort in the interpreter's teardown
    # (``terminate called without an active exception``, exit -6) after a run that succeeded.
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return summary
