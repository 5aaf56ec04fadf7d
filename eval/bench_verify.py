"""Time one round's greedy verification: the general verifiers on the one-hot ``p`` against the greedy fast paths.

Usage::

    python -m eaglehead.eval.bench_verify [--vocab 49152 --gamma 5 --tree 16 --threads 2 --repeats 300]

For a target decoding greedily, ``verify_chain_greedy`` / ``verify_tree_greedy`` give the verdict of
``verify_chain(probs(logits), q, draft)`` / ``verify_tree(probs(logits), tree)`` (the tests prove it) without the
``[B, n+1, V]`` one-hot ``p`` and the exponential race over ``V`` that the general path draws. This prints the
median time of each, side by side in one process, at batch 1 in float32 and bfloat16 logits. The tree is a fixed
shape of ``--tree`` nodes (four children of the root, then two children for each node in turn; 16 nodes: depth 3).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from eaglehead.decode import (DraftTree, SamplingConfig, probs, verify_chain, verify_chain_greedy, verify_tree,
                              verify_tree_greedy)


def median_ms(fn, repeats: int) -> float:
    for _ in range(min(20, repeats)):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _tree(n: int, vocab: int, gen: torch.Generator) -> DraftTree:
    parents, depths = [-1] * min(4, n), [1] * min(4, n)
    for i in range(4, n):  # then two children for each node in turn: nodes 4, 5 under 0, 6, 7 under 1, ...
        parents.append((i - 4) // 2)
        depths.append(depths[(i - 4) // 2] + 1)
    return DraftTree(tokens=torch.randint(vocab, (1, n), generator=gen), parents=torch.tensor([parents]),
                     depths=torch.tensor([depths]), depth=max(depths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.eval.bench_verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=49152, help="target vocabulary (SmolLM2: 49152)")
    ap.add_argument("--gamma", type=int, default=5, help="chain drafts a round")
    ap.add_argument("--tree", type=int, default=16, help="tree nodes a round")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args(argv)
    for name in ("vocab", "gamma", "tree", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    greedy = SamplingConfig(temperature=0)
    tree = _tree(args.tree, args.vocab, gen)
    print(f"batch 1, vocabulary {args.vocab}, {torch.get_num_threads()} threads, median of {args.repeats}")
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.randn(1, args.gamma + 1, args.vocab, generator=gen).to(dtype)
        draft = logits[:, :-1].float().argmax(-1)
        draft[0, args.gamma // 2] = (draft[0, args.gamma // 2] + 1) % args.vocab  # a rejection mid-chain
        q = torch.nn.functional.one_hot(draft, args.vocab).float()
        chain = (median_ms(lambda: verify_chain(probs(logits, greedy), q, draft), args.repeats),
                 median_ms(lambda: verify_chain_greedy(logits, draft), args.repeats))
        tree_logits = torch.randn(1, args.tree + 1, args.vocab, generator=gen).to(dtype)
        trees = (median_ms(lambda: verify_tree(probs(tree_logits, greedy), tree), args.repeats),
                 median_ms(lambda: verify_tree_greedy(tree_logits, tree), args.repeats))
        for what, (general, fast) in ((f"chain, gamma {args.gamma}", chain), (f"tree, {args.tree} nodes", trees)):
            print(f"{str(dtype).removeprefix('torch.'):>9} logits, {what}: probs + general verifier {general:.3f} ms, "
                  f"greedy fast path {fast:.3f} ms ({general / fast:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
