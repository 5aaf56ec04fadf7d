"""The ``eaglehead`` command line: one thin module wiring the subcommands to the packages.

    eaglehead generate --target PATH (--draft PATH | --prompt-lookup) --prompt TEXT [--gamma 4 | --tree 6,4,16]
    eaglehead prepare --config configs/NAME.yaml [--cache-features DIR] [key=value ...]
    eaglehead prepare --data-config configs/NAME-data.yaml [key=value ...]   (chat data the target writes)
    eaglehead train --config configs/NAME.yaml [key=value ...]      (one process; see accelerate launch)
    eaglehead export CKPT --format eagle3|speculators --out DIR
    eaglehead export CKPT --format gguf --target TARGET.gguf --out head.gguf   (llama.cpp's EAGLE-3 drafter)
    eaglehead eval --target PATH --draft PATH --prompts SET [...]
    eaglehead demo [--out DIR] [--retrain [--head-steps N]] [--target demo | smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eaglehead.decode import DEFAULT_GAMMA
from eaglehead.eval.plan import CPU_LINEAR, CPU_LINEAR_HELP, add_eval_arguments


def cmd_generate(args) -> int:
    import torch

    from eaglehead.builtin.devices import resolve_dtype
    from eaglehead.builtin.models import load_causal_lm, load_target
    from eaglehead.builtin.text import encode_prompt, eos_token_ids
    from eaglehead.decode import (
        DraftModelDrafter,
        PromptLookupDrafter,
        SamplingConfig,
        speculative_generate,
        vanilla_generate,
    )
    from eaglehead.decode.drafters import output_vocab_size
    from eaglehead.draftheads.checkpoint import head_layout

    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    tree = _tree_option(args.tree)  # before any model is loaded
    dtype = resolve_dtype(args.dtype)
    target, tok = load_target(args.target, dtype=dtype, device=args.device)
    ids = torch.tensor([encode_prompt(tok, args.prompt, chat=args.chat)], device=args.device)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)

    printed = [""]
    out_ids: list[int] = []

    def on_token(row: int, token: int, t: float) -> None:
        out_ids.append(token)
        text = tok.decode(out_ids, skip_special_tokens=True)
        sys.stdout.write(text[len(printed[0]):])
        sys.stdout.flush()
        printed[0] = text

    common = dict(sampling=sampling, max_new_tokens=args.max_new_tokens, eos_token_id=sorted(eos_token_ids(target, tok)),
                  generator=gen, on_token=on_token)
    if args.prompt_lookup:
        drafter = PromptLookupDrafter(output_vocab_size(target))
    elif args.draft and head_layout(args.draft) is not None:
        from eaglehead.decode.eagle import load_eagle_drafter

        drafter = load_eagle_drafter(args.draft, target, device=args.device, dtype=dtype)
        if tree is not None:
            from eaglehead.decode.tree_draft import EagleTreeDrafter

            drafter = EagleTreeDrafter(drafter.head, target)
    elif args.draft:
        drafter = DraftModelDrafter(load_causal_lm(args.draft, dtype=dtype, device=args.device, option="--draft"))
    else:
        drafter = None
    if tree is not None and not hasattr(drafter, "propose_tree"):
        raise SystemExit("--tree needs --draft with an EAGLE-3/EAGLE-1 head directory (trees are drafted by its head)")
    if args.cpu_linear == "packed":
        from eaglehead.decode.packed_linear import pack_linears

        for module in (target, getattr(drafter, "head", None), getattr(drafter, "model", None)):
            if isinstance(module, torch.nn.Module):
                pack_linears(module)
    if tree is not None:
        from eaglehead.decode import tree_generate

        res = tree_generate(target, drafter, ids, depth=tree[0], topk=tree[1], tokens=tree[2], **common)
    elif drafter is None:
        res = vanilla_generate(target, ids, **common)
    else:
        res = speculative_generate(target, drafter, ids, gamma=args.gamma, **common)
    sys.stdout.write("\n")
    n = len(res.tokens[0])
    wall = res.t_end - res.t_start
    print(f"[{n} tokens in {len(res.rounds)} target rounds, tau={n / max(1, len(res.rounds)):.2f} "
          f"(includes the correction/bonus token), {1000 * wall / max(1, n):.1f} ms/token]", file=sys.stderr)
    return 0


def _tree_option(text: str | None) -> tuple[int, int, int] | None:
    """``--tree depth,topk,tokens`` as three integers >= 1 (tokens = verified draft nodes, root excluded)."""
    if text is None:
        return None
    from eaglehead.decode.tree_draft import check_tree_shape

    try:
        depth, topk, tokens = (int(v) for v in text.split(","))
        check_tree_shape(depth, topk, tokens)
    except ValueError as err:
        raise SystemExit(f"--tree must be depth,topk,tokens (integers >= 1), got {text!r} ({err})") from None
    return depth, topk, tokens


def _train_config(args):
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.train.recipe import TrainConfig

    return load_config(TrainConfig, args.config, args.overrides)


def cmd_prepare(args) -> int:
    if not (args.config or args.data_config):
        raise ValueError("eaglehead prepare needs --config (training data) and/or --data-config (chat data)")
    if args.assemble_only and not args.data_config:
        raise ValueError("eaglehead prepare --assemble-only builds chat data from its shards: it needs --data-config")
    if args.data_config:  # chat data the target writes itself (resumable), before any tokenising
        from eaglehead.builtin.typed_config import load_config
        from eaglehead.datagen import ChatDataConfig, run

        # key=value overrides go to the training config when both are given.
        cfg = load_config(ChatDataConfig, args.data_config, [] if args.config else args.overrides)
        manifest = run(cfg, assemble_only=args.assemble_only)
        print(f"[prepare] {manifest['conversations']} conversations, {manifest['answer_tokens']} answer tokens "
              f"-> {Path(cfg.out_dir) / manifest['file']}")
        if not args.config:
            return 0
    from eaglehead.train.prepare import prepare

    prepare(_train_config(args), cache_dir=args.cache_features, device=args.device)
    return 0


def cmd_train(args) -> int:
    from eaglehead.train.stop import exit_code
    from eaglehead.train.trainer import train

    summary = train(_train_config(args))
    print(json.dumps(summary, indent=1))
    return exit_code(summary)


def cmd_export(args) -> int:
    from eaglehead.builtin.devices import resolve_dtype
    from eaglehead.draftheads.checkpoint import export_eagle3, export_speculators, load_head

    src = Path(args.checkpoint)
    if (src / "head" / "config.json").is_file():  # a training output directory
        src = src / "head"
    if not (src / "config.json").is_file():
        raise ValueError(f"CKPT {args.checkpoint!r}: expected a head directory (config.json + weights) or a "
                         "training output directory holding head/")
    head = load_head(src)
    if args.format == "gguf":
        return _export_gguf(head, src, args)
    out_dir = Path(args.out)
    if out_dir.exists() and any(out_dir.iterdir()) and not args.overwrite:
        raise ValueError(f"--out {out_dir} is not empty: pass --overwrite to replace its checkpoint files")
    if args.target_name:  # e.g. the hub id of a target trained from a local path or a .gguf file
        head.config.target_name_or_path = args.target_name
    dtype = resolve_dtype(args.dtype) if args.dtype else None
    if args.format == "eagle3":
        out = export_eagle3(head, args.out, overwrite=args.overwrite, dtype=dtype)
    else:
        out = export_speculators(head, args.out, overwrite=args.overwrite, dtype=dtype,
                                 speculative_tokens=args.speculative_tokens)
    print(f"exported {src} -> {out} ({args.format} layout)")
    return 0


def _export_gguf(head, src: Path, args) -> int:
    """``--format gguf``: one file llama.cpp's EAGLE-3 drafter loads, with the target's tokenizer keys."""
    from eaglehead.builtin.models import resolve_target
    from eaglehead.builtin.packages import SMOLLM2
    from eaglehead.draftheads.gguf_head import export_gguf
    from eaglehead.eval.plan_options import llamacpp_source

    if not args.target:
        raise ValueError("--format gguf needs --target: the target's .gguf file (or builtin:smollm2-135m-instruct, "
                         "or a Hugging Face directory with a byte-level BPE tokenizer), whose tokenizer the file carries")
    if not args.out.endswith(".gguf"):
        raise ValueError(f"--out {args.out!r}: --format gguf writes one file; name it NAME.gguf")
    target = llamacpp_source(args.target) if args.target == SMOLLM2 or args.target.endswith(".gguf") \
        else resolve_target(args.target)
    out = export_gguf(head, args.out, target=target, dtype=args.dtype or "float16", overwrite=args.overwrite)
    print(f"exported {src} -> {out} (gguf: llama.cpp's EAGLE-3 drafter, {args.dtype or 'float16'})")
    return 0


def cmd_eval(args) -> int:
    from eaglehead.eval.plan import plan_from_args
    from eaglehead.eval.tables import compact_table
    from eaglehead.eval.runner import run_eval

    report = run_eval(plan_from_args(args))
    print(compact_table(report))
    count = f"{len(report['load'])} load states" if "load" in report else f"{len(report.get('runs', []))} runs"
    print(f"report: {Path(args.out) / 'report.html'} (and report.md; {count})")
    return 0


SMOLLM2_ONLY = {"model": "--model", "assets": "--assets", "mt_bench": "--mt-bench", "humaneval": "--humaneval"}


def cmd_demo(args) -> int:
    if args.target == "smollm2-135m-instruct":
        from eaglehead.demos.smollm2 import run_smollm2_demo

        return run_smollm2_demo(args)
    given = [opt for name, opt in SMOLLM2_ONLY.items() if getattr(args, name)]
    if given:
        raise ValueError(f"{', '.join(given)}: only for --target smollm2-135m-instruct")
    from eaglehead.demos.stdlib import run_demo

    args.out = args.out or "runs/demo"
    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eaglehead", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="stream text from a target, optionally with a drafter")
    g.add_argument("--target", required=True, help="Hugging Face model directory or hub id")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--draft", help="draft: an eaglehead/EAGLE-3 head directory or a small causal LM")
    src.add_argument("--prompt-lookup", action="store_true", help="draft by n-gram lookup in the context")
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    g.add_argument("--gamma", type=int, default=DEFAULT_GAMMA, help="draft tokens per round (>= 1)")
    g.add_argument("--tree", default=None, metavar="DEPTH,TOPK,TOKENS", help="draft EAGLE-2 trees with an EAGLE "
                   "--draft head instead of chains: depth, children per node, verified draft nodes (e.g. 6,4,16)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--device", default="cuda" if _cuda_available() else "cpu")
    g.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    g.add_argument("--cpu-linear", default="packed", choices=CPU_LINEAR, help=CPU_LINEAR_HELP)
    g.set_defaults(func=cmd_generate)

    p = sub.add_parser("prepare", help="write chat data with the target (--data-config); tokenise training data, "
                       "count the draft vocabulary, cache features (--config)")
    p.add_argument("--config", default=None, help="training config (tokenise, draft vocabulary, features)")
    p.add_argument("--data-config", default=None,
                   help="chat data config: synthesise prompts and regenerate answers with the target first")
    p.add_argument("--assemble-only", action="store_true", help="with --data-config: build the conversations from "
                   "the shards in its out_dir (datagen.archive unpack); generate nothing, name a missing shard")
    p.add_argument("--cache-features", default=None, help="directory for offline target features")
    p.add_argument("--device", default=None)
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.set_defaults(func=cmd_prepare)

    t = sub.add_parser("train", help="train a draft head in this process (accelerate launch -m eaglehead.train "
                                     "for several processes)")
    t.add_argument("--config", required=True)
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. optim.lr=5e-5")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("export", help="export a head for vLLM/SGLang (eagle3, speculators) or llama.cpp (gguf)")
    e.add_argument("checkpoint", help="head directory, or a training output directory")
    e.add_argument("--format", choices=["eagle3", "speculators", "gguf"], default="eagle3")
    e.add_argument("--out", required=True, help="a directory (eagle3, speculators) or NAME.gguf (gguf)")
    e.add_argument("--target", default=None, help="gguf: the target's .gguf file (or builtin:smollm2-135m-instruct "
                   "or a Hugging Face directory); the head file carries its tokenizer")
    e.add_argument("--dtype", default=None, help="cast weights: float32 | bfloat16 | float16 (gguf default: float16)")
    e.add_argument("--speculative-tokens", type=int, default=3, help="speculators: draft tokens per round")
    e.add_argument("--overwrite", action="store_true", help="replace the files of an existing export")
    e.add_argument("--target-name", default=None,
                   help="name the target as the serving engine will load it (a hub id); default: the name "
                        "the head was trained with, built-in targets by their hub id")
    e.set_defaults(func=cmd_export)

    ev = sub.add_parser("eval", help="acceptance and time per token on held-out prompts, side by side")
    add_eval_arguments(ev)
    ev.set_defaults(func=cmd_eval)

    d = sub.add_parser("demo", help="run the built-in end-to-end demo on this machine")
    d.add_argument("--target", choices=["demo", "smollm2-135m-instruct"], default="demo",
                   help="demo: the built-in stdlib target and its shipped heads; smollm2-135m-instruct: SmolLM2 "
                        "with its shipped heads on MT-bench and HumanEval")
    d.add_argument("--retrain", action="store_true",
                   help="train the heads here instead of using the shipped ones (demo: ~15 more minutes on 2 "
                        "cores; smollm2-135m-instruct: heads and draft LM from the shipped chat data, hours)")
    d.add_argument("--out", default=None, help="output directory, reused as a cache on the next run (default: "
                   "runs/demo, or runs/demo-smollm2 for --target smollm2-135m-instruct)")
    d.add_argument("--size", choices=["full", "tiny"], default="full", help="tiny: toy sizes, seconds (CI)")
    d.add_argument("--head-steps", type=int, default=None,
                   help="training steps for each head (default: configs/demo.yaml's optim.max_steps, sized for a "
                        "cold run under 20 minutes on 2 cores; BENCHMARKS.md gives the cost of a step); with "
                        "--target smollm2-135m-instruct --retrain: both SmolLM2 heads' optim.max_steps")
    # Stand-ins for the smollm2-135m-instruct demo's inputs (tests): a target, an assets root holding the
    # smollm2_* directories, an MT-bench question.jsonl and a HumanEval-like prompt file.
    for opt in ("--model", "--assets", "--mt-bench", "--humaneval"):
        d.add_argument(opt, default=None, help=argparse.SUPPRESS)
    d.set_defaults(func=cmd_demo)
    return parser


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"eaglehead {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
