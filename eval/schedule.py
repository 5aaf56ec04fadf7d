"""Scheduling and timing of evaluation calls: batches, interleaving, warm-up, peak memory.

Within a serving state (temperature, batch size) the methods run interleaved batch by batch
(A B C A B C ..., the order rotated per batch), after one untimed warm-up call each, and the whole
pass is repeated ``repeats`` times (the plan's ``--repeats``) with the same seeds: the spread over
repeats is the timing noise. Batches are
left-padded and never mix categories or turns, so per-category and per-turn metrics are exact (a category's last batch may
be smaller than the batch size). Peak memory: ``torch.cuda.max_memory_allocated`` reset before each
call (max over the method's calls); on CPU the process's RSS high-water mark (``resource.getrusage``),
which is process-wide and never resets, so it only bounds each method.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from eaglehead.builtin.text import left_pad
from eaglehead.decode import GenerationResult, SamplingConfig, speculative_generate, tree_generate, vanilla_generate

from .hf_baselines import hf_generate
from .plan import LLAMACPP_METHODS, TREE_METHODS, VLLM_METHODS, EvalPlan
from .prompts import Prompt

WARMUP_TOKENS = 8
Key = tuple[str, "int | None"]  # (method, gamma); methods that do not draft carry None
Item = tuple[Prompt, list[int]]  # a prompt and its token ids


@dataclass
class Models:
    """What every generation call of one evaluation reads: the models and the token conventions."""

    target: nn.Module
    draft_lm: nn.Module | None
    drafters: dict[str, Any]
    eos: set[int]
    pad_id: int
    device: torch.device
    max_new: int
    seed: int
    tree_shape: Callable[[int], tuple[int, int, int]] | None = None  # n -> (depth, topk, tokens): EvalPlan.tree_shape
    llamacpp: Any = None  # llamacpp_engine.LlamaCppEngines when a llama.cpp method runs
    vllm: Any = None  # vllm_methods.VllmEngines when a vLLM method runs


@dataclass
class MethodRuns:
    """One method's calls in one serving state: ``pairs`` (category, result) per batch and repeat, with
    the batch's turn in ``turns`` and the repeat in ``repeat_of``; per prompt id its tokens and whether it
    ended at EOS (repeats use the same seeds, so they decode the same tokens); ``peak`` memory in bytes."""

    pairs: list[tuple[str, GenerationResult]] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    repeat_of: list[int] = field(default_factory=list)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    eos: dict[str, bool] = field(default_factory=dict)
    peak: int = 0


def make_batches(items: list[Item], batch_size: int) -> list[list[Item]]:
    """Chunks of ``(Prompt, ids)`` of at most ``batch_size``, never mixing categories or turns (sorted)."""
    by_cat: dict[tuple[str, int], list] = {}
    for item in items:
        by_cat.setdefault((item[0].category, item[0].turn), []).append(item)
    return [group[i:i + batch_size] for c in sorted(by_cat) for group in [by_cat[c]]
            for i in range(0, len(group), batch_size)]


def run_call(m: Models, method: str, gamma: int | None, ids, mask, sampling: SamplingConfig, max_new: int,
             seed: int) -> GenerationResult:
    """One generate call of ``method`` on a left-padded batch (``gamma``: the draft length; for a tree method
    the number of verified nodes; for an engine's method its draft length, 0 = no speculation)."""
    if method in LLAMACPP_METHODS:
        return m.llamacpp.generate(method, gamma, ids, mask, sampling, max_new=max_new, seed=seed)
    if method in VLLM_METHODS:
        return m.vllm.generate(method, gamma, ids, mask, sampling, max_new=max_new, seed=seed)
    if method in ("hf-generate", "hf-assisted"):
        return hf_generate(m.target, m.draft_lm, ids, mask, sampling, gamma=gamma, max_new=max_new, seed=seed,
                           eos=m.eos, pad_id=m.pad_id, device=m.device)
    gen = torch.Generator(device=m.device).manual_seed(seed)
    common = dict(sampling=sampling, max_new_tokens=max_new, eos_token_id=sorted(m.eos) or None,
                  attention_mask=mask, generator=gen)
    if method == "vanilla":
        return vanilla_generate(m.target, ids, **common)
    if method in TREE_METHODS:
        depth, topk, tokens = m.tree_shape(gamma)
        return tree_generate(m.target, m.drafters[method], ids, depth=depth, topk=topk, tokens=tokens, **common)
    return speculative_generate(m.target, m.drafters[method], ids, gamma=gamma, **common)


def peak_reset(device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_read(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB, macOS bytes


def run_state(m: Models, items: list[Item], keys: list[Key], temperature: float, batch_size: int,
              bar=None, repeats: int = 1, journal=None, phase: str = "test") -> dict[Key, MethodRuns]:
    """Run every ``(method, gamma)`` of ``keys`` over ``items`` ``repeats`` times, interleaved per batch
    (repeat r runs every batch before repeat r + 1 starts; the order of keys rotates per batch and
    repeat, so machine drift hits all methods alike). ``bar`` (a tqdm bar) advances by one per
    generation call, warm-ups included. With a ``journal`` (:class:`~eaglehead.eval.journal.Journal`)
    each batch's group of calls is appended as it finishes, and groups an earlier launch finished are
    replayed instead of measured; the warm-ups run only if something is measured."""
    sampling = SamplingConfig(temperature=temperature)
    batches = make_batches(items, batch_size)
    padded = [left_pad([ids for _, ids in batch], m.pad_id, m.device) for batch in batches]
    tag = (phase, float(temperature), int(batch_size))
    warm = False
    out = {k: MethodRuns() for k in keys}
    for rep in range(repeats):
        for i, (batch, (ids, mask)) in enumerate(zip(batches, padded)):
            r = (i + rep) % len(keys)
            order = keys[r:] + keys[:r]
            group = journal.replay(tag, rep, i, keys) if journal is not None else None
            if group is None:
                if not warm:  # untimed: first calls pay one-off allocation and kernel selection
                    for method, gamma in keys:
                        run_call(m, method, gamma, *padded[0], sampling, min(WARMUP_TOKENS, m.max_new), m.seed)
                        if bar is not None:
                            bar.update(1)
                    warm = True
                group = {}
                for key in order:
                    peak_reset(m.device)
                    res = run_call(m, key[0], key[1], ids, mask, sampling, m.max_new, m.seed + i)
                    group[key] = (res, peak_read(m.device))
                    if bar is not None:
                        bar.set_postfix_str(f"T={temperature:g} B={batch_size} {key[0]} gamma={key[1]} "
                                            f"repeat {rep + 1}/{repeats}", refresh=False)
                        bar.update(1)
                if journal is not None:
                    journal.record(tag, rep, i, group)
            elif bar is not None:
                bar.update(len(keys))
            for key in order:
                res, peak = group[key]
                rec = out[key]
                rec.peak = max(rec.peak, peak)
                rec.pairs.append((batch[0][0].category, res))
                rec.turns.append(batch[0][0].turn)
                rec.repeat_of.append(rep)
                for (prompt, _), toks, eos in zip(batch, res.tokens, res.finished_by_eos):
                    rec.tokens[prompt.id] = toks
                    rec.eos[prompt.id] = eos
    if bar is not None and not warm:
        bar.update(len(keys))  # the warm-ups count_calls expected, not needed: everything was replayed
    return out


def repeat_results(rec: MethodRuns, rep: int) -> list[GenerationResult]:
    """The results of repeat ``rep`` of one method."""
    return [res for (_, res), r in zip(rec.pairs, rec.repeat_of) if r == rep]


def count_calls(plan: EvalPlan, tune: list[Item], test: list[Item]) -> int:
    """Generation calls ``run_eval`` will make (warm-ups included), for the progress bar's ETA."""
    total = 0
    for bsz in plan.batch_sizes:
        methods, spec = plan.state_methods(bsz)
        auto = plan.gamma_mode == "auto"
        tune_keys = sum(len(plan.axis(m)) for m in spec) if auto else 0
        test_keys = len(methods) - len(spec) + sum(1 if auto else len(plan.axis(m)) for m in spec)
        if tune_keys:
            total += tune_keys * (1 + plan.repeats * len(make_batches(tune, bsz)))
        total += test_keys * (1 + plan.repeats * len(make_batches(test, bsz)))
    return total * len(plan.temperatures)
