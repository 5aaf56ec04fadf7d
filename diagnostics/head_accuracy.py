"""How often a head's drafts match what the target itself writes, depth by depth, without timing.

``python -m eaglehead.diagnostics.head_accuracy --head DIR [DIR ...] --target PATH --prompts SET [--max-prompts N]
[--max-new-tokens N] [--depth D] [--no-decode-check]``

For each prompt the target writes its greedy continuation; the head then runs its simulated rollout
over prompt + continuation (:func:`eaglehead.train.agreement.rollout_agreement`), giving the
conditional acceptance rate ``alpha_i`` at every draft depth and the greedy tau it predicts. The
measured first-draft acceptance of real gamma-1 speculative decoding on the same prompts is reported
next to ``alpha_1``: the two must agree up to which positions start a round (a check of the drafter
against the training code). This command is a diagnostic of its own because it joins both sides:
decoding (``eaglehead.decode``) and the training rollout (``eaglehead.train``).

``--target builtin:demo-target`` and ``--prompts demo-heldout`` use the demo's target and its held-out
standard-library excerpts. Prints one JSON object per head, one per line.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from eaglehead.builtin.corpus import heldout_excerpts
from eaglehead.builtin.models import load_target
from eaglehead.builtin.text import encode_prompt
from eaglehead.decode import SamplingConfig, speculative_generate, vanilla_generate
from eaglehead.decode.eagle import load_eagle_drafter
from eaglehead.eval.prompts import load_prompt_set
from eaglehead.train.agreement import predicted_greedy_tau, rollout_agreements


def head_accuracy(target, tok, head_dir: str, texts: list[str], *, max_new_tokens: int = 64,
                  depth: int = 5) -> dict:
    """One head's agreement by depth, the tau it predicts, and the measured gamma-1 acceptance beside it."""
    return heads_accuracy(target, tok, [head_dir], texts, max_new_tokens=max_new_tokens, depth=depth)[0]


def heads_accuracy(target, tok, head_dirs: list[str], texts: list[str], *, max_new_tokens: int = 64,
                   depth: int = 5, decode_check: bool = True) -> list[dict]:
    """:func:`head_accuracy` of several heads (a training's checkpoints, an ablation) on the same target
    continuations, generated once; the target's features are computed once per set of fused layers.
    ``decode_check=False`` skips the gamma-1 speculative decoding (the costly part: one decode per head)."""
    greedy = SamplingConfig(temperature=0.0)
    sequences = target_continuations(target, tok, texts, max_new_tokens=max_new_tokens)
    drafters = [load_eagle_drafter(d, target) for d in head_dirs]
    out = []
    for drafter, rec in zip(drafters, agreement_records(target, drafters, head_dirs, sequences, depth)):
        rec = {"head": rec.pop("head"), "prompts": len(texts), "max_new_tokens": max_new_tokens, **rec}
        if decode_check:
            accepted = rounds = 0
            for seq, prompt_len in sequences:
                spec = speculative_generate(target, drafter, seq[:, :prompt_len], gamma=1, sampling=greedy,
                                            max_new_tokens=max_new_tokens)
                accepted += sum(r.accepted[0] for r in spec.rounds)
                rounds += len(spec.rounds)
            rec.update(gamma1_first_draft_acceptance=round(accepted / max(rounds, 1), 4), gamma1_rounds=rounds)
        out.append(rec)
    return out


def target_continuations(target, tok, texts: list[str], *, max_new_tokens: int = 64) -> list[tuple[torch.Tensor, int]]:
    """``(prompt + the target's greedy continuation [1, T], prompt length)`` per text: what every head is
    measured on."""
    greedy = SamplingConfig(temperature=0.0)
    sequences = []
    for text in texts:
        ids = torch.tensor([encode_prompt(tok, text)])
        new = vanilla_generate(target, ids, sampling=greedy, max_new_tokens=max_new_tokens).tokens[0]
        sequences.append((torch.cat([ids, torch.tensor([new])], 1), ids.shape[1]))
    return sequences


def agreement_records(target, drafters: list, head_dirs: list, sequences: list[tuple[torch.Tensor, int]],
                      depth: int) -> list[dict]:
    """Per head (drafters from ``load_eagle_drafter``, named by ``head_dirs``): its agreement by depth over
    ``sequences`` (:func:`target_continuations`), the positions counted and the greedy tau it predicts."""
    agreements = rollout_agreements(target, [d.head for d in drafters], sequences, depth)
    out = []
    for head_dir, (correct, counts) in zip(head_dirs, agreements):
        acc = (correct / counts.clamp_min(1)).tolist()
        out.append({"head": str(head_dir), "accuracy_by_depth": [round(a, 4) for a in acc],
                    "positions_by_depth": counts.long().tolist(),
                    "predicted_greedy_tau_by_gamma": predicted_greedy_tau(acc)})
    return out


def load_texts(prompts: str, max_prompts: int) -> list[str]:
    """The first ``max_prompts`` prompt texts of a prompt set (``mt-bench``, ``humaneval``, a JSONL file) or of
    ``demo-heldout`` (the demo's held-out excerpts, 360 characters, as the demo cuts them). A ValueError
    names a prompt set that does not load."""
    if prompts == "demo-heldout":
        return [cut for _, cut in heldout_excerpts(360)][:max_prompts]
    return [pr.text for pr in load_prompt_set(prompts)][:max_prompts]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.diagnostics.head_accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--head", required=True, nargs="+",
                   help="head directory (eaglehead checkpoint, EAGLE-3 or speculators); several are measured on "
                        "the same continuations, one JSON line each")
    p.add_argument("--target", required=True, help="target path or hub id, or builtin:demo-target")
    p.add_argument("--prompts", required=True, help="JSONL prompt set, 'humaneval' or 'demo-heldout'")
    p.add_argument("--max-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--no-decode-check", action="store_true",
                   help="skip the measured gamma-1 acceptance (one speculative decode per head and prompt)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = p.parse_args(argv)
    for name in ("max_prompts", "max_new_tokens", "depth"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        texts = load_texts(args.prompts, args.max_prompts)
    except ValueError as exc:
        print(f"head_accuracy: error: {exc}", file=sys.stderr)
        return 2
    target, tok = load_target(args.target, dtype=torch.float32)
    for rec in heads_accuracy(target, tok, args.head, texts, max_new_tokens=args.max_new_tokens, depth=args.depth,
                              decode_check=not args.no_decode_check):
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
