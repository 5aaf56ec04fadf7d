"""The training recipe: an EAGLE-3 (or EAGLE-1 ablation) head on a frozen target, through accelerate.

    accelerate launch --config_file configs/accelerate/cpu.yaml -m eaglehead.train --config configs/smoke.yaml
    eaglehead train --config configs/llama3.1-8b.yaml optim.lr=5e-5 output_dir=runs/llama

Per optimizer step: ``grad_accum`` micro-batches per process; the loss of each rollout step is summed
over loss tokens and divided by the loss-token count of that step summed over every process and
micro-batch of the optimizer step, so the gradient is the exact global token mean whatever the
process count or padding. Checkpoints (``output_dir/checkpoints/step_N``) hold the head, optimizer,
scheduler, RNG states and the data position, written to a temporary directory and renamed, with a
``latest`` pointer replaced atomically; ``resume: auto`` continues from it. The run ends by saving
the head (``output_dir/head``) and exporting it in the EAGLE-3 layout (``output_dir/export_eagle3``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import yaml
from torch import nn

from eaglehead.builtin import models
from eaglehead.builtin.devices import native_bf16
from eaglehead.builtin.corpus import resolve_sources
from eaglehead.builtin.devices import resolve_dtype
from eaglehead.builtin.typed_config import changed_fields, dump_config, save_config
from eaglehead.draftheads import checkpoint as ckpt_io
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle1 import Eagle1Head
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.vocab import DEFAULT_DRAFT_VOCAB_SIZE, build_draft_vocab, coverage, resolve_draft_vocab_size

from .config import DataConfig, FeatureCacheConfig
from .dflash_recipe import DFlashSection
from .target_init import init_layer_from_target, init_output_from_target, target_output_weight  # noqa: F401
from .rollout import RolloutOutput, count_loss_tokens, deep_rows, rollout


@dataclass
class ModelConfig:
    target: str  # hub id or local path of the target causal LM
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU
    trust_remote_code: bool = False


@dataclass
class HeadConfig:
    type: Literal["eagle3", "eagle1", "dflash"] = "eagle3"  # dflash: the block drafter (its dflash: section)
    fused_layer_ids: list[int] | None = None  # default [2, L//2, L-3] (eagle1: [L])
    draft_vocab_size: int = DEFAULT_DRAFT_VOCAB_SIZE  # capped at the target vocabulary
    # eagle1: "full" (EAGLE-1 as published: the whole target vocabulary) or "draft" (draft_vocab_size, as
    # EAGLE-3: an ablation of layer fusion alone; at vocab 49152 the full output layer is 5x a reduced one)
    eagle1_vocab: Literal["full", "draft"] = "full"
    intermediate_size: int | None = None  # default: the target's
    init_from: str | None = None  # a head directory to start from
    # target: lm_head starts as the target's output rows of the draft vocabulary and the final norm as the
    # target's final RMSNorm (it raises held-out agreement: BENCHMARKS.md); random: PyTorch's default.
    lm_head_init: Literal["target", "random"] = "target"
    # target: the decoder layer starts as the target's last decoder layer (q/k/v read [embedding; feature]:
    # each half gets half the target's weights, so equal halves give the target's projections) and fc passes
    # the top fused feature through (an identity block added to its random init). On SmolLM2 it reached the
    # random init's step-150 agreement at step 100 (BENCHMARKS.md). random: PyTorch's default.
    layer_init: Literal["random", "target"] = "random"
    # EAGLE 3.1 is both true (either alone is an ablation; both false = EAGLE-3). fc_norm: an RMSNorm on each
    # fused target feature before fc. norm_output: the final-normed hidden (the one lm_head reads) is fed to the
    # next draft step instead of the pre-norm one. Same names as Eagle3Config and the engines' config.json keys.
    fc_norm: bool = False
    norm_output: bool = False


@dataclass
class RolloutConfig:
    depth: int = 7  # simulated self-fed steps (training-time test)
    decay: float = 0.8  # step i is weighted decay ** i
    checkpoint_attention: bool = True  # recompute attention in backward: memory linear in depth
    # soft: cross-entropy to the target's distribution over the draft vocabulary (EAGLE-3; serves sampling)
    # argmax: cross-entropy to the target's top token within it (what greedy acceptance counts)
    labels: Literal["soft", "argmax"] = "soft"
    # Steps 1.. run every deep_stride-th row only (rows are independent after step 0; which rows varies
    # batch to batch): 2 makes a depth-5 step cost 3 step-0s instead of 5. 1: every row at every step.
    deep_stride: int = 1

    def __post_init__(self):
        if self.depth < 1:
            raise ValueError(f"depth: expected >= 1, got {self.depth}")
        if self.deep_stride < 1:
            raise ValueError(f"deep_stride: expected >= 1 (1 = every row), got {self.deep_stride}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"decay: expected a value in (0, 1], got {self.decay}")


@dataclass
class OptimConfig:
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    warmup_steps: int = 100
    max_steps: int = 1000  # optimizer steps
    micro_batch_size: int = 1  # sequences per process per micro-batch
    grad_accum: int = 1
    max_grad_norm: float = 0.5
    # > 0: each epoch's shuffled sequences are sorted by length within windows of this many global
    # micro-batches, and the micro-batches are shuffled again, so a micro-batch holds sequences of
    # similar length (less padding; chat data varies 10x in length). 0: plain shuffled order.
    length_grouping: int = 0
    # bfloat16 autocast of the head's forward and loss (weights, gradients and optimizer state stay float32):
    # "auto" = on CUDA or a CPU with native bf16 (avx512_bf16 / amx_bf16), "none" = float32 throughout.
    autocast: Literal["none", "bfloat16", "auto"] = "none"
    # Learning-rate schedule after the warmup: "cosine" decays to 0 at max_steps; "wsd" (warmup-stable-decay) holds
    # the peak and decays linearly to 0 over the last decay_steps, so a long run can be stopped on its learning
    # curve: resume it with max_steps = the current step + decay_steps and it anneals from there.
    schedule: Literal["cosine", "wsd"] = "cosine"
    decay_steps: int = 0  # wsd only: steps of the final linear decay (0: none, the rate stays at its peak)

    def uses_autocast(self, device: torch.device) -> bool:
        """Whether this run's forward is autocast to bfloat16 on ``device``."""
        return self.autocast == "bfloat16" or (self.autocast == "auto" and native_bf16(device))

    def __post_init__(self):
        for name in ("max_steps", "micro_batch_size", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)}")
        if self.decay_steps < 0 or (self.schedule == "cosine" and self.decay_steps):
            raise ValueError(f"decay_steps: expected an integer >= 0, used only with schedule: wsd; got "
                             f"{self.decay_steps} with schedule {self.schedule!r}")
        if self.length_grouping < 0:
            raise ValueError(f"length_grouping: expected 0 (off) or a positive number of micro-batches, "
                             f"got {self.length_grouping}")
        if self.lr <= 0:
            raise ValueError(f"lr: expected > 0, got {self.lr}")


