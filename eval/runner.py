"""The engine of ``eaglehead eval``: every method side by side on one target, one process.

Usage (the CLI adds these arguments with :func:`add_eval_arguments` and calls :func:`run_eval`)::

    eaglehead eval --target PATH --prompts SET [--draft EAGLE3_DIR] [--eagle1 DIR] [--draft-lm DIR]
                   [--gamma 4 | --gamma 1..8 | --gamma auto] [--temperature 0 1] [--batch-sizes 1,4,8]
                   [--methods vanilla,hf-generate,eagle3,eagle1,draft-lm,prompt-lookup,hf-assisted]
                   [--max-new-tokens 128] [--out runs/eval] [--overwrite] [--seed 0] [--device cuda]
                   [--dtype bfloat16]

    report = run_eval(args)                                    # also writes report.json/.md/PNGs to --out
    report = run_eval(args, drafter_factories={"eagle3": lambda target: my_drafter})  # tests

What is held fixed: one target, precision, sampling setting, prompt set and token budget for all
methods of a *serving state* (temperature, batch size). Prompts (first turn) go through the
tokenizer's chat template when it has one. Batches are left-padded and never mix categories, so
per-category metrics are exact (a category's last batch may be smaller than the batch size).
Within a state the methods run interleaved batch by batch (A B C A B C ..., the order rotated per
batch), after one untimed warm-up call each. ``--gamma auto`` sweeps gamma 1..8 on the *tune* split
per state and method, picks it with ``gamma_select.select_gamma`` and reports on the *test* split;
a fixed gamma or a sweep ``a..b`` is measured on the test split directly.

Methods: ``vanilla`` (our loop; always run, it is the baseline), ``hf-generate`` (transformers'
``generate``), ``eagle3``/``eagle1`` (``eaglehead.decode.eagle.load_eagle_drafter``), ``draft-lm``
(``DraftModelDrafter`` on ``--draft-lm``), ``prompt-lookup`` and ``hf-assisted`` (transformers'
assisted generation with ``--draft-lm``, else its prompt lookup; batch size 1 only). HF methods are
timed through a streamer: their first event (the prompt's prefill and first tokens) counts as
prefill, each later event as one round whose whole time is booked as T_v (HF does not expose the
split). Metric conventions: ``eval/metrics.py``. Peak memory: ``torch.cuda.max_memory_allocated``
reset before each call (max over the method's calls); on CPU the process's RSS high-water mark
(``resource.getrusage``), which is process-wide and never resets, so it only bounds each method.
Greedy runs record ``identical_to_vanilla`` (token-identical to vanilla on every prompt); sampled
runs record ``null``. Output lengths and EOS-terminated rows are reported per run, never trimmed.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from eaglehead.decode import (DraftModelDrafter, GenerationResult, PromptLookupDrafter, RoundRecord,
                              SamplingConfig, speculative_generate, vanilla_generate)
from eaglehead.decode.drafters import output_vocab_size
from eaglehead.eval.gamma_select import gamma_table_from_metrics, select_gamma
from eaglehead.eval.metrics import compute_metrics, itl_samples, metrics_by_category
from eaglehead.eval.prompts import load_prompt_set, split_prompts
from eaglehead.eval.report import check_report_consistency, collect_versions, fill_speedups, run_record, write_report

METHODS = ("vanilla", "hf-generate", "eagle3", "eagle1", "draft-lm", "prompt-lookup", "hf-assisted")
DRAFTER_METHODS = ("eagle3", "eagle1", "draft-lm", "prompt-lookup")  # our loop with a drafter
GAMMA_METHODS = (*DRAFTER_METHODS, "hf-assisted")
PATH_OPTION = {"eagle3": "--draft", "eagle1": "--eagle1", "draft-lm": "--draft-lm"}
AUTO_GAMMAS = tuple(range(1, 9))
MAX_GAMMA = 16
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
WARMUP_TOKENS = 8
DrafterFactory = Callable[[nn.Module], Any]  # target -> a Drafter, called once per method


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``eaglehead eval`` options to ``parser``."""
    a = parser.add_argument
    a("--target", required=True, help="Hugging Face causal LM directory (with its tokenizer)")
    a("--prompts", required=True, help="a prompt JSONL file (MT-bench/Spec-Bench format) or 'humaneval'")
    a("--draft", help="EAGLE-3 head directory (method eagle3)")
    a("--eagle1", help="EAGLE-1 head directory (method eagle1)")
    a("--draft-lm", help="small causal LM sharing the target's vocabulary (methods draft-lm, hf-assisted)")
    a("--methods", default=None, help=f"comma-separated subset of {','.join(METHODS)}; default: vanilla, "
      "hf-generate, prompt-lookup and every method whose path is given")
    a("--gamma", default="4", help="draft length 1..16, a sweep 'a..b', or 'auto' (1..8 tuned on the tune split)")
    a("--temperature", type=float, nargs="+", default=[0.0], help="one or more temperatures (0 = greedy)")
    a("--batch-sizes", default="1", help="comma-separated batch sizes, e.g. 1,4,8")
    a("--max-new-tokens", type=int, default=128)
    a("--tune-fraction", type=float, default=0.25, help="share of each category used to tune gamma")
    a("--max-prompts", type=int, default=None, help="use at most this many prompts per split (quick runs)")
    a("--out", default="runs/eval", help="output directory (must be empty unless --overwrite)")
    a("--overwrite", action="store_true", help="write into a non-empty --out")
    a("--seed", type=int, default=0)
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--dtype", default="float32", help="float32 | bfloat16 | float16")


