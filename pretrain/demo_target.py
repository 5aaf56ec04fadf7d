"""The demo's target LM: a small Llama trained once on the Python standard library, shipped with its recipe.

Reproduce the shipped artifact (``builtin/assets/demo_target/``) exactly, on one CPU thread::

    python -m eaglehead.pretrain.demo_target build --out builtin/assets/demo_target --steps 1500

(``recipe.json`` holds the exact command, with every setting spelled out.) Time one training step of
a configuration without data: ``python -m eaglehead.pretrain.demo_target bench [--layers 10 --width 192]``.

This module is the training recipe only; its packing, batch order, learning-rate schedule and optimizer
(:mod:`eaglehead.pretrain.core`) are shared with :mod:`eaglehead.pretrain.draft_lm` (draft LMs for real targets). The corpus and its held-out split are
:mod:`eaglehead.builtin.corpus`; locating, verifying and loading the shipped artifact is
:mod:`eaglehead.builtin.shipped`. The measurements behind each choice are in BENCHMARKS.md.

Design:

* Vocabulary 4096, byte-level BPE: a small tied embedding and a cheap output softmax in every target
  and draft-head step, and each entry is seen often in a few million training tokens.
* 10 layers x 192, 3 heads of 64, SwiGLU 512, tied embeddings. A decoding step of a model this small is
  call overhead plus a per-layer cost almost independent of width, so depth sets the target's step
  cost and width sets the training cost; a fixed CPU budget is better spent on more tokens than on
  more parameters. Repeating data for a few epochs costs almost nothing (Muennighoff et al. 2023), and
  deep-and-thin beats wide-and-shallow at this size (MobileLLM, Liu et al. 2024).
* AdamW (0.9, 0.95), weight decay 0.1 on matrices only, peak lr 1.5e-3, 100 warm-up steps, cosine to
  10 %, gradient clipping at 1.0, batches of 16 packed chunks of 256 tokens with ``<|endoftext|>``
  after every file. No dropout: 2.5 epochs do not overfit a model this size.
* Reproducibility: fixed seeds, a seeded permutation per epoch over the chunks, one thread (CPU kernels
  are then deterministic) and a schedule fixed by the step count, never by wall time. ``--seconds`` only
  stops the run early; the artifact then records ``--stop-at`` so its command still reproduces it. The
  same machine and torch build gives bit-identical weights; other CPUs may differ in the last bits.
* The artifact (rewritten every ~10 minutes, so a usable target exists before the end) is the
  ``save_pretrained`` layout in float16 (10 mantissa bits against bfloat16's 7: closer to the trained
  float32 weights, and the range is ample for weights of this size). Decoding loads it in float32
  (``eaglehead.builtin.shipped.load_demo_target``); ``from_pretrained`` would default to the stored float16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from eaglehead.builtin.corpus import HELDOUT_FRACTION, corpus_fingerprint, corpus_split
from eaglehead.builtin.devices import torch_threads
from eaglehead.builtin.shipped import RECIPE_VERSION, recipe_key, write_half_precision

from .core import adamw, chunk_batches, lr_at, pack_stream, package_versions, spread

EOS = "<|endoftext|>"
_ARTIFACT_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json")


# -------------------------------------------------------------------------------------- tokenizer

def train_tokenizer(texts: list[str], vocab_size: int, seq_len: int):
    """Byte-level BPE over ``texts`` with ``<|endoftext|>`` as id 0 (eos and pad), as a PreTrainedTokenizerFast.

    Training is deterministic: two runs over the full corpus gave the same tokenizer.json, and the
    reproducibility test compares two builds' tokenizer.json byte for byte.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 512:
        raise ValueError(f"vocab_size: expected at least 512 (256 bytes + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, model_max_length=seq_len)


# ----------------------------------------------------------------------------------------- recipe

@dataclass(frozen=True)
class Settings:
    """Every input of a build; the command-line flags are these names with dashes."""

    steps: int = 1500
    vocab: int = 4096
    layers: int = 10
    width: int = 192
    heads: int = 3
    intermediate: int = 512
    seq_len: int = 256
    batch: int = 16
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1234
    eval_every: int = 100
    eval_chunks: int = 32
    corpus_limit: int = 0          # 0: the whole corpus; n: the first n train and n held-out files

    def validate(self) -> None:
        may_be_zero = ("corpus_limit", "min_lr_ratio", "weight_decay", "warmup")
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0 or (value == 0 and f.name not in may_be_zero):
                raise ValueError(f"--{f.name.replace('_', '-')}: expected a positive value, got {value}")
        if self.width % self.heads:
            raise ValueError(f"--width: expected a multiple of --heads ({self.heads}), got {self.width}")
        if self.warmup >= self.steps:
            raise ValueError(f"--warmup: expected fewer than --steps ({self.steps}) steps, got {self.warmup}")


def model_config(s: Settings, eos_id: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=s.vocab, hidden_size=s.width, intermediate_size=s.intermediate,
                       num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.heads,
                       max_position_embeddings=s.seq_len, tie_word_embeddings=True, bos_token_id=eos_id,
                       eos_token_id=eos_id, pad_token_id=eos_id)


def command_for(s: Settings, out: str, stop_at: int | None) -> str:
    flags = " ".join(f"--{f.name.replace('_', '-')} {getattr(s, f.name)}" for f in fields(s))
    return f"python -m eaglehead.pretrain.demo_target build --out {out} {flags}" + (f" --stop-at {stop_at}" if stop_at else "")


# --------------------------------------------------------------------------------------- training

def _pack(tokenizer, files: list[tuple[str, str]], seq_len: int):
    """Token stream of ``files`` with ``<|endoftext|>`` after each, cut into chunks: (n_chunks, seq_len + 1)."""
    import torch

    rows = tokenizer.backend_tokenizer.encode_batch([text for _, text in files], add_special_tokens=False)
    stream = torch.tensor([t for row in rows for t in row.ids + [tokenizer.eos_token_id]], dtype=torch.long)
    return pack_stream(stream, seq_len, "corpus", "--seq-len")


def _mean_loss(model, chunks, batch: int) -> float:
    """Mean next-token cross-entropy over ``chunks`` (n, seq_len + 1), every chunk the same length."""
    import torch
    import torch.nn.functional as F

    total = 0.0
    with torch.no_grad():
        for i in range(0, len(chunks), batch):
            c = chunks[i:i + batch]
            logits = model(input_ids=c[:, :-1], use_cache=False).logits  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1), c[:, 1:].flatten(), reduction="sum").item()
    return total / chunks[:, 1:].numel()


