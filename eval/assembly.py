"""Report assembly for ``eaglehead eval``: run records per method, state and category, the identity
check against vanilla, and the report's config and hardware blocks.

Greedy runs record ``identical_to_vanilla`` (token-identical to our torch vanilla on every prompt) and
``identical_to_reference`` / ``mismatched_prompts`` against their engine's own exact decoding
(``identity_reference``: ``vanilla`` for torch methods, ``llamacpp`` for llama.cpp methods, whose
quantized or differently rounded model need not match torch's); sampled runs record ``null``. Output
lengths and EOS-terminated rows are reported per run, never trimmed.
"""

from __future__ import annotations

import os
import platform

import torch

from eaglehead.builtin.devices import cpu_info

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
                   state: dict, extra: dict, turn_of: dict[str, int] | None = None, engine: str = "torch",
                   reference: tuple[str, MethodRuns] | None = None) -> list[dict]:
    """The ``runs`` entries of one method in one state: ``all`` first, then one per category; with
    multi-turn prompts also one per turn (``turn`` 1, 2, ...) overall and per category. Entries over
    every turn carry ``turn: "all"``. ``base`` is torch vanilla; ``reference`` (name, runs) the exact
    decoding of the method's own engine (default: vanilla)."""
    method, gamma = key
    ref_name, ref = reference or ("vanilla", base)
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
            same, bad = _identity(rec, ref, ids, greedy)
            as_vanilla, bad_vanilla = _identity(rec, base, ids, greedy)
            if ref is not base:
                extra = {**extra, "mismatched_vanilla_prompts": bad_vanilla}
            runs.append(run_record(
                method, reps[idx], category=category, turn=turn, gamma=gamma, peak_mem_bytes=rec.peak, **state,
                engine=engine, requests=len(ids), eos_rows=sum(rec.eos[i] for i in ids), identity_reference=ref_name,
                identical_to_reference=same, identical_to_vanilla=as_vanilla, mismatched_prompts=bad, **spread,
                **extra))
    return runs


def _overall(r: dict) -> bool:
    """A run's record over every category and turn (the one the identity verdicts and notes read)."""
    return r["category"] == "all" and r.get("turn", "all") == "all"


def _same(r: dict) -> bool | None:
    return r.get("identical_to_reference", r["identical_to_vanilla"])


def identity_summary(runs: list[dict]) -> dict:
    """Greedy runs (category all, every turn) token-identical to their engine's exact decoding. The top-level
    verdict is about our torch loops (exact by construction, so any mismatch is a bug); other engines are
    summarised apart under ``engines`` (llama.cpp's batched verification rounds differently from its
    one-token steps, so a near-tie can flip a greedy token there)."""
    greedy_runs = [r for r in runs if _same(r) is not None and _overall(r)]
    out: dict = {}
    for engine in dict.fromkeys(r.get("engine", "torch") for r in greedy_runs):
        mine = [r for r in greedy_runs if r.get("engine", "torch") == engine]
        out[engine] = {"greedy_runs_checked": len(mine), "all_identical": all(_same(r) for r in mine),
                       "mismatched": [(r["method"], r["gamma"], r["temperature"], r["batch_size"])
                                      for r in mine if not _same(r)]}
    torch_side = out.pop("torch", {"greedy_runs_checked": 0, "all_identical": True, "mismatched": []})
    return {**torch_side, "engines": out} if out else torch_side


def engine_identity_notes(runs: list[dict]) -> list[str]:
    """One note per greedy serving state with runs on another engine: how many of their prompts equal torch
    vanilla's output (with a float32 GGUF, llama.cpp runs the torch model; a quantized file does not)."""
    notes = []
    for r in runs:
        if r.get("mismatched_vanilla_prompts") is None or not _overall(r):
            continue
        same = r["requests"] - r["mismatched_vanilla_prompts"]
        notes.append(f"{r['method']} (gamma {r['gamma']}, batch {r['batch_size']}, {r['engine']}): identical to "
                     f"{r['identity_reference']} on {r['requests'] - r['mismatched_prompts']}/{r['requests']} "
                     f"prompts; identical to torch vanilla on {same}/{r['requests']}")
    return notes


def torch_identity_notes(runs: list[dict], dtype: str) -> list[str]:
    """One note per greedy torch run (category all, every turn) whose outputs are not all token-identical to
    torch vanilla's: how many prompts are, and what that means at the target's ``dtype``. In float32 the
    speculative loops are exact by construction and a mismatch is a bug; in a 16-bit dtype a forward over
    several tokens rounds differently from one-token steps (other kernels and accumulation orders), so a greedy
    near-tie can flip and the texts part from there: exactness is proven in float32, not bit-identity here."""
    notes = []
    for r in runs:
        if r.get("engine", "torch") != "torch" or not _overall(r) or r.get("identical_to_vanilla") in (None, True):
            continue
        same = r["requests"] - (r.get("mismatched_prompts") or 0)
        why = ("a bug: in float32 the speculative loops are exact by construction" if dtype == "float32" else
               f"expected in {dtype}: a forward over several tokens rounds differently from one-token steps, so a "
               "greedy near-tie can flip and the texts part from there (token identity is proven in float32)")
        notes.append(f"{r['method']} (gamma {r['gamma']}, batch {r['batch_size']}, torch): identical to torch "
                     f"vanilla on {same}/{r['requests']} prompts; {why}")
    return notes


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
    cpu = cpu_info()
    hw = {"device": str(device), "platform": platform.platform(), "processor": cpu["model"] or platform.processor(),
          "cpu_flags": cpu["flags"], "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
    return hw