# ---------------------------------------------------------------------------------------------- parsing

def parse_gamma(text: str) -> tuple[str, list[int]]:
    """``"4"`` -> ("fixed", [4]); ``"2..5"`` -> ("sweep", [2, 3, 4, 5]); ``"auto"`` -> ("auto", [1..8]);
    ``"auto:2..6"`` -> ("auto", [2..6]) (tune over a narrower range)."""
    text = str(text).strip()
    if text == "auto":
        return "auto", list(AUTO_GAMMAS)
    if text.startswith("auto:"):
        mode, gammas = parse_gamma(text[5:])
        if mode != "sweep":
            raise ValueError(f"--gamma auto:a..b needs a range, got {text!r}")
        return "auto", gammas
    try:
        if ".." in text:
            lo, hi = (int(v) for v in text.split(".."))
            mode, gammas = "sweep", list(range(lo, hi + 1))
        else:
            mode, gammas = "fixed", [int(text)]
    except ValueError:
        raise ValueError(f"--gamma must be an integer, a range 'a..b' or 'auto', got {text!r}") from None
    if not gammas or not all(1 <= g <= MAX_GAMMA for g in gammas):
        raise ValueError(f"--gamma must lie in 1..{MAX_GAMMA} (a range needs a <= b), got {text!r}")
    return mode, gammas


def _parse_methods(text: str | None, args, factories: dict) -> list[str]:
    if text is None:
        given = {"eagle3": args.draft, "eagle1": args.eagle1, "draft-lm": args.draft_lm}
        names = ["vanilla", "hf-generate", "prompt-lookup"] + [m for m, p in given.items() if p or m in factories]
    else:
        names = [m.strip() for m in str(text).split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"--methods: unknown method(s) {unknown}; expected a comma-separated subset of {list(METHODS)}")
    names = ["vanilla"] + [m for m in dict.fromkeys(names) if m != "vanilla"]
    for m in names:
        option = PATH_OPTION.get(m)
        if option and m not in factories and not getattr(args, option[2:].replace("-", "_")):
            raise ValueError(f"--methods {m} needs {option} PATH")
    return names


def _parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}")
    return list(dict.fromkeys(sizes))


