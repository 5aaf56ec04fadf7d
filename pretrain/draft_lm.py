"""A draft LM for a real target: the smallest Llama that shares the target's tokenizer, trained on chat the
target wrote. It is the drafter of classic speculative sampling, the ``draft-lm`` peer of the EAGLE heads.

    python -m eaglehead.pretrain.draft_lm --config configs/smollm2-135m-instruct-draft-lm.yaml [key=value ...]

Rerun the same command after a kill: it continues from the last checkpoint (``out/checkpoint.pt``, written
every ``checkpoint_every`` steps) and ends with the very weights of an uninterrupted run (same machine, same
``threads``). Rerunning a finished run only checks its files. ``resume=false`` starts over.

Output, ``out``: a plain Hugging Face directory (``config.json``, ``generation_config.json``,
``model.safetensors`` in float16, the target's tokenizer files) that ``--draft-lm`` loads, ``train.log``
(one JSON line per evaluation), ``config.yaml`` (the resolved config) and ``recipe.json``: the exact command
(every key spelled out), each data file's sha256, the split, the steps, held-out loss and top-1 agreement
(of the trained float32 weights and of the float16 weights as shipped), package versions and the sha256 of
every file. Its ``inputs`` and ``key`` follow ``eaglehead.builtin.shipped`` (so it can be shipped like
the demo's draft LM).

Design:

* Texts: ``data`` is one chat JSONL file or a list of them, read in the order given. Every conversation
  is rendered with the target's chat template, exactly the token stream the target decodes (system turn
  included), concatenated in file order (the files one after the other) and packed into chunks of
  ``seq_len + 1`` tokens (the ChatML turn markers already separate conversations). Held out: the
  ``heldout_fraction`` of conversations with the smallest sha256 of their ``id`` (of their messages when
  they have none): whole conversations, a fixed set that does not depend on the file's order. With
  several files (whose ids may repeat) the hashed name is ``"<file index>:<id>"``; a single file keeps the
  plain ``id``, so its split and recipe key are those of a one-file recipe.
* Loss on assistant tokens only (``loss_on: assistant``; the mask of ``eaglehead.train.data``: the reply and
  its end-of-turn token), with user and system turns as context. A draft LM only ever proposes assistant
  tokens, the user turns at evaluation are written by people rather than by the target, and a model this
  small has no capacity to spare. ``loss_on: all`` trains on every token. Chunks without a loss token are
  dropped. Top-1 agreement is the share of loss positions where the draft's argmax is the token the
  target wrote (sampled at the data's temperature, so a lower bound on agreement with its greedy choice).
* Size: with a 49152-entry vocabulary the tied embedding is nearly the whole model (49152 x 64 = 3.1M of
  3.3M parameters at the default 2 layers x 64, 6.6 MB in float16); a narrow width keeps the file and
  the output projection (the bulk of a draft step) small, and two layers are the fewest that can copy
  from the context (an induction head needs a layer to read the previous token and one to match it).
* The loss is computed at the loss positions only: ``lm_head`` over the selected hidden states, (N, V),
  never the full (B, T, V) logits (0.8 GB in float32 for 8 x 512 tokens at V = 49152).
* Shared with the demo's recipe (:mod:`eaglehead.pretrain.demo_target`): packing, the seeded batch order, the
  warm-up + cosine schedule, AdamW with decay on matrices only. The batch order is a pure function of the
  seed and the step, so resuming replays it up to the checkpoint's step; no other randomness is drawn.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from eaglehead.builtin.devices import torch_threads
from eaglehead.builtin.shipped import RECIPE_VERSION, file_sha256, recipe_key, write_half_precision
from eaglehead.builtin.typed_config import dump_config, parse_config_args, save_config

from .chat_corpus import encode, pack, read_data, split_heldout
from .core import adamw, chunk_batches, lr_at, package_versions, spread

CHECKPOINT = "checkpoint.pt"
# Keys that change how a run is carried out, never what it computes (excluded from the recipe's inputs).
RUNTIME_KEYS = ("out", "resume", "progress", "checkpoint_every")


@dataclass
class DraftLMConfig:
    target: str  # whose tokenizer and chat template (a built-in name, a .gguf file, a directory or hub id)
    # Chat JSONL (one {"messages": [{"role", "content"}, ...]} per line): a file, or a list of files read in order.
    data: str | list[str]
    out: str  # the model directory to write
    layers: int = 2
    hidden: int = 64
    heads: int = 2
    intermediate: int = 256  # SwiGLU width
    seq_len: int = 512  # tokens per packed chunk
    batch: int = 8  # chunks per step
    steps: int = 400
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at the last step
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    loss_on: Literal["assistant", "all"] = "assistant"
    heldout_fraction: float = 0.05  # of the conversations
    eval_every: int = 100
    eval_chunks: int = 64  # chunks evaluated per split (evenly spaced); the final held-out figures use them too
    checkpoint_every: int = 50
    threads: int = 1  # torch threads during the run (bit-identical results need the same count)
    resume: bool = True
    progress: bool = True

    def __post_init__(self):
        for name in ("target", "out"):
            if not getattr(self, name):
                raise ValueError(f"{name}: expected a non-empty string")
        if isinstance(self.data, (list, tuple)):
            if not self.data or not all(isinstance(p, str) and p for p in self.data):
                raise ValueError(f"data: expected a file path or a non-empty list of file paths, got {self.data!r}")
            repeated = sorted({p for p in self.data if self.data.count(p) > 1})
            if repeated:
                raise ValueError(f"data: {', '.join(repeated)} listed more than once (each file is read once)")
            # A list of one file is that file: the same settings, split and recipe key as ``data: <file>``.
            self.data = self.data[0] if len(self.data) == 1 else list(self.data)
        elif not (isinstance(self.data, str) and self.data):
            raise ValueError(f"data: expected a file path or a non-empty list of file paths, got {self.data!r}")
        for name in ("layers", "hidden", "heads", "intermediate", "seq_len", "batch", "steps", "eval_every",
                     "eval_chunks", "checkpoint_every", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: expected a multiple of heads ({self.heads}), got {self.hidden}")
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup: expected a step count in [0, steps = {self.steps}), got {self.warmup}")
        if self.lr <= 0 or self.grad_clip <= 0 or self.weight_decay < 0:
            raise ValueError(f"lr, grad_clip: expected > 0 and weight_decay >= 0, got {self.lr}, {self.grad_clip}, "
                             f"{self.weight_decay}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio: expected a value in [0, 1], got {self.min_lr_ratio}")
        if not 0 < self.heldout_fraction < 1:
            raise ValueError(f"heldout_fraction: expected a value in (0, 1), got {self.heldout_fraction}")

    @property
    def data_files(self) -> list[str]:
        """The chat JSONL files of ``data``, in the order they are read."""
        return [self.data] if isinstance(self.data, str) else list(self.data)


def prepare_data(cfg: DraftLMConfig, tokenizer) -> tuple:
    """(train chunks, train masks, {split: (chunks, masks)} to evaluate, the data's record for recipe.json).

    Chunks are (n, seq_len + 1); each split is evaluated on the same ``eval_chunks`` evenly spaced chunks
    at every evaluation (held out: the whole split when it is smaller). The record of a single file holds its
    ``path`` and ``sha256``; that of several holds ``files``: [{path, sha256, conversations}, ...] in order
    (and no top-level ``sha256``); both hold the totals (conversations, split, chunks, loss tokens).
    """
    paths = cfg.data_files
    several = len(paths) > 1
    rows = read_data(paths)
    train_rows, heldout_rows = split_heldout(rows, cfg.heldout_fraction, by_file=several)
    what = ", ".join(paths)
    chunks, masks = pack(*encode(tokenizer, train_rows, cfg.loss_on, paths, cfg.progress), cfg.seq_len,
                         f"{what} (train split)")
    heldout = pack(*encode(tokenizer, heldout_rows, cfg.loss_on, paths), cfg.seq_len,
                   f"{what} (held-out split of {len(heldout_rows)} conversations; raise heldout_fraction)")
    eval_sets = {"heldout": tuple(spread(x, cfg.eval_chunks) for x in heldout),
                 "train": tuple(spread(x, cfg.eval_chunks) for x in (chunks, masks))}
    if several:
        source = {"files": [{"path": str(p), "sha256": file_sha256(Path(p)),
                             "conversations": sum(r[0] == i for r in rows)} for i, p in enumerate(paths)]}
        rule = "sha256('<file index>:<id>')"
    else:
        source, rule = {"path": str(paths[0]), "sha256": file_sha256(Path(paths[0]))}, "sha256(id)"
    record = {**source, "conversations": len(rows),
              "train_conversations": len(train_rows), "heldout_conversations": len(heldout_rows),
              "heldout_rule": f"the {cfg.heldout_fraction} of conversations with the smallest {rule}",
              "train_chunks": len(chunks), "train_loss_tokens": int(masks[:, 1:].sum()),
              "heldout_eval_chunks": len(eval_sets["heldout"][0]),
              "heldout_eval_loss_tokens": int(eval_sets["heldout"][1][:, 1:].sum())}
    return chunks, masks, eval_sets, record


# ----------------------------------------------------------------------------------------- model

def load_tokenizer(target: str):
    """(tokenizer, the target's config.json as a dict, or {} where the directory has none)."""
    from transformers import AutoTokenizer

    from eaglehead.builtin.models import check_model_name, resolve_target

    check_model_name(target, "target")
    path = resolve_target(target)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as err:
        raise ValueError(f"target {target!r}: cannot load its tokenizer ({err})") from None
    if tokenizer.chat_template is None:
        raise ValueError(f"target {target!r}: its tokenizer has no chat template (the draft learns the rendered chat)")
    config = Path(path) / "config.json"
    return tokenizer, json.loads(config.read_text()) if config.is_file() else {}


def model_config(cfg: DraftLMConfig, tokenizer, target_config: dict):
    """A Llama of ``cfg``'s shape in the target's vocabulary (its logits must cover the target's), tied embeddings."""
    from transformers import LlamaConfig

    vocab = int(target_config.get("vocab_size") or len(tokenizer))
    if len(tokenizer) > vocab:
        raise ValueError(f"target: its tokenizer has {len(tokenizer)} entries, more than its vocab_size {vocab}")
    special = {k: target_config.get(f"{k}_token_id", getattr(tokenizer, f"{k}_token_id")) for k in ("bos", "eos", "pad")}
    # The target's context, so that nothing refuses a prompt the target takes; training sees relative
    # distances up to seq_len, and RoPE degrades gracefully beyond them.
    positions = int(target_config.get("max_position_embeddings") or cfg.seq_len)
    return LlamaConfig(vocab_size=vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                       num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                       max_position_embeddings=positions, tie_word_embeddings=True,
                       **{f"{k}_token_id": v for k, v in special.items()})


def masked_loss(model, chunk, mask):
    """Mean cross-entropy over the loss targets of ``chunk`` (B, T + 1) with ``mask`` (B, T + 1)."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=chunk[:, :-1], use_cache=False).last_hidden_state  # (B, T, H)
    keep = mask[:, 1:]
    logits = model.lm_head(hidden[keep])  # (N, V): only the N loss positions
    return F.cross_entropy(logits, chunk[:, 1:][keep])


def evaluate(model, chunks, masks, batch: int) -> dict:
    """Mean loss and top-1 agreement with the data's next token over the loss targets of ``chunks``."""
    import torch
    import torch.nn.functional as F

    loss, hits, n = 0.0, 0, 0
    with torch.no_grad():
        for i in range(0, len(chunks), batch):
            c, keep = chunks[i:i + batch], masks[i:i + batch, 1:]
            hidden = model.model(input_ids=c[:, :-1], use_cache=False).last_hidden_state
            logits = model.lm_head(hidden[keep])  # (N, V)
            target = c[:, 1:][keep]
            loss += F.cross_entropy(logits, target, reduction="sum").item()
            hits += int((logits.argmax(-1) == target).sum())
            n += len(target)
    return {"loss": round(loss / n, 4), "top1": round(hits / n, 4)}


# -------------------------------------------------------------------------------------- the recipe

def command_for(cfg: DraftLMConfig, config_path: str) -> str:
    """The command that reproduces ``cfg`` whatever the YAML holds later: every key as an override."""
    def value(v):
        if isinstance(v, list):  # e.g. several data files: a JSON list, which the override reads back
            return shlex.quote(json.dumps(v))
        return json.dumps(v) if isinstance(v, bool) or v is None else shlex.quote(str(v))

    return f"python -m eaglehead.pretrain.draft_lm --config {shlex.quote(str(config_path))} " + " ".join(
        f"{f.name}={value(getattr(cfg, f.name))}" for f in fields(cfg))


def _inputs(cfg: DraftLMConfig, tokenizer, model, data: dict) -> dict:
    """Everything the weights depend on (its sha256 is the recipe key; a checkpoint resumes only under it)."""
    settings = {k: v for k, v in dump_config(cfg).items() if k not in RUNTIME_KEYS}
    vocab = tokenizer.backend_tokenizer.to_str() + (tokenizer.chat_template or "")
    return {"recipe_version": RECIPE_VERSION, "kind": "draft-lm", "settings": settings, "data": data,
            "tokenizer": {"source": cfg.target, "entries": len(tokenizer),
                          "sha256": hashlib.sha256(vocab.encode()).hexdigest()},
            "model": {"class": "LlamaForCausalLM", "parameters": model.num_parameters(),
                      "config": {k: v for k, v in model.config.to_diff_dict().items()
                                 if k not in ("transformers_version", "dtype")}}}


def _versions() -> dict:
    import eaglehead

    return package_versions() | {"eaglehead": eaglehead.__version__}


def _save_checkpoint(out: Path, state: dict) -> None:
    import torch

    torch.save(state, out / f"{CHECKPOINT}.tmp")
    os.replace(out / f"{CHECKPOINT}.tmp", out / CHECKPOINT)  # a kill while writing leaves the previous one


def _load_checkpoint(out: Path, inputs: dict, model, opt) -> dict | None:
    """Load the checkpoint into ``model`` and ``opt``; return the rest of its state (None without one)."""
    import torch

    path = out / CHECKPOINT
    if not path.is_file():
        return None
    state = torch.load(path, weights_only=True)
    if json.loads(state["inputs"]) != inputs:
        raise ValueError(f"{path}: this checkpoint was made with other settings, data or tokenizer; use another out "
                         "directory, or resume=false to start over")
    model.load_state_dict(state.pop("model"))
    opt.load_state_dict(state.pop("optimizer"))
    del state["inputs"]
    return state


def _write_artifact(model, tokenizer, out: Path, recipe: dict, heldout, batch: int) -> None:
    """The model directory in float16, file by file (each replaced atomically), recipe.json last."""
    half, recipe["files"] = write_half_precision(model, tokenizer, out)
    # The weights as shipped (float16, loaded back in float32): the rounding's cost, measured.
    shipped = evaluate(half.float().eval(), *heldout, batch)
    recipe["results"].update({"heldout_loss_shipped": shipped["loss"], "heldout_top1_shipped": shipped["top1"]})
    recipe["key"] = recipe_key(recipe)
    (out / "recipe.json.tmp").write_text(json.dumps(recipe, indent=1, sort_keys=True) + "\n")
    os.replace(out / "recipe.json.tmp", out / "recipe.json")


def _finished(out: Path, key: str) -> dict | None:
    """The recipe of a finished run with this key whose files are intact, else None."""
    path = out / "recipe.json"
    if not path.is_file():
        return None
    recipe = json.loads(path.read_text())
    intact = all((out / n).is_file() and file_sha256(out / n) == h for n, h in recipe.get("files", {}).items())
    return recipe if recipe.get("key") == key and recipe.get("status") == "complete" and intact else None


def train(cfg: DraftLMConfig, config_path: str | os.PathLike) -> dict:
    """Train (or resume) the draft LM per ``cfg``; write the model directory to ``cfg.out``; return the recipe.

    The torch thread count is ``cfg.threads`` for the run and restored afterwards."""
    import torch
    from transformers import LlamaForCausalLM

    out = Path(cfg.out)
    with torch_threads(cfg.threads):
        t0 = time.monotonic()
        tokenizer, target_config = load_tokenizer(cfg.target)
        train_chunks, train_masks, eval_sets, data = prepare_data(cfg, tokenizer)
        torch.manual_seed(cfg.seed)
        model = LlamaForCausalLM(model_config(cfg, tokenizer, target_config)).float().train()
        opt = adamw(model, cfg)
        inputs = _inputs(cfg, tokenizer, model, data)
        key = recipe_key({"inputs": inputs})
        done = _finished(out, key) if cfg.resume else None
        if done is not None:
            print(f"draft LM: {out} is complete and intact (recipe key {key[:12]}); nothing to do")
            return done
        state = _start(cfg, out, inputs, model, opt, config_path)
        results = _train_steps(cfg, out, state, inputs, model, opt, (train_chunks, train_masks), eval_sets)
        model.eval()
        per_step = cfg.batch * cfg.seq_len
        recipe = {"recipe_version": RECIPE_VERSION, "kind": "draft-lm", "inputs": inputs, "status": "complete",
                  "command": command_for(cfg, str(config_path)), "versions": _versions(), "log": "train.log",
                  "results": {"steps_done": state["step"], **{k: v for k, v in results.items() if k != "step"},
                              # Training steps only (evaluations excluded), summed over resumed runs.
                              "train_seconds": round(state["train_seconds"], 1),
                              "train_tokens_per_second": round(state["step"] * per_step
                                                               / max(state["train_seconds"], 1e-9)),
                              "resumed_at_steps": state["resumed_at"],
                              "wall_seconds_this_run": round(time.monotonic() - t0, 1)}}
        _write_artifact(model, tokenizer, out, recipe, eval_sets["heldout"], cfg.batch)
        (out / CHECKPOINT).unlink(missing_ok=True)  # the run is complete: recipe.json says so
        return recipe


def _start(cfg: DraftLMConfig, out: Path, inputs: dict, model, opt, config_path) -> dict:
    """The training state to continue from (the checkpoint's, restored into ``model`` and ``opt``, or a fresh
    one); writes the resolved config and rewrites ``train.log`` from the state's history."""
    out.mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        (out / CHECKPOINT).unlink(missing_ok=True)
    state = _load_checkpoint(out, inputs, model, opt) or {"step": 0, "log": [], "running": [],
                                                          "train_seconds": 0.0, "resumed_at": []}
    if state["step"]:
        state["resumed_at"].append(state["step"])
        print(f"draft LM: resuming from step {state['step']} ({out / CHECKPOINT})")
    save_config(cfg, out / "config.yaml")
    with (out / "train.log").open("w") as log:  # rewritten from the checkpoint's history
        log.write(f"# {command_for(cfg, str(config_path))}\n")
        log.writelines(json.dumps(entry) + "\n" for entry in state["log"])
    return state


def _train_steps(cfg: DraftLMConfig, out: Path, state: dict, inputs: dict, model, opt, train, eval_sets) -> dict:
    """The optimizer steps from ``state["step"]`` to ``cfg.steps``, evaluating and checkpointing on schedule;
    updates ``state`` and returns the last evaluation's results. ``train``: (chunks, masks) of the train split."""
    import torch
    from tqdm.auto import tqdm

    train_chunks, train_masks = train
    step = state["step"]
    batches = chunk_batches(len(train_chunks), cfg.batch, cfg.seed)
    for _ in range(step):  # replay the batch order up to the checkpoint
        next(batches)
    per_step = cfg.batch * cfg.seq_len
    bar = tqdm(total=cfg.steps * per_step, initial=step * per_step, unit="tok", unit_scale=True, desc="draft LM",
               disable=not cfg.progress, mininterval=5)
    results = state["log"][-1] if state["log"] else {}
    t_train = time.monotonic()
    while step < cfg.steps:
        idx = next(batches)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        loss = masked_loss(model, train_chunks[idx], train_masks[idx])  # chunks (batch, seq_len + 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        state["step"] = step
        state["running"].append(loss.item())
        bar.update(per_step)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            state["train_seconds"] += time.monotonic() - t_train
            results = _evaluate_and_log(cfg, out, state, model, eval_sets, len(train_chunks))
            bar.set_postfix(loss=results["running_train_loss"], heldout=results["heldout_loss"],
                            top1=results["heldout_top1"])
            t_train = time.monotonic()
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:  # the last: a kill while writing loses nothing
            state["train_seconds"] += time.monotonic() - t_train
            _save_checkpoint(out, {**state, "inputs": json.dumps(inputs), "model": model.state_dict(),
                                   "optimizer": opt.state_dict()})
            t_train = time.monotonic()
    bar.close()
    return results


def _evaluate_and_log(cfg: DraftLMConfig, out: Path, state: dict, model, eval_sets: dict, n_train_chunks: int) -> dict:
    """Held-out and train loss/top-1 at ``state["step"]``, appended to the state's log and to ``train.log``."""
    step = state["step"]
    model.eval()
    h, t = (evaluate(model, *eval_sets[k], cfg.batch) for k in ("heldout", "train"))
    model.train()
    results = {"step": step, "running_train_loss": round(sum(state["running"]) / len(state["running"]), 4),
               "heldout_loss": h["loss"], "heldout_top1": h["top1"], "train_loss": t["loss"],
               "train_top1": t["top1"], "epochs": round(step * cfg.batch / n_train_chunks, 3),
               "lr": lr_at(cfg, step - 1)}
    state["log"].append(results)
    state["running"] = []
    with (out / "train.log").open("a") as log:
        log.write(json.dumps(results) + "\n")
    return results


# ------------------------------------------------------------------------------------ command line

def main(argv: list[str] | None = None) -> int:
    cfg, config_path = parse_config_args(DraftLMConfig, argv, prog="python -m eaglehead.pretrain.draft_lm",
                                         description=__doc__.split("\n\n")[0],
                                         example="configs/smollm2-135m-instruct-draft-lm.yaml",
                                         override_example="steps=200 threads=2")
    recipe = train(cfg, config_path)
    print(json.dumps(recipe["results"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
