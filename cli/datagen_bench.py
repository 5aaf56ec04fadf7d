"""Regeneration throughput: eaglehead's chat-data sampler against ``transformers.generate`` at the same
batch size, on the same prompts, interleaved (A B A B ...) so both see the same machine load.

    python -m eaglehead.datagen_bench --target builtin:smollm2-135m-instruct --batch-size 32 \\
        --prompts 64 --max-new-tokens 512 --repeats 2

Prompts are standard-library seed prompts (``eaglehead.train.chat_data``), chat-templated, sorted by
length as the data generator does. Tokens counted = new tokens up to and including the first EOS, for
both. Prints tokens/s per method and repeat, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from eaglehead.builtin.models import load_target
from eaglehead.builtin.text import encode_prompt, eos_token_ids, left_pad, pad_token_id
from eaglehead.decode import SamplingConfig
from eaglehead.train.chat_data import stdlib_task_prompts

from .datagen import sample_stream


def _ours(model, rows, args, eos, pad, seed) -> int:
    toks, _ = sample_stream(model, rows, batch_size=args.batch_size, sampling=SamplingConfig(temperature=args.temperature),
                            max_new_tokens=args.max_new_tokens, eos_ids=eos, pad_id=pad,
                            generator=torch.Generator().manual_seed(seed))
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.datagen_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=512)  # the data config's cap
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_target(args.target, dtype="float32", device="cpu")
    eos = eos_token_ids(model, tok)
    pad = pad_token_id(tok, eos)
    rows = sorted((encode_prompt(tok, p["prompt"]) for p in stdlib_task_prompts(args.prompts, seed=123)), key=len)
    rates: dict[str, list[float]] = {"eaglehead": [], "hf-generate": []}
    for r in range(args.repeats):
        for name, fn in (("eaglehead", _ours), ("hf-generate", _hf))[:: 1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            n = fn(model, rows, args, eos, pad, seed=r)
            dt = time.perf_counter() - t0
            rates[name].append(n / dt)
            print(f"repeat {r} {name:12s} {n:6d} tokens {dt:7.1f} s {n / dt:7.1f} tok/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"median tok/s: eaglehead {med['eaglehead']:.1f}, hf-generate {med['hf-generate']:.1f}; "
          f"ratio {med['eaglehead'] / med['hf-generate']:.2f}x (batch {args.batch_size}, {args.prompts} prompts, "
          f"max_new_tokens {args.max_new_tokens}, T={args.temperature}, torch threads {torch.get_num_threads()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