def _validate(args, factories: dict) -> dict[str, Any]:
    """Check every option before anything is loaded; returns the resolved plan."""
    unknown = sorted(set(factories) - set(DRAFTER_METHODS))
    if unknown:
        raise ValueError(f"drafter_factories: unknown method(s) {unknown}; expected keys among {list(DRAFTER_METHODS)}")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise ValueError(f"--out {str(out)!r} exists and is not empty; pass --overwrite to write into it")
    temps = list(args.temperature)
    if not temps or any(not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0) for t in temps):
        raise ValueError(f"--temperature values must be finite numbers >= 0, got {temps!r}")
    if isinstance(args.max_new_tokens, bool) or not isinstance(args.max_new_tokens, int) or args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be an integer >= 1, got {args.max_new_tokens!r}")
    if args.max_prompts is not None and args.max_prompts < 1:
        raise ValueError(f"--max-prompts must be >= 1, got {args.max_prompts!r}")
    tf = args.tune_fraction
    if isinstance(tf, bool) or not isinstance(tf, (int, float)) or not 0.0 <= tf < 1.0:
        raise ValueError(f"--tune-fraction must be in [0, 1), got {tf!r}")
    if args.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {args.dtype!r}")
    if not Path(args.target).is_dir() and "/" not in str(args.target):
        raise ValueError(f"--target {args.target!r}: no such model directory")
    mode, gammas = parse_gamma(args.gamma)
    methods = _parse_methods(args.methods, args, factories)
    try:
        prompts = load_prompt_set(args.prompts)
        tune, test = split_prompts(prompts, tune_fraction=args.tune_fraction)
    except ValueError as err:
        raise ValueError(f"--prompts: {err}") from None
    if args.max_prompts:
        tune, test = tune[: args.max_prompts], test[: args.max_prompts]
    if not test:
        raise ValueError(f"--prompts: the test split of {len(prompts)} prompts is empty; lower --tune-fraction")
    if mode == "auto" and not tune and any(m in GAMMA_METHODS for m in methods):
        raise ValueError(f"--gamma auto needs a non-empty tune split; {len(prompts)} prompts gave none "
                         "(raise --tune-fraction)")
    name = "humaneval" if args.prompts == "humaneval" else Path(args.prompts).stem
    return dict(methods=methods, mode=mode, gammas=gammas, temperatures=[float(t) for t in temps],
                batch_sizes=_parse_batch_sizes(args.batch_sizes), tune=tune, test=test, prompt_set=name,
                dtype=DTYPES[args.dtype], device=torch.device(args.device))


# ----------------------------------------------------------------------------------------------- models

def _load_lm(path: str, option: str, device, dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM

    if not Path(path).is_dir() and "/" not in str(path):
        raise ValueError(f"{option} {path!r}: no such model directory")
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    except OSError as err:  # not a model directory, or a hub id that cannot be fetched
        raise ValueError(f"{option} {path!r}: cannot load a causal LM ({err})") from None


def _check_vocab(option: str, size: int, target_size: int) -> None:
    if size != target_size:
        raise ValueError(f"{option}: vocabulary size {size} does not match the target's {target_size} "
                         "(a draft for another target?)")


def _drafters(plan, args, target, draft_lm, factories: dict) -> dict[str, Any]:
    vocab = output_vocab_size(target)
    dev, dtype = plan["device"], plan["dtype"]

    def eagle(path):
        def make(t):
            from eaglehead.decode.eagle import load_eagle_drafter  # lazily: optional at import time

            return load_eagle_drafter(path, t, device=dev, dtype=dtype)
        return make

    defaults = {"eagle3": eagle(args.draft), "eagle1": eagle(args.eagle1),
                "draft-lm": lambda t: DraftModelDrafter(draft_lm), "prompt-lookup": lambda t: PromptLookupDrafter(vocab)}
    drafters = {}
    for m in plan["methods"]:
        if m in DRAFTER_METHODS:
            drafters[m] = (factories.get(m) or defaults[m])(target)
            _check_vocab(PATH_OPTION.get(m, m), int(drafters[m].vocab_size), vocab)
    return drafters


# ------------------------------------------------------------------------------------------------ calls

def encode_prompt(tok, text: str) -> list[int]:
    """Token ids of one user turn: through the chat template (with the generation prompt) if any."""
    if getattr(tok, "chat_template", None):
        enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True, return_dict=True)
        ids = enc["input_ids"]
    else:
        ids = tok(text)["input_ids"]
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def make_batches(items: list[tuple[Any, list[int]]], batch_size: int) -> list[list[tuple[Any, list[int]]]]:
    """Chunks of ``(Prompt, ids)`` of at most ``batch_size``, never mixing categories (sorted)."""
    by_cat: dict[str, list] = {}
    for item in items:
        by_cat.setdefault(item[0].category, []).append(item)
    return [group[i:i + batch_size] for c in sorted(by_cat) for group in [by_cat[c]]
            for i in range(0, len(group), batch_size)]


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [B, T], attention_mask [B, T])``, left-padded to the longest row."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[b, width - len(r):] = 1
    return ids.to(device), mask.to(device)


