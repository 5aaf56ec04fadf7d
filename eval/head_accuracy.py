"""How often a head's drafts match what the target itself writes, depth by depth, without timing.

``python -m eaglehead.eval.head_accuracy --head DIR --target PATH --prompts SET [--max-prompts N]
[--max-new-tokens N] [--depth D]``

For each prompt the target writes its greedy continuation; the head then runs its simulated rollout
(the training-time test, ``train/rollout.py``) over prompt + continuation, and for draft depth
``i = 1..D`` we count how often its greedy draft equals the target's greedy token, at every position
of the continuation. The rollout feeds the true tokens at depths below ``i``, which are exactly the
drafts a greedy round has accepted so far: depth ``i``'s rate is the conditional acceptance rate
``alpha_i`` (averaged over positions rather than over round starts), and ``1 + sum_k prod_{i<=k}
alpha_i`` predicts greedy tau at each gamma without any timing noise. The measured first-draft
acceptance of real gamma-1 speculative decoding on the same prompts is reported next to ``alpha_1``:
the two must agree up to which positions start a round (a check of the drafter against the training
code).

``--target builtin:demo-target`` and ``--prompts demo-heldout`` use the demo's target and its held-out
standard-library excerpts. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def head_accuracy(target, tok, head_dir: str, texts: list[str], *, max_new_tokens: int = 64,
                  depth: int = 5) -> dict:
    from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
    from eaglehead.decode.eagle import load_eagle_drafter
    from eaglehead.train.features import OnlineFeatures
    from eaglehead.train.rollout import rollout

    from .runner import encode_prompt

    drafter = load_eagle_drafter(head_dir, target)
    head = drafter.head
    greedy = SamplingConfig(temperature=0.0)
    correct = torch.zeros(depth)
    counts = torch.zeros(depth)
    accepted = rounds = 0
    lm_w = target.get_output_embeddings().weight
    features = OnlineFeatures(target, list(head.config.fused_layer_ids))  # exactly what training feeds the head
    for text in texts:
        ids = torch.tensor([encode_prompt(tok, text)])
        new = vanilla_generate(target, ids, sampling=greedy, max_new_tokens=max_new_tokens).tokens[0]
        seq = torch.cat([ids, torch.tensor([new])], 1)
        loss_mask = torch.zeros_like(seq)
        loss_mask[:, ids.shape[1]:] = 1  # only the continuation: what decoding drafts
        batch = features({"input_ids": seq, "attention_mask": torch.ones_like(seq), "loss_mask": loss_mask})
        with torch.no_grad():
            out = rollout(head, batch, lm_w, depth=depth, labels="argmax")
        correct += out.correct
        counts += out.counts
        spec = speculative_generate(target, drafter, ids, gamma=1, sampling=greedy, max_new_tokens=max_new_tokens)
        accepted += sum(r.accepted[0] for r in spec.rounds)
        rounds += len(spec.rounds)
    acc = (correct / counts.clamp_min(1)).tolist()
    tau, run = [], 1.0
    for a in acc:
        run *= a
        tau.append(round((tau[-1] if tau else 1.0) + run, 3))
    return {"head": str(head_dir), "prompts": len(texts), "max_new_tokens": max_new_tokens,
            "accuracy_by_depth": [round(a, 4) for a in acc], "positions_by_depth": counts.long().tolist(),
            "predicted_greedy_tau_by_gamma": tau,
            "gamma1_first_draft_acceptance": round(accepted / max(rounds, 1), 4), "gamma1_rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eaglehead.train.builtin import resolve_target

    from .prompts import load_prompt_set

    p = argparse.ArgumentParser(prog="python -m eaglehead.eval.head_accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--head", required=True, help="head directory (eaglehead checkpoint, EAGLE-3 or speculators)")
    p.add_argument("--target", required=True, help="target path or hub id, or builtin:demo-target")
    p.add_argument("--prompts", required=True, help="JSONL prompt set, 'humaneval' or 'demo-heldout'")
    p.add_argument("--max-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = p.parse_args(argv)
    for name in ("max_prompts", "max_new_tokens", "depth"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_target(args.target)
    tok = AutoTokenizer.from_pretrained(path)
    target = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if args.prompts == "demo-heldout":  # the demo's held-out excerpts (360 characters, as the demo cuts them)
        from eaglehead.demo_target import heldout_excerpts

        texts = [cut for _, cut in heldout_excerpts(360)][: args.max_prompts]
    else:
        try:
            texts = [pr.text for pr in load_prompt_set(args.prompts)][: args.max_prompts]
        except ValueError as exc:
            print(f"head_accuracy: error: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(head_accuracy(target, tok, args.head, texts, max_new_tokens=args.max_new_tokens,
                                   depth=args.depth)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
