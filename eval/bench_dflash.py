"""What a DFlash block call costs next to the target: the numbers behind the recipe's layer count and block size.

Usage::

    python -m eaglehead.eval.bench_dflash [--target builtin:smollm2-135m-instruct] [--dtype bfloat16]
        [--layers 1,2,3,4] [--blocks 8,16] [--context 300] [--threads 2] [--repeats 30]

Side by side in one process, medians over ``--repeats`` after warm-up, batch 1, with a ``--context``-token prefix
cached in both models: one target decode step (one token; the unit), the target's verification forward of
``B`` tokens (a chain round verifies ``gamma + 1 = B`` of them), and one drafter call (the whole block
``[last, MASK x (B - 1)]`` through ``--layers`` layers over the cached context, then the shared output layer on the
``B - 1`` drafted slots). The drafters are freshly initialised from the target's shapes: cost does not depend on the
weights. Printed per row: the block call in units of a target token, and the drafter's parameters and float16 size
(the shipping limit is 20 MiB).
"""

from __future__ import annotations

import argparse

import torch

from eaglehead.builtin.kvcache import cache_keyword
from eaglehead.builtin.models import load_target
from eaglehead.draftheads.dflash import ContextCache, DFlashConfig, DFlashHead
from eaglehead.draftheads.taps import target_output_weight

from .bench_verify import median_ms
from .plan_options import parse_int_list


def _median_s(fn, repeats: int) -> float:
    return median_ms(fn, repeats) / 1e3


def random_ids(vocab_size: int, length: int, seed: int) -> torch.Tensor:
    """``[1, length]`` seeded ordinary token ids of any vocabulary (cost does not depend on the values)."""
    high = min(1000, vocab_size)
    return torch.randint(high // 10, high, (1, length), generator=torch.Generator().manual_seed(seed))


def target_costs(model, context: int, blocks: list[int], repeats: int) -> dict[str, float]:
    """Seconds of one decode step and of a ``B``-token verification forward after ``context`` cached tokens."""
    from transformers import DynamicCache

    ids = random_ids(model.config.vocab_size, context + max(blocks), seed=0)
    kw = cache_keyword(model)

    def forward(n: int):
        cache = DynamicCache(config=model.config)
        model(ids[:, :context], use_cache=True, **{kw: cache})
        def step():
            extra = cache.get_seq_length() - context
            if extra:
                cache.crop(-extra)  # back to the context (transformers 5: a negative count removes tokens)
            model(ids[:, context:context + n], use_cache=True, **{kw: cache})
        return step

    with torch.inference_mode():
        out = {"token": _median_s(forward(1), repeats)}
        out.update({f"verify_{b}": _median_s(forward(b), repeats) for b in blocks})
    return out


def block_cost(model, layers: int, block: int, context: int, repeats: int) -> tuple[float, int]:
    """(seconds of one drafter call, drafter parameters) for a fresh drafter of ``layers`` layers and ``block``."""
    cfg = DFlashConfig.from_target_config(model.config, mask_token_id=0, num_hidden_layers=layers, block_size=block)
    head = DFlashHead(cfg).to(next(model.parameters()).dtype).eval()
    head.bind_target(model, target_output_weight(model))
    cache = ContextCache.for_head(head, 1, capacity=context + block)
    fused = torch.randn(1, context, cfg.target_hidden_size * len(cfg.fused_layer_ids), dtype=head.dtype)
    with torch.inference_mode():
        cache.append(head.context_kv(head.context_states(fused), torch.arange(context)[None]))
        last, pos = torch.tensor([5]), torch.arange(context, context + block)[None]
        seconds = _median_s(lambda: head.draft_logits(last, pos, cache), repeats)
    own = sum(p.numel() for n, p in head.named_parameters())
    return seconds, own


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.eval.bench_dflash", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--layers", default="1,2,3,4")
    ap.add_argument("--blocks", default="8,16")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    try:
        layers = parse_int_list(args.layers, "--layers")
        blocks = parse_int_list(args.blocks, "--blocks")
    except ValueError as err:
        ap.error(str(err))
    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_target(args.target, dtype=args.dtype)
    base = target_costs(model, args.context, blocks, args.repeats)
    print(f"target {args.target} {args.dtype}, context {args.context}, {torch.get_num_threads()} threads: "
          f"one token {base['token'] * 1e3:.2f} ms")
    for b in blocks:
        print(f"  verification of {b} tokens: {base[f'verify_{b}'] / base['token']:.2f} target tokens")
    print("layers  block  block call ms  in target tokens  params  float16 MiB")
    for b in blocks:
        for n in layers:
            s, params = block_cost(model, n, b, args.context, args.repeats)
            print(f"{n:>6}  {b:>5}  {s * 1e3:>13.2f}  {s / base['token']:>16.2f}  {params / 1e6:>5.1f}M"
                  f"  {params * 2 / 2**20:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