class _StampStreamer:
    """Records ``(perf_counter, tokens per row)`` for each ``generate()`` streamer event after the
    prompt. Vanilla generate puts ``[B]`` (one token per row); assisted generation ``[1, n]``."""

    def __init__(self):
        self.events: list[tuple[float, list[list[int]]]] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()  # generate moved the tokens to the host already: the device is synced
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        rows = [[t] for t in value.tolist()] if value.dim() == 1 else value.tolist()
        self.events.append((now, rows))

    def end(self) -> None:
        pass


def _hf_result(streamer: _StampStreamer, bsz: int, gamma: int, eos: set[int], t_start: float, t_end: float,
               prompt_lengths: list[int], max_new: int) -> GenerationResult:
    """A ``GenerationResult`` from the streamer events: event 0 is the prefill, each later one a round."""
    tokens = [[] for _ in range(bsz)]
    times = [[] for _ in range(bsz)]
    done, by_eos = [False] * bsz, [False] * bsz
    rounds = []
    for k, (now, rows) in enumerate(streamer.events):
        active = [not d for d in done]
        committed = [0] * bsz
        for b, new in enumerate(rows):
            for tok in new:
                if done[b]:
                    break  # HF pads finished rows
                tokens[b].append(tok)
                times[b].append(now)
                committed[b] += 1
                if tok in eos:
                    done[b] = by_eos[b] = True
                if len(tokens[b]) >= max_new:
                    done[b] = True
        if k > 0:
            prev = streamer.events[k - 1][0]
            rounds.append(RoundRecord(gamma=gamma, accepted=[max(c - 1, 0) for c in committed], committed=committed,
                                      active=active, t_draft=0.0, t_verify=now - prev, t_rest=0.0))
    t_prefill = streamer.events[0][0] - t_start if streamer.events else 0.0
    return GenerationResult(tokens=tokens, rounds=rounds, token_times=times, t_start=t_start, t_end=t_end,
                            prompt_lengths=prompt_lengths, t_prefill=t_prefill, finished_by_eos=by_eos)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _hf_generate(ctx, ids, mask, sampling: SamplingConfig, gamma: int, max_new: int, seed: int, assisted: bool):
    from transformers import GenerationConfig

    kw: dict[str, Any] = dict(max_new_tokens=max_new, eos_token_id=sorted(ctx["eos"]) or None,
                              pad_token_id=ctx["pad_id"], do_sample=not sampling.greedy)
    if not sampling.greedy:
        kw.update(temperature=sampling.temperature, top_k=0, top_p=1.0)
    extra = {}
    if assisted and ctx["draft_lm"] is not None:
        # The assistant's draft length lives in its own generation config: a constant gamma, no early stop.
        gc = ctx["draft_lm"].generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = gamma, "constant", 0.0
        extra["assistant_model"] = ctx["draft_lm"]
    elif assisted:
        kw.update(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=3)  # as PromptLookupDrafter's n-grams
    torch.manual_seed(seed)  # HF samples from the global generator
    streamer = _StampStreamer()
    _sync(ctx["device"])
    t0 = time.perf_counter()
    ctx["target"].generate(ids, attention_mask=mask, generation_config=GenerationConfig(**kw), streamer=streamer,
                           **extra)
    _sync(ctx["device"])
    t1 = time.perf_counter()
    return _hf_result(streamer, ids.shape[0], gamma if assisted else 0, ctx["eos"], t0, t1,
                      mask.sum(1).tolist(), max_new)