def _save(model, tokenizer, out: Path, recipe: dict, eval_sets: dict, batch: int) -> None:
    """Write the shipped layout into ``out`` file by file (each replaced atomically), recipe.json last."""
    half, hashes = write_half_precision(model, tokenizer, out, _ARTIFACT_FILES)
    recipe["files"] = {name: hashes[name] for name in _ARTIFACT_FILES if name in hashes}
    # Loss of the weights as shipped (float16, loaded back in float32): the rounding's cost, measured.
    shipped = half.float().eval()
    recipe["results"].update({f"{k}_loss_shipped": round(_mean_loss(shipped, v, batch), 4)
                              for k, v in eval_sets.items()})
    (out / "recipe.json.tmp").write_text(json.dumps(recipe, indent=1, sort_keys=True) + "\n")
    os.replace(out / "recipe.json.tmp", out / "recipe.json")


def _recipe_inputs(s: Settings, train_files, heldout_files, train_chunks, model) -> dict:
    """Everything a build depends on, as recorded in recipe.json (its sha256 is the recipe key)."""
    return {"recipe_version": RECIPE_VERSION, "settings": asdict(s),
            "corpus": {"fingerprint": corpus_fingerprint(train_files + heldout_files),
                       "train_files": len(train_files), "heldout_files": len(heldout_files),
                       "heldout_rule": f"sha256(id)[:8] < {HELDOUT_FRACTION} * 2**64",
                       "train_tokens": int(train_chunks[:, 1:].numel())},
            "tokenizer": {"model": "byte-level BPE", "vocab_size": s.vocab, "min_frequency": 2,
                          "special_tokens": [EOS], "eos_pad": EOS},
            "model": {"class": "LlamaForCausalLM", "parameters": model.num_parameters(),
                      "config": {k: v for k, v in model.config.to_diff_dict().items()
                                 if k not in ("transformers_version", "dtype")}}}


def _recipe(s: Settings, out: str, inputs: dict, step: int, versions: dict, results: dict) -> dict:
    """recipe.json of the weights after ``step`` steps (``partial`` before ``s.steps``), keyed by its inputs."""
    stopped = None if step == s.steps else step
    recipe = {"recipe_version": RECIPE_VERSION, "inputs": inputs | {"stop_at": step},
              "status": "complete" if step == s.steps else "partial", "versions": versions,
              "command": command_for(s, out, stopped), "results": results, "log": "train.log"}
    recipe["key"] = recipe_key(recipe)
    return recipe


