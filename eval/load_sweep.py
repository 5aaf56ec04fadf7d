"""``eaglehead eval --concurrency 1,2,4 [--arrival-rate 0.5] --max-new-tokens 64,256``: the serving sweep.

    eaglehead eval --target builtin:smollm2-135m-instruct --draft builtin/assets/smollm2_eagle3 \\
        --prompts long-context:1k,2k --methods vanilla,eagle3,llamacpp,llamacpp-eagle3 --llamacpp-dtype float32 \\
        --concurrency 1,2,4 --max-new-tokens 64,256 --gamma auto:1..4 --out runs/load

    report = run_load_eval(plan)  # run_eval calls it when plan.load; writes report.json/.md/.html and PNGs

A *serving state* is (method, draft length, engine, load, output budget, context bucket, dtype); the load is a
closed loop at concurrency N or an open Poisson loop at a rate, with in-flight capacity the largest
``--concurrency`` (4 when none is given). Requests: a bucket's prompts of the split (``long-context``'s buckets;
every other set is one bucket, ``short``), cycled to ``--load-requests`` or at least 2 x the in-flight count, all
with the state's budget. The load generator, its metrics and its policies: ``eval/load.py``; the engines:
``eval/load_drivers.py``. Every state is journaled the moment it is measured (``--resume`` replays it).

Speedup of a state = its engine's plain method's time per committed token (the inverse of committed tokens/s
over the window) / the method's, in the same state: vanilla for the torch loop, ``llamacpp`` for llama.cpp,
``vllm`` for vLLM. A saturated state has no speedup.

The draft length belongs to the serving state (``--gamma auto``). For every drafting method the candidates are
measured on the *tune* requests per (context bucket, load) at the smallest budget, in this run's dtype; the torch
loop's choice is ``gamma_select.choose_gamma`` on the measured round times and committed tokens per round
(``dC/dK`` against ``C/K``, the design document's inequality); an engine has no per-round records, so its choice is
the candidate of least measured time per token. The *fixed* alternative is the one candidate with the least mean
of (time per token / the state's best) over all tune states. Both run on the test requests and the report says,
per state, which wins on mean TPOT and on p95 ITL. With a fixed ``--gamma`` or a sweep ``a..b`` every given
draft length is measured on the test requests.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from typing import Any

import torch

from eaglehead.draftheads.config import target_dims

from . import schedule
from .assembly import hardware, report_config
from .gamma_select import choose_gamma
from .journal import Journal, path_digest, plan_fingerprint
from .load import LoadSpec, Request, run_load, summarise
from .load_drivers import LlamaCppSlots, TorchBatchDriver, VllmStream
from .metrics import compute_metrics
from .plan import ENGINE_OF, ENGINE_PLAIN, GAMMA_METHODS, LLAMACPP_METHODS, TREE_METHODS, VLLM_METHODS, EvalPlan
from .report import collect_versions

DEFAULT_CAPACITY = 4
WARMUP_TOKENS = 8
LOAD_SKIPPED = ("hf-generate", "hf-assisted")  # transformers' generate takes pre-formed batches only
DRAFT_KIND = {"llamacpp-eagle3": "eagle3", "llamacpp-dflash": "dflash", "llamacpp-ngram": "ngram"}


def context_bucket(category: str) -> str:
    """``summarise-2k`` -> ``2k`` (long-context's buckets); any other category -> ``short``."""
    m = re.search(r"-(\d+k)$", category)
    return m.group(1) if m else "short"


def load_specs(plan: EvalPlan) -> list[LoadSpec]:
    capacity = max(plan.concurrency) if plan.concurrency else DEFAULT_CAPACITY
    return ([LoadSpec(concurrency=n, seed=plan.seed) for n in sorted(plan.concurrency)]
            + [LoadSpec(rate=r, capacity=capacity, seed=plan.seed) for r in plan.arrival_rates])


def _load_fields(spec: LoadSpec) -> dict:
    return {"load": "closed" if spec.rate is None else "poisson", "concurrency": spec.concurrency,
            "arrival_rate": spec.rate, "in_flight": spec.slots}


class _Engines:
    """The drivers of one sweep; servers are started on first use and kept while their slot count is used."""

    def __init__(self, plan: EvalPlan, models: schedule.Models, tok, longest: int):
        self.plan, self.models = plan, models
        self.kv_per_token = kv_bytes_per_token(models.target.config, next(models.target.parameters()).dtype)
        self.ctx_per_slot = 256 * -(-(longest + plan.max_new_tokens + 64) // 256)
        self.llama = self.vllm = None
        self._slots: dict[tuple, LlamaCppSlots] = {}
        if any(m in LLAMACPP_METHODS for m in plan.methods):
            from .llamacpp_engine import LlamaCppEngines

            self.llama = LlamaCppEngines.for_plan(plan, tok, models.eos, n_ctx=longest + plan.max_new_tokens)
        if any(m in VLLM_METHODS for m in plan.methods):
            from .vllm_methods import VllmEngines

            self.vllm = VllmEngines.for_plan(plan, models.eos, max_model_len=longest + plan.max_new_tokens + 64)

    def driver(self, method: str, gamma: int | None, spec: LoadSpec, temperature: float):
        engine = ENGINE_OF.get(method, "torch")
        if engine == "torch":
            return TorchBatchDriver(self.models, method, gamma, temperature=temperature, batch_size=spec.slots)
        n = 0 if method in ENGINE_PLAIN.values() else int(gamma or 0)
        if engine == "vllm":
            return VllmStream(self.vllm.server(method, n), slots=spec.slots, eos=self.models.eos,
                              temperature=temperature, seed=self.plan.seed)
        key = (method if n else "llamacpp", n, spec.slots)
        for other in [k for k in self._slots if k[2] != spec.slots]:  # one slot count at a time: memory
            self._slots.pop(other).close()
        if key not in self._slots:
            draft = None
            if n:
                kind = DRAFT_KIND[method]
                draft = ({"kind": "ngram", "size_n": 3, "size_m": n} if kind == "ngram" else
                         {"kind": kind, "n_max": n,
                          "path": str(self.llama.head_path if kind == "eagle3" else self.llama.dflash_path)})
            self._slots[key] = LlamaCppSlots(self.llama.model_path, slots=spec.slots, ctx_per_slot=self.ctx_per_slot,
                                             threads=self.llama.threads, eos=self.models.eos, draft=draft,
                                             temperature=temperature, seed=self.plan.seed)
        return self._slots[key]

    def close(self) -> None:
        for s in self._slots.values():
            s.close()
        self._slots.clear()
        for e in (self.llama, self.vllm):
            if e is not None:
                e.close()


def _requests(items: list, bucket: str, budget: int, n_min: int, explicit: int | None) -> list[Request]:
    """The bucket's prompts, cycled to ``explicit`` requests or at least ``n_min``."""
    pool = [(p, ids) for p, ids in items if context_bucket(p.category) == bucket]
    if not pool:
        return []
    n = explicit or max(len(pool), n_min)
    return [Request(f"{pool[k % len(pool)][0].id}#{k // len(pool)}", list(pool[k % len(pool)][1]), budget,
                    pool[k % len(pool)][0].category) for k in range(n)]


def _measure(ctx: _Engines, journal: Journal, state: dict, spec: LoadSpec, reqs: list[Request]) -> dict:
    """One state's record: replayed from the journal, or measured and journaled."""
    key = json.dumps(state, sort_keys=True)
    done = journal.replay_load(key)
    if done is not None:
        return done
    method, gamma = state["method"], state["gamma"]
    driver = ctx.driver(method, gamma, spec, state["temperature"])
    warm = Request("warmup", reqs[0].prompt, min(WARMUP_TOKENS, reqs[0].max_new))
    before = driver.server.spec_counters() if isinstance(driver, VllmStream) and gamma else None
    run = run_load(driver, reqs, spec, warmup=warm)
    rec: dict[str, Any] = {**state, **summarise(run), "policy": run.policy, "tau": None, "round_samples": None}
    if isinstance(driver, TorchBatchDriver):
        m = compute_metrics(driver.results[1:])  # the warm-up call is the first
        rec["tau"] = m.tau
        if gamma and m.round_time_mean_s is not None:
            rec["round_samples"] = [m.t_draft_mean_s, m.t_verify_mean_s, m.t_rest_mean_s, m.committed_per_round]
        rec["peak_bytes"] = driver.peak
    else:  # the server's processes since they started (their KV cache included)
        rec["peak_bytes"] = driver.peak_bytes()
    rec["kv_bytes"] = kv_in_flight_bytes(ctx.kv_per_token, spec, reqs)
    if before is not None:
        rec["tau"] = (driver.server.spec_counters() - before).tokens_per_round
    journal.record_load(key, rec)
    return rec


def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    """Bytes of the target's KV cache per position: layers x (K and V) x KV heads x head dim x element size."""
    t = target_dims(getattr(config, "text_config", None) or config)
    return (t["num_hidden_layers"] * 2 * t["num_key_value_heads"] * t["head_dim"]
            * torch.empty((), dtype=dtype).element_size())


def kv_in_flight_bytes(per_token: int, spec: LoadSpec, reqs: list[Request]) -> int:
    """The target's KV cache for the most requests this state holds at once (its in-flight limit), each at the
    longest prompt plus the budget: what the state needs the cache to hold, whatever the engine allocates."""
    n = min(spec.slots, len(reqs))
    return n * (max(len(r.prompt) for r in reqs) + max(r.max_new for r in reqs)) * per_token


def _tpt(rec: dict) -> float:
    return rec["time_per_token_s"] if rec.get("time_per_token_s") else math.inf


def _choose(method: str, recs: dict[int, dict], seed: int) -> tuple[int, str]:
    """(draft length, how) for one tune state from ``{gamma: record}``."""
    ok = {g: r for g, r in recs.items() if not r["saturated"]}
    if not ok:
        return min(recs), "every candidate saturated: the smallest"
    if ENGINE_OF.get(method, "torch") == "torch":
        samples = {g: [tuple(r["round_samples"])] for g, r in ok.items() if r.get("round_samples")}
        if samples:
            c = choose_gamma(samples, seed=seed)
            return c.chosen, f"dC/dK rule (choose_gamma): {c.note}"
    g = min(ok, key=lambda g: (_tpt(ok[g]), g))
    return g, "least measured time per token (the engine gives no per-round records)"


def _fixed(by_state: dict[tuple, dict[int, dict]]) -> int:
    """The one draft length with the least mean of (time per token / the state's best) over the tune states."""
    cands = sorted(set.intersection(*(set(v) for v in by_state.values())))
    def score(g):
        ratios = []
        for recs in by_state.values():
            best = min(_tpt(r) for r in recs.values())
            ratios.append(_tpt(recs[g]) / best if math.isfinite(best) else 1.0)
        return statistics.fmean(ratios)
    return min(cands, key=lambda g: (score(g), g))


def _plain_state(plan: EvalPlan, method: str, gamma, spec: LoadSpec, budget: int, bucket: str, split: str,
                 temperature: float) -> dict:
    return {"method": method, "gamma": gamma, "engine": ENGINE_OF.get(method, "torch"), **_load_fields(spec),
            "budget": budget, "bucket": bucket, "split": split, "temperature": temperature, "dtype": plan.dtype}


def sweep(plan: EvalPlan, ctx: _Engines, journal: Journal, tune: list, test: list, bar=None) -> dict[str, list]:
    """Every state of the plan: tune (``--gamma auto``), then the test records and the per-state choices."""
    out: dict[str, list] = {"load": [], "load_tune": [], "load_gamma": []}
    methods = [m for m in plan.methods if m not in LOAD_SKIPPED]
    spec_methods = [m for m in methods if m in GAMMA_METHODS]
    buckets = sorted({context_bucket(p.category) for p, _ in test}, key=lambda b: (b != "short", int(b[:-1] or 0)
                                                                                    if b != "short" else 0))
    specs = load_specs(plan)
    for temp in plan.temperatures:
        chosen: dict[tuple, int] = {}
        fixed: dict[str, int] = {}
        if plan.gamma_mode == "auto" and spec_methods:
            budget = min(plan.budgets)
            for m in spec_methods:
                by_state: dict[tuple, dict[int, dict]] = {}
                for spec in specs:
                    for b in buckets:
                        reqs = _requests(tune, b, budget, 2 * spec.slots, plan.load_requests)
                        if not reqs:
                            continue
                        recs = {}
                        for g in plan.axis(m):
                            recs[g] = _measure(ctx, journal, _plain_state(plan, m, g, spec, budget, b, "tune", temp),
                                               spec, reqs)
                            out["load_tune"].append(recs[g])
                            if bar is not None:
                                bar.update(1)
                        by_state[(spec.label, b)] = recs
                        chosen[(m, spec.label, b)], how = _choose(m, recs, plan.seed)
                        out["load_gamma"].append({"method": m, **_load_fields(spec), "bucket": b, "temperature": temp,
                                                  "dtype": plan.dtype, "chosen": chosen[(m, spec.label, b)],
                                                  "how": how, "tune_budget": budget})
                if by_state:
                    fixed[m] = _fixed(by_state)
        for budget in plan.budgets:
            for spec in specs:
                for b in buckets:
                    reqs = _requests(test, b, budget, 2 * spec.slots, plan.load_requests)
                    if not reqs:
                        continue
                    for m in methods:
                        if m not in spec_methods:
                            gammas = [None]
                        elif plan.gamma_mode == "auto":
                            per = chosen.get((m, spec.label, b), fixed.get(m, plan.gammas[0]))
                            gammas = sorted({per, fixed.get(m, per)})
                        else:
                            gammas = list(plan.axis(m))
                        for g in gammas:
                            rec = _measure(ctx, journal, _plain_state(plan, m, g, spec, budget, b, "test", temp),
                                           spec, reqs)
                            role = []
                            if plan.gamma_mode == "auto" and m in spec_methods:
                                role = [r for r, v in (("per-state", chosen.get((m, spec.label, b))),
                                                       ("fixed", fixed.get(m))) if v == g]
                            out["load"].append({**rec, "gamma_role": role})
                            if bar is not None:
                                bar.update(1)
    fill_load_speedups(out["load"])
    out["load_gamma_verdicts"] = gamma_verdicts(out["load"])
    return out


def _state_of(r: dict) -> tuple:
    return (r["engine"], r["load"], r["concurrency"], r["arrival_rate"], r["budget"], r["bucket"], r["temperature"],
            r["split"])


def fill_load_speedups(records: list[dict]) -> None:
    """``speedup``: the engine's plain method's time per token over the record's, in the same state."""
    base = {_state_of(r): r for r in records if r["method"] == ENGINE_PLAIN.get(r["engine"], "vanilla")}
    for r in records:
        b = base.get(_state_of(r))
        ok = b is not None and b.get("time_per_token_s") and r.get("time_per_token_s")
        r["speedup"] = b["time_per_token_s"] / r["time_per_token_s"] if ok else None
        r["baseline"] = ENGINE_PLAIN.get(r["engine"], "vanilla")


def gamma_verdicts(records: list[dict]) -> list[dict]:
    """Per state of a drafting method under ``--gamma auto``: the per-state draft length against the fixed one
    on the test requests, on mean TPOT and on p95 ITL (ties: the same draft length)."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in records:
        for role in r.get("gamma_role") or []:
            groups.setdefault((r["method"], *_state_of(r)), {})[role] = r
    out = []
    for key, roles in groups.items():
        per, fix = roles.get("per-state"), roles.get("fixed")
        if per is None or fix is None:
            continue

        def wins(field):
            a, b = per.get(field), fix.get(field)
            return None if a is None or b is None else a <= b

        out.append({"method": key[0], "engine": per["engine"], "load": per["load"], "concurrency": per["concurrency"],
                    "arrival_rate": per["arrival_rate"], "budget": per["budget"], "bucket": per["bucket"],
                    "temperature": per["temperature"], "per_state_gamma": per["gamma"], "fixed_gamma": fix["gamma"],
                    "tpot_mean_s": [per.get("tpot_mean_s"), fix.get("tpot_mean_s")],
                    "itl_p95_s": [per.get("itl_p95_s"), fix.get("itl_p95_s")],
                    "wins_tpot_mean": wins("tpot_mean_s"), "wins_itl_p95": wins("itl_p95_s")})
    return out


def count_states(plan: EvalPlan, tune: list, test: list) -> int:
    methods = [m for m in plan.methods if m not in LOAD_SKIPPED]
    spec_m = [m for m in methods if m in GAMMA_METHODS]
    nb = len({context_bucket(p.category) for p, _ in test})
    nbt = len({context_bucket(p.category) for p, _ in tune})
    ns = len(load_specs(plan))
    tune_n = sum(len(plan.axis(m)) for m in spec_m) * ns * nbt if plan.gamma_mode == "auto" else 0
    per = sum(1 if m not in spec_m else (2 if plan.gamma_mode == "auto" else len(plan.axis(m))) for m in methods)
    return tune_n + per * ns * nb * len(plan.budgets) * len(plan.temperatures)


def run_load_eval(plan: EvalPlan) -> dict:
    """The load sweep ``plan`` describes (module docstring); the report is written into ``plan.out``."""
    from tqdm.auto import tqdm

    from .load_report import write_load_report
    from .runner import encode_items, load_models  # the batch evaluation's loaders: one way to load and encode

    tune_prompts, test_prompts = plan.load_prompts()
    models, tok = load_models(plan)
    from .turns import model_fingerprint

    journal = Journal(plan.out, plan_fingerprint(plan.to_dict(), model_fingerprint(models.target),
                                                 {m: path_digest(p) for m, p in sorted(plan.drafts.items())}),
                      resume=plan.resume)
    (tune, test), _ = encode_items(plan, models, tok, tune_prompts, test_prompts)
    longest = max(len(ids) for _, ids in tune + test)
    ctx = _Engines(plan, models, tok, longest)
    bar = tqdm(total=count_states(plan, tune, test), desc=f"load {plan.prompt_set}", unit="state")
    try:
        out = sweep(plan, ctx, journal, tune, test, bar)
    finally:
        bar.close()
        ctx.close()
    notes = []
    skipped = [m for m in plan.methods if m in LOAD_SKIPPED]
    if skipped:
        notes.append(f"{', '.join(skipped)}: not in a load sweep (transformers' generate takes pre-formed batches)")
    if any(m in TREE_METHODS for m in plan.methods):
        notes.append("tree methods form static batches like the chain loop")
    config = {**report_config(plan, tok, models.eos, models.pad_id, len(tune), len(test)),
              "launches": journal.launches, "load_specs": [s.label for s in load_specs(plan)],
              "device_torch_threads": torch.get_num_threads()}
    report = {"config": config, "versions": collect_versions(), "hardware": hardware(models.device), "runs": [],
              **out, "notes": notes}
    write_load_report(plan.out, report)
    return report
