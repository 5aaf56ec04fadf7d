"""Time one target forward of m new tokens over a cached prompt, plain ``F.linear`` against packed linears.

Usage::

    python -m eaglehead.eval.bench_linear [--target builtin:smollm2-135m-instruct --dtypes float32,bfloat16
                                           --tokens 1,2,4,8,16 --context 300 --threads 2 --repeats 7]

A speculative round costs one forward of its draft tokens (chain: gamma + 1, tree: nodes + 1), so ``T(m) / T(1)``
is what verification costs against plain decoding. For each dtype this loads the target twice in one process
(plain, then with :func:`eaglehead.decode.packed_linear.pack_linears`), checks the packed logits against the plain
ones (max abs difference, argmax agreement on a random prompt) and prints the minimum of ``--repeats`` timings of
``RaggedCacheLM.forward`` for every m, with the ratios side by side.
"""

from __future__ import annotations

import argparse
import time

import torch

from eaglehead.builtin.models import load_target
from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.packed_linear import pack_linears
from eaglehead.eval.plan_options import parse_int_list


def _times(model, tokens: list[int], context: int, repeats: int, vocab: int) -> dict[int, float]:
    lm = RaggedCacheLM(model)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(vocab, (1, context), generator=gen)
    out = {}
    for m in tokens:
        new = torch.randint(vocab, (1, m), generator=gen)
        best = float("inf")
        for _ in range(repeats + 1):  # the first is a warm-up
            lm.reset(1)
            lm.forward(prompt, last_only=True)
            t = time.perf_counter()
            lm.forward(new)
            best = min(best, time.perf_counter() - t)
        out[m] = best * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.eval.bench_linear", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    ap.add_argument("--tokens", default="1,2,4,6,8,16", help="new tokens m per forward")
    ap.add_argument("--context", type=int, default=300, help="cached prompt tokens before the timed forward")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    try:
        tokens = parse_int_list(args.tokens, "--tokens")
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if min(tokens) < 1:
        raise SystemExit(f"--tokens must be integers >= 1, got {args.tokens!r}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or any(d not in ("float32", "bfloat16") for d in dtypes):
        raise SystemExit(f"--dtypes must be float32 and/or bfloat16, got {args.dtypes!r}")
    for name in ("context", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{args.target}, {args.context}-token context, min of {args.repeats}, {torch.get_num_threads()} threads")
    for dtype in dtypes:
        model, _ = load_target(args.target, dtype=dtype)
        vocab = int(model.config.vocab_size)
        probe = torch.randint(vocab, (1, 64), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ref = model(probe).logits.float()
        plain = _times(model, tokens, args.context, args.repeats, vocab)
        n = pack_linears(model)
        with torch.no_grad():
            got = model(probe).logits.float()
        packed = _times(model, tokens, args.context, args.repeats, vocab)
        diff = (got - ref).abs().max().item()
        agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
        print(f"\n{dtype}: {n} linear layers packed; logits max |packed - plain| {diff:.2e}, argmax agreement "
              f"{agree:.3f}")
        rel = f"T(m)/T({tokens[0]})"
        print(f"{'m':>4} {'plain ms':>9} {rel:>10} {'packed ms':>10} {rel:>10} {'plain/packed':>13}")
        for m in tokens:
            print(f"{m:>4} {plain[m]:>9.1f} {plain[m] / plain[tokens[0]]:>10.2f} {packed[m]:>10.1f} "
                  f"{packed[m] / packed[tokens[0]]:>10.2f} {plain[m] / packed[m]:>12.2f}x")
        del model
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