def run_call(ctx, method: str, gamma: int, ids, mask, sampling: SamplingConfig, max_new: int, seed: int):
    """One generate call of ``method`` on a left-padded batch; returns a ``GenerationResult``."""
    if method in ("hf-generate", "hf-assisted"):
        return _hf_generate(ctx, ids, mask, sampling, gamma, max_new, seed, method == "hf-assisted")
    gen = torch.Generator(device=ctx["device"]).manual_seed(seed)
    common = dict(sampling=sampling, max_new_tokens=max_new, eos_token_id=sorted(ctx["eos"]) or None,
                  attention_mask=mask, generator=gen)
    if method == "vanilla":
        return vanilla_generate(ctx["target"], ids, **common)
    return speculative_generate(ctx["target"], ctx["drafters"][method], ids, gamma=gamma, **common)


def _peak_reset(device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_read(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB, macOS bytes


def run_state(ctx, items, keys: list[tuple[str, int]], temperature: float, batch_size: int, bar=None) -> dict:
    """Run every ``(method, gamma)`` of ``keys`` over ``items`` [(Prompt, ids)], interleaved per batch.
    ``bar`` (a tqdm bar) advances by one per generation call, warm-ups included.

    Returns ``{key: {"pairs": [(category, result)], "tokens": {prompt id: tokens}, "eos": {prompt id:
    bool}, "peak": bytes}}``."""
    sampling = SamplingConfig(temperature=temperature)
    batches = make_batches(items, batch_size)
    padded = [left_pad([ids for _, ids in batch], ctx["pad_id"], ctx["device"]) for batch in batches]
    for method, gamma in keys:  # warm-up, untimed: first calls pay one-off allocation and kernel selection
        run_call(ctx, method, gamma, *padded[0], sampling, min(WARMUP_TOKENS, ctx["max_new"]), ctx["seed"])
        if bar is not None:
            bar.update(1)
    out = {k: {"pairs": [], "tokens": {}, "eos": {}, "peak": 0} for k in keys}
    for i, (batch, (ids, mask)) in enumerate(zip(batches, padded)):
        r = i % len(keys)
        for key in keys[r:] + keys[:r]:
            _peak_reset(ctx["device"])
            res = run_call(ctx, key[0], key[1], ids, mask, sampling, ctx["max_new"], ctx["seed"] + i)
            rec = out[key]
            rec["peak"] = max(rec["peak"], _peak_read(ctx["device"]))
            rec["pairs"].append((batch[0][0].category, res))
            for (prompt, _), toks, eos in zip(batch, res.tokens, res.finished_by_eos):
                rec["tokens"][prompt.id] = toks
                rec["eos"][prompt.id] = eos
            if bar is not None:
                bar.set_postfix_str(f"T={temperature:g} B={batch_size} {key[0]} gamma={key[1]}", refresh=False)
                bar.update(1)
    return out


def _state_methods(plan, batch_size: int) -> tuple[list[str], list[str]]:
    """(methods run at ``batch_size``, those of them that draft with a gamma); hf-assisted is batch 1 only."""
    methods = [m for m in plan["methods"] if m != "hf-assisted" or batch_size == 1]
    return methods, [m for m in methods if m in GAMMA_METHODS]


def _count_calls(plan, tune, test) -> int:
    """Generation calls ``run_eval`` will make (warm-ups included), for the progress bar's ETA."""
    total = 0
    for bsz in plan["batch_sizes"]:
        methods, spec = _state_methods(plan, bsz)
        tune_keys = len(spec) * len(plan["gammas"]) if plan["mode"] == "auto" and spec else 0
        test_keys = len(methods) - len(spec) + len(spec) * (1 if plan["mode"] == "auto" else len(plan["gammas"]))
        if tune_keys:
            total += tune_keys * (1 + len(make_batches(tune, bsz)))
        total += test_keys * (1 + len(make_batches(test, bsz)))
    return total * len(plan["temperatures"])


# ----------------------------------------------------------------------------------------------- report

def _identity(rec, base, ids: list[str], greedy: bool) -> tuple[bool | None, int | None]:
    if not greedy:
        return None, None
    bad = sum(rec["tokens"][i] != base["tokens"][i] for i in ids)
    return bad == 0, bad


def _records(plan, key, rec, base, greedy, state, extra) -> list[dict]:
    method, gamma = key
    by_cat = metrics_by_category(rec["pairs"])
    cat_ids: dict[str, list[str]] = {}
    for pid in rec["tokens"]:
        cat_ids.setdefault(plan["category_of"][pid], []).append(pid)
    runs = []
    for category, metrics in [("all", by_cat["overall"]), *by_cat["categories"].items()]:
        ids = list(rec["tokens"]) if category == "all" else cat_ids[category]
        same, bad = _identity(rec, base, ids, greedy)
        runs.append(run_record(
            method, metrics, category=category, gamma=gamma, peak_mem_bytes=rec["peak"], **state,
            requests=len(ids), eos_rows=sum(rec["eos"][i] for i in ids), identical_to_vanilla=same,
            mismatched_prompts=bad, **extra))
    return runs


def run_eval(args: argparse.Namespace, drafter_factories: dict[str, DrafterFactory] | None = None) -> dict:
    """Run the evaluation described by ``args`` (see :func:`add_eval_arguments`), write the report into
    ``args.out`` and return it. ``drafter_factories`` maps drafter methods to ``target -> Drafter``
    callables that replace the built-in loaders (tests, custom drafters)."""
    from transformers import AutoTokenizer

    factories = dict(drafter_factories or {})
    plan = _validate(args, factories)
    dev, dtype = plan["device"], plan["dtype"]
    tok = AutoTokenizer.from_pretrained(args.target)
    target = _load_lm(args.target, "--target", dev, dtype)
    vocab = output_vocab_size(target)
    needs_lm = ("draft-lm" in plan["methods"] and "draft-lm" not in factories) or \
        ("hf-assisted" in plan["methods"] and args.draft_lm)
    draft_lm = _load_lm(args.draft_lm, "--draft-lm", dev, dtype) if needs_lm else None
    if draft_lm is not None:
        _check_vocab("--draft-lm", output_vocab_size(draft_lm), vocab)
    eos = target.generation_config.eos_token_id if target.generation_config.eos_token_id is not None \
        else tok.eos_token_id
    eos = set([eos] if isinstance(eos, int) else (eos or []))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (min(eos) if eos else 0)
    ctx = dict(target=target, draft_lm=draft_lm, drafters=_drafters(plan, args, target, draft_lm, factories),
               eos=eos, pad_id=pad_id, device=dev, max_new=args.max_new_tokens, seed=args.seed)
    encoded = {p.id: encode_prompt(tok, p.text) for p in plan["tune"] + plan["test"]}
    plan["category_of"] = {p.id: p.category for p in plan["tune"] + plan["test"]}
    tune = [(p, encoded[p.id]) for p in plan["tune"]]
    test = [(p, encoded[p.id]) for p in plan["test"]]

    runs, sweeps, selections, notes, itl = [], [], [], [], {}
    if "hf-assisted" in plan["methods"] and any(b > 1 for b in plan["batch_sizes"]):
        notes.append("hf-assisted runs at batch_size 1 only: transformers' assisted generation supports batch "
                     f"size 1; skipped at batch sizes {[b for b in plan['batch_sizes'] if b > 1]}")
    from tqdm.auto import tqdm

    bar = tqdm(total=_count_calls(plan, tune, test), desc=f"eval {plan['prompt_set']}", unit="call")
    for temp in plan["temperatures"]:
        for bsz in plan["batch_sizes"]:
            methods, spec = _state_methods(plan, bsz)
            state = dict(prompt_set=plan["prompt_set"], temperature=temp, batch_size=bsz)
            chosen = {m: plan["gammas"] for m in spec}
            if plan["mode"] == "auto" and spec:
                tuned = run_state(ctx, tune, [(m, g) for m in spec for g in plan["gammas"]], temp, bsz, bar)
                for m in spec:
                    per_g = {g: compute_metrics([r for _, r in tuned[(m, g)]["pairs"]]) for g in plan["gammas"]}
                    sel = select_gamma(gamma_table_from_metrics(per_g))
                    chosen[m] = [sel.chosen]
                    selections.append({"method": m, **state, "split": "tune", **sel.to_dict()})
                    sweeps += [{"method": m, "gamma": g, "tau": per_g[g].tau, "time_per_token_s": per_g[g].time_per_token_s,
                                **state, "split": "tune"} for g in plan["gammas"]]
            keys = [(m, 0) for m in methods if m not in spec] + [(m, g) for m in spec for g in chosen[m]]
            result = run_state(ctx, test, keys, temp, bsz, bar)
            base = result[("vanilla", 0)]
            for key in keys:
                extra = {"split": "test", "gamma_mode": plan["mode"]}
                if key[0].startswith("hf-"):
                    extra["timing_note"] = "HF: first streamer event is prefill; whole round time booked as T_v"
                if key[0] == "hf-assisted":
                    extra["assistant"] = "draft-lm" if draft_lm is not None else "prompt-lookup"
                recs = _records(plan, key, result[key], base, temp == 0, state, extra)  # "all" first
                runs += recs
                itl[f"{key[0]} g={key[1]} T={temp} B={bsz}"] = itl_samples([r for _, r in result[key]["pairs"]])
                if plan["mode"] == "sweep" and key[0] in spec:
                    sweeps.append({"method": key[0], "gamma": key[1], "tau": recs[0]["tau"],
                                   "time_per_token_s": recs[0]["time_per_token_s"], **state, "split": "test"})
    bar.close()
    fill_speedups(runs)
    greedy_runs = [r for r in runs if r["identical_to_vanilla"] is not None and r["category"] == "all"]
    report = {
        "config": _config(args, plan, tok, eos, pad_id),
        "versions": collect_versions(),
        "hardware": _hardware(dev),
        "runs": runs,
        "sweeps": sweeps,
        "gamma_selection": selections,
        "itl_samples": itl,
        "identity": {"greedy_runs_checked": len(greedy_runs),
                     "all_identical": all(r["identical_to_vanilla"] for r in greedy_runs),
                     "mismatched": [(r["method"], r["gamma"], r["temperature"], r["batch_size"])
                                    for r in greedy_runs if not r["identical_to_vanilla"]]},
        "notes": notes,
    }
    report["consistency_violations"] = check_report_consistency(report)
    write_report(args.out, report)
    return report


def _config(args, plan, tok, eos, pad_id) -> dict:
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if not callable(v)}
    cfg.update(methods=plan["methods"], gamma_mode=plan["mode"], gammas=plan["gammas"],
               temperatures=plan["temperatures"], batch_sizes=plan["batch_sizes"], prompt_set=plan["prompt_set"],
               tune_prompts=len(plan["tune"]), test_prompts=len(plan["test"]),
               chat_template=bool(getattr(tok, "chat_template", None)), eos_token_ids=sorted(eos), pad_token_id=pad_id,
               peak_memory=("torch.cuda.max_memory_allocated, reset before each call" if plan["device"].type == "cuda"
                            else "process RSS high-water mark (resource.getrusage): process-wide, never reset"),
               warmup="one untimed call per method and serving state", order="methods interleaved per batch")
    return cfg


def _hardware(device: torch.device) -> dict:
    hw = {"device": str(device), "platform": platform.platform(), "processor": platform.processor(),
          "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
    return hw
