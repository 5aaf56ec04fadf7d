"""Report assembly for ``eaglehead eval``: run records per method, state and category, the identity
check against vanilla, and the report's config and hardware blocks.

Greedy runs record ``identical_to_vanilla`` (token-identical to vanilla on every prompt); sampled
runs record ``null``. Output lengths and EOS-terminated rows are reported per run, never trimmed.
"""

from __future__ import annotations

import os
import platform

import torch

from .metrics import metrics_by_category
from .plan import EvalPlan
from .report import repeat_fields, run_record
from .schedule import Key, MethodRuns


def _identity(rec: MethodRuns, base: MethodRuns, ids: list[str], greedy: bool) -> tuple[bool | None, int | None]:
    if not greedy:
        return None, None
    bad = sum(rec.tokens[i] != base.tokens[i] for i in ids)
    return bad == 0, bad


def method_records(key: Key, rec: MethodRuns, base: MethodRuns, category_of: dict[str, str], greedy: bool,
                   state: dict, extra: dict, turn_of: dict[str, int] | None = None) -> list[dict]:
    """The ``runs`` entries of one method in one state: ``all`` first, then one per category; with
    multi-turn prompts also one per turn (``turn`` 1, 2, ...) overall and per category. Entries over
    every turn carry ``turn: "all"``."""
    method, gamma = key
    turn_of = turn_of or {}
    turns = sorted({turn_of.get(pid, 1) for pid in rec.tokens})
    n_rep = max(rec.repeat_of, default=0) + 1
    repeat_of = rec.repeat_of or [0] * len(rec.pairs)
    runs = []
    for turn in ["all"] + (turns if len(turns) > 1 else []):
        tagged = [(pair, rp) for pair, t, rp in zip(rec.pairs, rec.turns or [1] * len(rec.pairs), repeat_of)
                  if turn == "all" or t == turn]
        per_rep = [metrics_by_category([pair for pair, rp in tagged if rp == k]) for k in range(n_rep)]
        ids_all = [i for i in rec.tokens if turn == "all" or turn_of.get(i, 1) == turn]
        cat_ids: dict[str, list[str]] = {}
        for pid in ids_all:
            cat_ids.setdefault(category_of[pid], []).append(pid)
        for category in ["all", *per_rep[0]["categories"]]:
            reps = [b["overall"] if category == "all" else b["categories"][category] for b in per_rep]
            idx, spread = repeat_fields([m["time_per_token_s"] for m in reps])  # the median repeat stands for all
            ids = ids_all if category == "all" else cat_ids[category]
            same, bad = _identity(rec, base, ids, greedy)
            runs.append(run_record(
                method, reps[idx], category=category, turn=turn, gamma=gamma, peak_mem_bytes=rec.peak, **state,
                requests=len(ids), eos_rows=sum(rec.eos[i] for i in ids), identical_to_vanilla=same,
                mismatched_prompts=bad, **spread, **extra))
    return runs


def identity_summary(runs: list[dict]) -> dict:
    greedy_runs = [r for r in runs if r["identical_to_vanilla"] is not None and r["category"] == "all"
                   and r.get("turn", "all") == "all"]
    return {"greedy_runs_checked": len(greedy_runs),
            "all_identical": all(r["identical_to_vanilla"] for r in greedy_runs),
            "mismatched": [(r["method"], r["gamma"], r["temperature"], r["batch_size"])
                           for r in greedy_runs if not r["identical_to_vanilla"]]}


def report_config(plan: EvalPlan, tok, eos: set[int], pad_id: int, tune: int, test: int) -> dict:
    cfg = plan.to_dict()
    cfg.update(tune_prompts=tune, test_prompts=test, chat_template=bool(getattr(tok, "chat_template", None)),
               eos_token_ids=sorted(eos), pad_token_id=pad_id,
               peak_memory=("torch.cuda.max_memory_allocated, reset before each call"
                            if torch.device(plan.device).type == "cuda"
                            else "process RSS high-water mark (resource.getrusage): process-wide, never reset"),
               warmup="one untimed call per method and serving state",
               order=f"methods interleaved per batch, {plan.repeats} repeat(s) of the whole pass; a run's metrics "
                     "come from its median repeat (lower median of time per token), min/max over all")
    return cfg


def hardware(device: torch.device) -> dict:
    hw = {"device": str(device), "platform": platform.platform(), "processor": platform.processor(),
          "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
    return hw