@dataclass
class TrainConfig:
    output_dir: str
    model: ModelConfig
    data: DataConfig
    features: FeatureCacheConfig = field(default_factory=FeatureCacheConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    dflash: DFlashSection = field(default_factory=DFlashSection)  # head.type: dflash only
    optim: OptimConfig = field(default_factory=OptimConfig)
    seed: int = 0
    log_every: int = 10
    # Top-1 agreement (acc_i) is measured on every accuracy_every-th step only: it needs the target's
    # full-vocabulary output product, which the loss (draft vocabulary only) does not.
    accuracy_every: int = 1
    save_every: int = 500  # optimizer steps between checkpoints (0: only at the end)
    keep_checkpoints: int = 2
    resume: str = "auto"  # auto | never | a checkpoint directory
    report_to: Literal["none", "wandb"] = "none"
    wandb_project: str = "eaglehead"
    export: bool = True  # export the final head in the EAGLE-3 layout

    def __post_init__(self):
        for name in ("log_every", "accuracy_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive number of steps, got {value!r}")
        if self.log_every % self.accuracy_every:
            raise ValueError(f"accuracy_every={self.accuracy_every} must divide log_every={self.log_every}, so "
                             "every logged window holds measured steps")

    @property
    def loss_slots(self) -> int:
        """Positions a step's loss is reported by: rollout steps (EAGLE) or block slots 1.. (DFlash)."""
        return self.dflash.block_size - 1 if self.head.type == "dflash" else self.rollout.depth

    def measures_accuracy(self, done: int) -> bool:
        """Whether optimizer step number ``done`` (1-based) measures top-1 agreement."""
        return done % self.accuracy_every == 0 or done == self.optim.max_steps


class RolloutModule(nn.Module):
    """The head plus its rollout loss behind ``forward``, so DDP/DeepSpeed see a normal forward call.

    The frozen target ``lm_head`` weight is a plain attribute: not a parameter, not a buffer, never
    wrapped, broadcast or saved.
    """

    def __init__(self, head: Eagle3Head, lm_head_weight: torch.Tensor, depth: int, decay: float, ckpt: bool,
                 labels: str = "soft", deep_stride: int = 1, logit_softcap: float | None = None):
        super().__init__()
        self.head = head
        self.__dict__["lm_head_weight"] = lm_head_weight
        self.depth, self.decay, self.ckpt, self.labels, self.deep_stride = depth, decay, ckpt, labels, deep_stride
        self.logit_softcap = logit_softcap

    def loss_token_counts(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss positions per rollout step ``[depth]`` of a token batch (before its features are computed)."""
        return count_loss_tokens(batch["loss_mask"], batch["attention_mask"], self.depth,
                                 deep_rows(batch["input_ids"], self.deep_stride))

    def forward(self, batch: dict[str, torch.Tensor], accuracy: bool = True) -> RolloutOutput:
        return rollout(self.head, batch, self.lm_head_weight, depth=self.depth, decay=self.decay,
                       checkpoint_attention=self.ckpt, labels=self.labels, accuracy=accuracy,
                       deep_stride=self.deep_stride, logit_softcap=self.logit_softcap)


def head_vocab_size(head: HeadConfig, target_vocab: int) -> int:
    """The head's output vocabulary: ``head.draft_vocab_size`` capped at the target's; an eagle1 head's is the
    full vocabulary unless ``eagle1_vocab: draft``."""
    if head.type == "eagle1" and head.eagle1_vocab == "full":
        return target_vocab
    return resolve_draft_vocab_size(head.draft_vocab_size, target_vocab)


def build_head(cfg: TrainConfig, target, token_counts: torch.Tensor | None) -> Eagle3Head:
    if cfg.head.init_from:
        head = ckpt_io.load_head(cfg.head.init_from, target_config=target.config)
        for name in ("fc_norm", "norm_output"):  # an architecture switch: the saved run config must tell the truth
            if getattr(head.config, name) != getattr(cfg.head, name):
                raise ValueError(f"head.{name}={getattr(cfg.head, name)}, but the head in head.init_from="
                                 f"{cfg.head.init_from} has {name}={getattr(head.config, name)}; set head.{name} "
                                 "to match it")
        return head
    overrides = {"fc_norm": cfg.head.fc_norm, "norm_output": cfg.head.norm_output}
    if cfg.head.fused_layer_ids is not None:
        overrides["fused_layer_ids"] = list(cfg.head.fused_layer_ids)
    if cfg.head.intermediate_size is not None:
        overrides["intermediate_size"] = cfg.head.intermediate_size
    overrides["target_name_or_path"] = models.hub_name(cfg.model.target)
    vocab = models.output_vocab_size(target)
    size = head_vocab_size(cfg.head, vocab)
    if cfg.head.type == "eagle1":
        head = Eagle1Head(Eagle1Head.config_from_target(target.config, draft_vocab_size=size, **overrides))
    else:
        head = Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=size, **overrides))
    if size < vocab:
        if token_counts is None:
            raise ValueError(
                f"head.draft_vocab_size={size} is smaller than the target vocabulary ({vocab}): the draft "
                f"vocabulary needs token counts, expected in {Path(cfg.output_dir) / VOCAB_FILE} or beside the "
                f"features in features.dir={cfg.features.dir} (eaglehead prepare writes them to its output_dir and "
                "to the feature cache it fills; train with either, or copy the file there)")
        head.set_vocab(*build_draft_vocab(token_counts, size))
    if cfg.head.lm_head_init == "target":
        init_output_from_target(head, target)
    if cfg.head.layer_init == "target":
        init_layer_from_target(head, target)
    return head


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * progress))


def lr_factor(opt: OptimConfig, step: int) -> float:
    """The learning rate at optimizer step ``step`` as a fraction of ``opt.lr`` (``opt.schedule``)."""
    if opt.schedule == "cosine" or step < opt.warmup_steps:  # the warmup is the same for both
        return cosine_with_warmup(step, opt.warmup_steps, opt.max_steps)
    start = opt.max_steps - opt.decay_steps
    return 1.0 if step < start else max(0.0, (opt.max_steps - step) / max(1, opt.decay_steps))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# What a checkpoint's weights and its run's data order mean. A launch that resumes a run may change its schedule
# (the anneal sets a later max_steps), batch split, threads, logging and saving; a change to one of these would
# train something else under the old run's name, so it is refused. ``None``: every field of the section.
_FIXED_ON_RESUME: dict[str | None, tuple[str, ...] | None] = {
    None: ("seed",),
    "model": ("target",),
    "head": None,
    "data": ("sources", "format", "split", "max_samples", "max_length", "chat_template", "system_prompt",
             "regenerate", "regen_temperature", "regen_max_new_tokens", "regen_enable_thinking", "test_fraction",
             "seed"),
    "features": ("dir",),
}
_WEIGHTS_ONLY = ("model", "head")  # what an explicitly named checkpoint must still match


def _field_defaults(obj) -> dict:
    """The declared default of each field of dataclass instance ``obj`` that has one."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def check_resumable(checkpoint: Path, cfg: TrainConfig, explicit: bool) -> None:
    """Refuse to resume ``checkpoint`` under a config that changes what its run trains.

    Compares the config the checkpoint was saved with (its ``config.yaml``; a field it predates counts at its
    default) with ``cfg`` on the fields of ``_FIXED_ON_RESUME``; ``explicit`` (``resume: <directory>``, a
    deliberate start from those weights, say on other data) checks the model and head only. Raises ValueError
    naming each changed key with both values.
    """
    saved_path = checkpoint / "config.yaml"
    if not saved_path.is_file():
        return  # written before checkpoints carried their config
    with saved_path.open() as f:
        saved = yaml.safe_load(f) or {}
    now = dump_config(cfg)
    before, after, absent = {}, {}, {}
    for section, names in _FIXED_ON_RESUME.items():
        if explicit and section not in _WEIGHTS_ONLY:
            continue
        if section is None:
            old, new, defaults, prefix = saved, now, {}, ""
        else:
            old, new, prefix = saved.get(section) or {}, now[section], f"{section}."
            defaults = _field_defaults(getattr(cfg, section))
        for name in names or new:
            after[prefix + name] = new[name]
            absent[prefix + name] = defaults.get(name, new[name])  # predates the field, no default: unchanged
            if name in old:
                before[prefix + name] = old[name]
    changed = [f"{key}: {a!r} -> {b!r}" for key, a, b in changed_fields(before, after, absent)]
    if changed:
        hint = ("give this run a new output_dir, or pass resume: never to start it over"
                if not explicit else "the checkpoint's weights belong to another model or head")
        raise ValueError(f"resume: the checkpoint {checkpoint} was trained with a different "
                         f"{'recipe' if not explicit else 'model or head'} ({'; '.join(changed)}); {hint}")


class CheckpointStore:
    """``checkpoints/step_N`` directories, renamed into place, plus an atomically replaced ``latest``."""

    def __init__(self, root: Path, keep: int):
        self.root, self.keep = root / "checkpoints", keep

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.is_file():
            return None
        path = self.root / pointer.read_text().strip()
        if not (path / "trainer_state.json").is_file():
            raise ValueError(f"checkpoint pointer {pointer} names {path}, which is incomplete; pass resume: never or "
                             "a checkpoint directory")
        return path

    def save(self, accelerator, step: int, state: dict, config: TrainConfig) -> Path:
        final = self.root / f"step_{step}"
        tmp = self.root / f".step_{step}.tmp"
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(tmp))  # model, optimizer, scheduler, RNG states of every process
        accelerator.wait_for_everyone()  # every rank's files are in tmp before it is renamed
        if accelerator.is_main_process:
            save_config(config, tmp / "config.yaml")
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)  # a crash before this line leaves the previous checkpoint intact
            _write_atomic(self.root / "latest", final.name)
            done = sorted((p for p in self.root.glob("step_*") if p.is_dir()), key=lambda p: int(p.name[5:]))
            for old in done[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        accelerator.wait_for_everyone()
        return final


def load_recipe_target(cfg: ModelConfig, device: torch.device):
    """The frozen target and its tokenizer (a hub id, a local path or a built-in name)."""
    target, tok = models.load_target(cfg.target, dtype=resolve_dtype(cfg.dtype, device.type), device=device,
                                      option="model.target", trust_remote_code=cfg.trust_remote_code)
    target.requires_grad_(False)
    return target, tok


VOCAB_FILE = "draft_vocab.safetensors"


def data_config(cfg: TrainConfig) -> DataConfig:
    """``cfg.data`` with built-in source names replaced by files (the saved config keeps the names)."""
    from dataclasses import replace

    return replace(cfg.data, sources=resolve_sources(cfg.data.sources))


def save_token_counts(output_dir: Path, counts: torch.Tensor) -> None:
    from safetensors.torch import save_file

    output_dir.mkdir(parents=True, exist_ok=True)
    tmp = output_dir / (VOCAB_FILE + ".tmp")
    save_file({"token_counts": counts.to(torch.int64).contiguous()}, str(tmp))
    os.replace(tmp, output_dir / VOCAB_FILE)


def load_token_counts(output_dir: Path) -> torch.Tensor | None:
    from safetensors.torch import load_file

    path = output_dir / VOCAB_FILE
    return load_file(str(path))["token_counts"] if path.is_file() else None


def recipe_token_counts(cfg: "TrainConfig") -> torch.Tensor | None:
    """The draft vocabulary's token counts for ``cfg``: from its output_dir, else from beside the feature
    cache (prepare writes both), else None."""
    counts = load_token_counts(Path(cfg.output_dir))
    if counts is None and cfg.features.dir:
        counts = load_token_counts(Path(cfg.features.dir))
    return counts


def describe_vocab(head: Eagle3Head, counts: torch.Tensor | None) -> str:
    size = head.config.draft_vocab_size
    if counts is None or size == head.config.target_vocab_size:
        return f"draft vocabulary: {size} tokens (the full target vocabulary)"
    return (f"draft vocabulary: {size} of {head.config.target_vocab_size} tokens, covering "
            f"{100 * coverage(counts, head.t2d.cpu()):.2f}% of loss-masked training tokens")


__all__ = [
    "TrainConfig", "ModelConfig", "HeadConfig", "RolloutConfig", "OptimConfig", "RolloutModule", "CheckpointStore",
    "build_head", "init_output_from_target", "cosine_with_warmup", "lr_factor", "load_recipe_target", "save_token_counts",
    "load_token_counts", "describe_vocab", "dump_config", "count_loss_tokens",
]