def build(s: Settings, out: str | os.PathLike, seconds: float | None = None, stop_at: int | None = None,
          threads: int = 1, save_every_seconds: float = 600.0, progress: bool = True,
          desc: str = "demo target") -> dict:
    """Train the tokenizer and the target per ``s``; write the artifact to ``out``; return the recipe dict.

    ``seconds`` and ``stop_at`` end the run early without changing the schedule (the artifact records the
    step it stopped at). The torch thread count is set to ``threads`` for the run and restored afterwards.
    """
    import torch
    from tqdm import tqdm
    from transformers import LlamaForCausalLM

    s.validate()
    if stop_at is not None and not 1 <= stop_at <= s.steps:
        raise ValueError(f"--stop-at: expected a step in [1, --steps {s.steps}], got {stop_at}")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch_threads(threads):
        t0 = time.monotonic()
        train_files, heldout_files = corpus_split(s.corpus_limit or None)
        tokenizer = train_tokenizer([text for _, text in train_files], s.vocab, s.seq_len)
        train_chunks = _pack(tokenizer, train_files, s.seq_len)      # (n_train, seq_len + 1)
        eval_sets = {"train": spread(train_chunks, s.eval_chunks),
                     "heldout": spread(_pack(tokenizer, heldout_files, s.seq_len), s.eval_chunks)}
        torch.manual_seed(s.seed)
        model = LlamaForCausalLM(model_config(s, tokenizer.eos_token_id)).float().train()
        opt = adamw(model, s)
        versions = package_versions()
        inputs = _recipe_inputs(s, train_files, heldout_files, train_chunks, model)
        log = open(out_dir / "train.log", "w")
        log.write(f"# {command_for(s, str(out), stop_at)}\n# versions {json.dumps(versions)}\n")
        last = s.steps if stop_at is None else stop_at
        results: dict = {}
        running, last_save = [], time.monotonic()
        bar = tqdm(total=last, disable=not progress, mininterval=30, desc=desc)
        batches = chunk_batches(len(train_chunks), s.batch, s.seed)
        step = 0
        while step < last:
            chunk = train_chunks[next(batches)]                            # (batch, seq_len + 1)
            for group in opt.param_groups:
                group["lr"] = lr_at(s, step)
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits  # (batch, seq_len, vocab)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            opt.step()
            step += 1
            running.append(loss.item())
            bar.update(1)
            timed_out = seconds is not None and time.monotonic() - t0 > seconds
            done = step == last or timed_out
            if step % s.eval_every != 0 and not done:
                continue
            model.eval()
            results = {"steps_done": step, "running_train_loss": round(sum(running) / len(running), 4),
                       **{f"{k}_loss": round(_mean_loss(model, v, s.batch), 4) for k, v in eval_sets.items()},
                       "epochs": round(step * s.batch / len(train_chunks), 3),
                       "wall_seconds": round(time.monotonic() - t0, 1)}
            running = []
            log.write(json.dumps(results | {"lr": lr_at(s, step - 1)}) + "\n")
            log.flush()
            bar.set_postfix(loss=results["running_train_loss"], heldout=results["heldout_loss"])
            # Saved only right after an evaluation, so that recipe.json's losses describe the saved weights.
            if done or time.monotonic() - last_save > save_every_seconds:
                recipe = _recipe(s, str(out), inputs, step, versions, results)
                _save(model, tokenizer, out_dir, recipe, eval_sets, s.batch)
                last_save = time.monotonic()
            model.train()
            if timed_out:
                break
        bar.close()
        log.close()
        return recipe


def bench_step(s: Settings, steps: int = 3, threads: int = 1) -> dict:
    """Seconds per training step of ``s``'s model on random tokens (one warm-up step not counted)."""
    import torch
    from transformers import LlamaForCausalLM

    s.validate()
    with torch_threads(threads):
        torch.manual_seed(s.seed)
        model = LlamaForCausalLM(model_config(s, 0)).float().train()
        opt = adamw(model, s)
        chunk = torch.randint(0, s.vocab, (s.batch, s.seq_len + 1))
        times = []
        for _ in range(steps + 1):
            t = time.perf_counter()
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t)
        return {"parameters": model.num_parameters(), "seconds_per_step": round(sum(times[1:]) / steps, 3),
                "threads": threads}


# ------------------------------------------------------------------------------------ command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eaglehead.pretrain.demo_target", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="train the tokenizer and the target, write the artifact")
    bench = sub.add_parser("bench", help="seconds per training step of a configuration, on random tokens")
    for p in (b, bench):
        for f in fields(Settings):
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
        p.add_argument("--threads", type=int, default=1, help="torch threads (1: bit-reproducible)")
    b.add_argument("--out", required=True, help="artifact directory (written every ~10 minutes, then at the end)")
    b.add_argument("--seconds", type=float, default=None, help="stop after this much wall time (schedule unchanged)")
    b.add_argument("--stop-at", type=int, default=None, help="stop after this step (schedule unchanged)")
    b.add_argument("--save-every-seconds", type=float, default=600.0)
    b.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    bench.add_argument("--bench-steps", type=int, default=3)
    args = parser.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    if args.cmd == "bench":
        print(json.dumps(bench_step(settings, steps=args.bench_steps, threads=args.threads)))
        return 0
    recipe = build(settings, args.out, seconds=args.seconds, stop_at=args.stop_at, threads=args.threads,
                   save_every_seconds=args.save_every_seconds, progress=not args.no_progress)
    print(json.dumps(recipe["results"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
