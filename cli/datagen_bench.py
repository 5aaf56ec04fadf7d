"""Regeneration throughput: eaglehead's chat-data sampler against ``transformers.generate`` at the same
batch size, on the same prompts, interleaved (A B A B ...) so both see the same machine load.

    python -m eaglehead.datagen_bench --target builtin:smollm2-135m-instruct --batch-size 32 \\
        --prompts 64 --max-new-tokens 512 --repeats 2 [--samplers inverse-cdf,exponential-race]

Prompts are standard-library seed prompts (``eaglehead.train.chat_data``), chat-templated, sorted by
length as the data generator does. Tokens counted = new tokens up to and including the first EOS, for
both. Prints tokens/s per method and repeat, and the ratio of the medians (one per eaglehead sampler).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from pathlib import Path

import torch

from eaglehead.builtin.models import load_target
from eaglehead.builtin.text import encode_prompt, eos_token_ids, left_pad, pad_token_id
from eaglehead.decode import SamplingConfig
from eaglehead.train.chat_data import stdlib_task_prompts

from .datagen import SAMPLERS, sample_stream, sampler_named


def _ours(model, rows, args, eos, pad, seed, sampler) -> int:
    toks, _ = sample_stream(model, rows, batch_size=args.batch_size, sampling=SamplingConfig(temperature=args.temperature),
                            max_new_tokens=args.max_new_tokens, eos_ids=eos, pad_id=pad,
                            generator=torch.Generator().manual_seed(seed), sampler=sampler)
    return sum(map(len, toks))


def _hf(model, rows, args, eos, pad, seed) -> int:
    torch.manual_seed(seed)
    n = 0
    for j in range(0, len(rows), args.batch_size):
        ids, mask = left_pad(rows[j:j + args.batch_size], pad, "cpu")
        out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=args.temperature, top_k=0,
                             top_p=1.0, max_new_tokens=args.max_new_tokens, eos_token_id=sorted(eos), pad_token_id=pad)
        for row in out[:, ids.shape[1]:].tolist():
            ends = [i for i, t in enumerate(row) if t in eos]
            n += ends[0] + 1 if ends else len(row)
    return n


def _steal_seconds() -> float | None:
    """CPU time the hypervisor gave other guests, all CPUs, from /proc/stat (None where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.datagen_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=512)  # the data config's cap
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--samplers", default="inverse-cdf",
                    help="comma-separated: how eaglehead draws each token (the data config's `sampler`: "
                         f"{', '.join(SAMPLERS)}); each is timed as its own method (transformers uses multinomial)")
    args = ap.parse_args(argv)
    samplers = [x.strip() for x in args.samplers.split(",") if x.strip()]
    for x in samplers:
        try:
            sampler_named(x)
        except ValueError as err:
            ap.error(f"--samplers: {err}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_target(args.target, dtype="float32", device="cpu")
    eos = eos_token_ids(model, tok)
    pad = pad_token_id(tok, eos)
    rows = sorted((encode_prompt(tok, p["prompt"]) for p in stdlib_task_prompts(args.prompts, seed=123)), key=len)
    methods = [(f"eaglehead/{x}", functools.partial(_ours, sampler=x)) for x in samplers] + [("hf-generate", _hf)]
    rates: dict[str, list[float]] = {name: [] for name, _ in methods}
    for r in range(args.repeats):
        for name, fn in methods[:: 1 if r % 2 == 0 else -1]:
            t0, cpu0, steal0 = time.perf_counter(), time.process_time(), _steal_seconds()
            n = fn(model, rows, args, eos, pad, seed=r)
            dt, cpu, steal1 = time.perf_counter() - t0, time.process_time() - cpu0, _steal_seconds()
            rates[name].append(n / dt)
            # CPU seconds of this process and the hypervisor's steal over the call: a slow call with little
            # steal and CPU = threads x wall was slowed inside the machine (memory bandwidth, frequency)
            steal = "" if steal0 is None or steal1 is None else f", steal {steal1 - steal0:5.1f} s"
            print(f"repeat {r} {name:28s} {n:6d} tokens {dt:7.1f} s {n / dt:7.1f} tok/s (cpu {cpu:7.1f} s{steal})",
                  flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"median tok/s (batch {args.batch_size}, {args.prompts} prompts, max_new_tokens {args.max_new_tokens}, "
          f"T={args.temperature}, torch threads {torch.get_num_threads()}): hf-generate {med['hf-generate']:.1f}")
    for name, _ in methods[:-1]:
        print(f"  {name}: {med[name]:.1f} tok/s, ratio {med[name] / med['hf-generate']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
