"""The engine of ``eaglehead eval``: every method side by side on one target, one process.

Usage (the CLI parses its options into an :class:`~eaglehead.eval.plan.EvalPlan`)::

    eaglehead eval --target PATH --prompts SET [--draft EAGLE3_DIR] [--eagle1 DIR] [--draft-lm DIR]
                   [--gamma 4 | --gamma 1..8 | --gamma auto] [--temperature 0 1] [--batch-sizes 1,4,8]
                   [--methods vanilla,hf-generate,eagle3,eagle1,draft-lm,prompt-lookup,hf-assisted,
                              eagle3-tree,eagle1-tree,llamacpp,llamacpp-eagle3,llamacpp-ngram,
                              vllm,vllm-eagle3,vllm-ngram]
                   [--tree-tokens 2,4,8,12,16] [--tree-depth 4] [--tree-topk 8]
                   [--llamacpp-dtype as-is|float32|float16] [--llamacpp-head-dtype float16] [--threads 2]
                   [--max-new-tokens 128] [--repeats 3] [--out runs/eval] [--overwrite] [--seed 0]
                   [--device cuda] [--dtype bfloat16] [--report-to wandb]

    report = run_eval(EvalPlan(target=..., prompts=...))  # also writes report.json/.md/.html and PNGs to plan.out
    report = run_eval(EvalPlan(..., drafter_factories={"eagle3": lambda target: my_drafter}))  # tests

What is held fixed: one target, precision, sampling setting, prompt set and token budget for all
methods of a *serving state* (temperature, batch size). Prompts (first turn) go through the
tokenizer's chat template when it has one. ``--gamma auto`` sweeps gamma on the *tune* split per
state and method, picks it with ``gamma_select.choose_gamma`` (medians over ``--repeats``, a fitted
round-time model) and reports on the *test* split; a fixed gamma or a sweep ``a..b`` is measured on
the test split directly. Every timed pass runs ``--repeats`` times, interleaved; speedups are against
the state's fastest exact baseline (vanilla or hf-generate) and, as a second column, against vanilla.

The jobs live in their own modules: the plan and its validation (``plan.py``), transformers'
baselines (``hf_baselines.py``), scheduling and timing (``schedule.py``) and the report's records
(``assembly.py``). Methods: ``vanilla`` (our loop; always run, it is the baseline), ``hf-generate``,
``eagle3``/``eagle1`` (``eaglehead.decode.eagle.load_eagle_drafter``), ``draft-lm``
(``DraftModelDrafter`` on ``--draft-lm``), ``prompt-lookup``, ``hf-assisted``, the exact tree loop
``eagle3-tree``/``eagle1-tree`` (``EagleTreeDrafter`` on the same heads; the tree size is tuned like
gamma, ``plan_options.py``) and llama.cpp in process, ``llamacpp``/``llamacpp-eagle3``/``llamacpp-ngram``
(``llamacpp_engine.py``; batch 1; a GGUF ``--target``) and vLLM's server, ``vllm``/``vllm-eagle3``/``vllm-ngram``
(``vllm_methods.py``; a batch as concurrent requests); every record says its ``engine``. Metric
conventions: ``eval/metrics.py``.
"""

from __future__ import annotations

import torch

from eaglehead.builtin.models import load_causal_lm, load_target
from eaglehead.builtin.text import encode_prompt, eos_token_ids, pad_token_id
from eaglehead.decode import DraftModelDrafter, PromptLookupDrafter
from eaglehead.decode.drafters import output_vocab_size

from . import schedule
from .assembly import (engine_identity_notes, hardware, identity_summary, method_records, report_config,
                       torch_identity_notes)
from .gamma_select import choose_gamma, gamma_samples_from_metrics
from .journal import Journal, path_digest, plan_fingerprint
from .llamacpp_engine import LLAMACPP_ROUND_DETAIL, LLAMACPP_TIMING_NOTE, SAMPLING_NOTE, LlamaCppEngines
from .metrics import compute_metrics, itl_samples
from .plan import (DRAFTER_METHODS, ENGINE_OF, ENGINE_PLAIN, HEAD_OF, LLAMACPP_METHODS, PATH_OPTION, TREE_METHODS,
                   VLLM_METHODS, EvalPlan)
from .vllm_methods import VLLM_ROUND_DETAIL, VLLM_TIMING_NOTE, VllmEngines
from .prompts import expand_turns
from .report import check_report_consistency, collect_versions, fill_speedups, write_report
from .schedule import Item, Models
from .turns import earlier_answers, model_fingerprint


def _check_vocab(option: str, size: int, target_size: int) -> None:
    if size != target_size:
        raise ValueError(f"{option}: vocabulary size {size} does not match the target's {target_size} "
                         "(a draft for another target?)")


def _drafters(plan: EvalPlan, target, draft_lm, device: torch.device) -> dict:
    """One drafter per drafting method. A factory's drafter is checked against the target's vocabulary
    here, naming its option; the built-in ones were checked when loaded. A tree method shares its chain
    method's head (``EagleTreeDrafter`` over the same weights), from the chain's factory or checkpoint."""
    dtype = target.dtype
    drafters = {}
    for m in sorted((m for m in plan.methods if m in DRAFTER_METHODS), key=lambda m: m in TREE_METHODS):
        if m in plan.drafter_factories:
            drafters[m] = plan.drafter_factories[m](target)
            _check_vocab(PATH_OPTION.get(m, m), int(drafters[m].vocab_size), output_vocab_size(target))
        elif m in TREE_METHODS:
            drafters[m] = _tree_drafter(plan, m, target, drafters, device)
        elif m in ("eagle3", "eagle1"):
            from eaglehead.decode.eagle import load_eagle_drafter  # lazily: optional at import time

            drafters[m] = load_eagle_drafter(plan.drafts[m], target, device=device, dtype=dtype)
        elif m == "dflash":
            drafters[m] = _dflash_drafter(plan, target, device)
        elif m == "draft-lm":
            drafters[m] = DraftModelDrafter(draft_lm)
        else:
            drafters[m] = PromptLookupDrafter(output_vocab_size(target))
    return drafters


def _dflash_drafter(plan: EvalPlan, target, device: torch.device):
    """The ``--dflash`` drafter; every draft length the plan measures must fit in its block."""
    from eaglehead.decode.dflash import load_dflash_drafter

    try:
        drafter = load_dflash_drafter(plan.drafts["dflash"], target, device=device, dtype=target.dtype)
    except ValueError as err:
        raise ValueError(f"--dflash {plan.drafts['dflash']!r}: {err}") from None
    too_long = [g for g in plan.axis("dflash") if g > drafter.max_gamma]
    if too_long:
        raise ValueError(f"--gamma {too_long}: the --dflash drafter (block size {drafter.max_gamma + 1}) drafts at "
                         f"most {drafter.max_gamma} tokens a round")
    return drafter


def _tree_drafter(plan: EvalPlan, method: str, target, drafters: dict, device: torch.device):
    """``EagleTreeDrafter`` on the head of ``method``'s chain method (eagle3-tree: eagle3's)."""
    from eaglehead.decode.eagle import load_eagle_drafter
    from eaglehead.decode.tree_draft import EagleTreeDrafter

    chain_method = HEAD_OF[method]
    chain = drafters.get(chain_method)
    if chain is None and chain_method in plan.drafter_factories:
        chain = plan.drafter_factories[chain_method](target)
    if chain is None:
        chain = load_eagle_drafter(plan.drafts[chain_method], target, device=device, dtype=target.dtype)
    if not hasattr(chain, "head"):
        raise ValueError(f"drafter_factories[{chain_method!r}] returns {type(chain).__name__}, not an EAGLE drafter "
                         f"with a head; {method} needs one (or give drafter_factories[{method!r}])")
    drafter = EagleTreeDrafter(chain.head, target)
    _check_vocab(PATH_OPTION[method], int(drafter.vocab_size), output_vocab_size(target))
    return drafter


def load_models(plan: EvalPlan):
    """(models, tokenizer): the target, the draft LM when a method needs it, and every drafter."""
    device = torch.device(plan.device)
    target, tok = load_target(plan.target, dtype=plan.dtype, device=device)
    needs_lm = ("draft-lm" in plan.methods and "draft-lm" not in plan.drafter_factories) or \
        ("hf-assisted" in plan.methods and "draft-lm" in plan.drafts)
    draft_lm = None
    if needs_lm:
        draft_lm = load_causal_lm(plan.drafts["draft-lm"], dtype=plan.dtype, device=device, option="--draft-lm")
        _check_vocab("--draft-lm", output_vocab_size(draft_lm), output_vocab_size(target))
    eos = eos_token_ids(target, tok)
    drafters = _drafters(plan, target, draft_lm, device)
    if plan.cpu_linear == "packed" and device.type == "cpu":
        _pack_loaded(plan, target, draft_lm, drafters)
    models = Models(target=target, draft_lm=draft_lm, drafters=drafters, eos=eos,
                    pad_id=pad_token_id(tok, eos), device=device, max_new=plan.max_new_tokens, seed=plan.seed,
                    tree_shape=plan.tree_shape)
    return models, tok


def _pack_loaded(plan: EvalPlan, target, draft_lm, drafters: dict) -> None:
    """``--cpu-linear packed``: the linear layers of every model this run loaded (the target, the draft LM, the
    heads; not a factory's drafter, which is the caller's object) run on packed weights, so every torch method,
    vanilla included, gets the same kernels."""
    from eaglehead.decode.packed_linear import pack_linears

    pack_linears(target)
    if draft_lm is not None:
        pack_linears(draft_lm)
    for method, drafter in drafters.items():
        if method not in plan.drafter_factories and HEAD_OF.get(method, method) not in plan.drafter_factories \
                and hasattr(drafter, "head"):
            pack_linears(drafter.head)


def _tune_gammas(plan: EvalPlan, models: Models, tune: list[Item], spec: list[str], state: dict, bar,
                 selections: list, sweeps: list, journal: Journal) -> dict[str, list[int]]:
    """``--gamma auto``: each drafting method's gamma, chosen on the tune split (records appended) by
    ``choose_gamma``: medians over the repeats and a fitted round-time model, not single timings."""
    tuned = schedule.run_state(models, tune, [(m, g) for m in spec for g in plan.axis(m)], state["temperature"],
                               state["batch_size"], bar, repeats=plan.repeats, journal=journal, phase="tune")
    chosen = {}
    for m in spec:
        per_g = {g: [compute_metrics(schedule.repeat_results(tuned[(m, g)], k)) for k in range(plan.repeats)]
                 for g in plan.axis(m)}
        choice = choose_gamma(gamma_samples_from_metrics(per_g), seed=plan.seed)
        chosen[m] = [choice.chosen]
        axis = "verified tree nodes" if m in TREE_METHODS else "draft length"
        selections.append({"method": m, **state, "split": "tune", "axis": axis, **choice.to_dict()})
        rows = {row.gamma: row for row in choice.table}
        sweeps += [{"method": m, "gamma": g, "tau": per_g[g][0].tau, "time_per_token_s": rows[g].time_per_token_median_s,
                    "time_per_token_min_s": rows[g].time_per_token_min_s,
                    "time_per_token_max_s": rows[g].time_per_token_max_s,
                    "time_per_token_modelled_s": rows[g].time_per_token_modelled_s, "repeats": plan.repeats,
                    **state, "split": "tune"} for g in plan.axis(m)]
    return chosen


def _key_extra(plan: EvalPlan, models: Models, method: str, gamma: int | None) -> dict:
    """The run records' fields that describe how ``method`` ran (besides its metrics)."""
    extra = {"split": "test", "gamma_mode": plan.gamma_mode}
    if method.startswith("hf-"):
        extra["timing_note"] = "HF: first streamer event is prefill; whole round time booked as T_v"
    if method == "hf-assisted":
        extra["assistant"] = "draft-lm" if models.draft_lm is not None else "prompt-lookup"
    if method in TREE_METHODS:
        extra.update(zip(("tree_depth", "tree_topk", "tree_tokens"), plan.tree_shape(gamma)))
    if method in LLAMACPP_METHODS:
        extra.update(timing_note=LLAMACPP_TIMING_NOTE, round_detail=LLAMACPP_ROUND_DETAIL)
    if method in VLLM_METHODS:
        extra.update(timing_note=VLLM_TIMING_NOTE, round_detail=VLLM_ROUND_DETAIL)
    return extra


def _run_state(plan: EvalPlan, models: Models, items: tuple[list[Item], list[Item]], labels: tuple[dict, dict],
               state: dict, bar, journal: Journal, out: dict[str, list]) -> None:
    """One serving state: tune (``--gamma auto``) on ``items[0]``, measure every method on ``items[1]`` (the
    test split), and append its run records, sweeps, gamma choices and inter-token gaps to ``out``.
    ``labels``: the category and the turn of every prompt id."""
    tune, test = items
    temp, bsz = state["temperature"], state["batch_size"]
    methods, spec = plan.state_methods(bsz)
    chosen = {m: list(plan.axis(m)) for m in spec}
    if plan.gamma_mode == "auto" and spec:
        chosen = _tune_gammas(plan, models, tune, spec, state, bar, out["gamma_selection"], out["sweeps"], journal)
    keys = [(m, None) for m in methods if m not in spec] + [(m, g) for m in spec for g in chosen[m]]
    result = schedule.run_state(models, test, keys, temp, bsz, bar, repeats=plan.repeats, journal=journal)
    for key in keys:
        engine = ENGINE_OF.get(key[0], "torch")
        reference = ENGINE_PLAIN.get(engine, "vanilla")  # greedy identity within one engine
        recs = method_records(key, result[key], result[("vanilla", None)], labels[0], temp == 0, state,
                              _key_extra(plan, models, *key), turn_of=labels[1], engine=engine,
                              reference=(reference, result[(reference, None)]))  # "all" first
        out["runs"] += recs
        out["itl_samples"].append({"method": key[0], "gamma": key[1], "temperature": temp, "batch_size": bsz,
                                   "gaps": itl_samples([r for _, r in result[key].pairs])})  # every repeat
        if plan.gamma_mode == "sweep" and key[0] in spec:
            out["sweeps"].append({"method": key[0], "gamma": key[1], "tau": recs[0]["tau"],
                                  "time_per_token_s": recs[0]["time_per_token_s"],
                                  "time_per_token_min_s": recs[0]["time_per_token_min_s"],
                                  "time_per_token_max_s": recs[0]["time_per_token_max_s"], "repeats": plan.repeats,
                                  **state, "split": "test"})


def encode_items(plan: EvalPlan, models: Models, tok, tune_prompts, test_prompts) -> tuple[tuple, tuple[dict, dict]]:
    """((tune, test) items, (category, turn) of every prompt id): multi-turn prompts expanded (turn k after
    the target's own cached greedy answers to turns < k) and encoded."""
    answers = earlier_answers(models.target, tok, tune_prompts + test_prompts, max_new_tokens=plan.max_new_tokens,
                              eos=models.eos, pad_id=models.pad_id)
    tune_prompts, test_prompts = expand_turns(tune_prompts, answers), expand_turns(test_prompts, answers)
    encoded = {p.id: encode_prompt(tok, p.text, history=p.history) for p in tune_prompts + test_prompts}
    every = tune_prompts + test_prompts
    labels = ({p.id: p.category for p in every}, {p.id: p.turn for p in every})
    return ([(p, encoded[p.id]) for p in tune_prompts], [(p, encoded[p.id]) for p in test_prompts]), labels


def _state_notes(plan: EvalPlan) -> list[str]:
    notes = []
    wide = [b for b in plan.batch_sizes if b > 1]
    if "hf-assisted" in plan.methods and wide:
        notes.append("hf-assisted runs at batch_size 1 only: transformers' assisted generation supports batch "
                     f"size 1; skipped at batch sizes {wide}")
    llama = [m for m in plan.methods if m in LLAMACPP_METHODS]
    if llama and wide:
        notes.append(f"{', '.join(llama)} run at batch_size 1 only (one request at a time through llama.cpp's "
                     f"server); skipped at batch sizes {wide}")
    if llama and any(t > 0 for t in plan.temperatures):
        notes.append(SAMPLING_NOTE)
    if any(m in VLLM_METHODS for m in plan.methods) and wide:
        notes.append(f"vLLM methods at batch sizes {wide}: each batch is sent as that many concurrent requests "
                     "(continuous batching); the torch methods run the same rows as one static batch")
    return notes


def run_eval(plan: EvalPlan) -> dict:
    """Run the evaluation ``plan`` describes, write the report into ``plan.out`` and return it. A plan with
    ``--concurrency`` or ``--arrival-rate`` is a load sweep (``load_sweep.py``)."""
    if plan.load:
        from .load_sweep import run_load_eval

        return run_load_eval(plan)
    tune_prompts, test_prompts = plan.load_prompts()  # prompt errors come before any model is loaded
    models, tok = load_models(plan)
    journal = Journal(plan.out, plan_fingerprint(plan.to_dict(), model_fingerprint(models.target),
                                                 {m: path_digest(p) for m, p in sorted(plan.drafts.items())}),
                      resume=plan.resume)
    (tune, test), labels = encode_items(plan, models, tok, tune_prompts, test_prompts)
    if any(m in LLAMACPP_METHODS for m in plan.methods):
        longest = max(len(ids) for _, ids in tune + test)
        models.llamacpp = LlamaCppEngines.for_plan(plan, tok, models.eos, n_ctx=longest + plan.max_new_tokens)
    if any(m in VLLM_METHODS for m in plan.methods):
        longest = max(len(ids) for _, ids in tune + test)
        models.vllm = VllmEngines.for_plan(plan, models.eos, max_model_len=longest + plan.max_new_tokens)
    out: dict[str, list] = {"runs": [], "sweeps": [], "gamma_selection": [], "itl_samples": []}
    notes = _state_notes(plan)
    from tqdm.auto import tqdm

    bar = tqdm(total=schedule.count_calls(plan, tune, test), desc=f"eval {plan.prompt_set}", unit="call")
    try:
        for temp in plan.temperatures:
            for bsz in plan.batch_sizes:
                state = dict(prompt_set=plan.prompt_set, temperature=temp, batch_size=bsz)
                _run_state(plan, models, (tune, test), labels, state, bar, journal, out)
    finally:
        bar.close()
        for engines in (models.llamacpp, models.vllm):
            if engines is not None:
                engines.close()
    runs = out["runs"]
    fill_speedups(runs)
    measured_in = [launch for launch in journal.launches if launch.get("calls_measured")]  # replays measure none
    if len(measured_in) > 1:
        notes.append(f"resumed: the calls were measured over {len(measured_in)} launches (config.launches); "
                     "each batch's methods ran side by side within one launch")
    notes += torch_identity_notes(runs, plan.dtype) + engine_identity_notes(runs)
    config = {**report_config(plan, tok, models.eos, models.pad_id, len(tune), len(test)), "launches": journal.launches}
    if models.llamacpp is not None:
        config["llamacpp"] = models.llamacpp.description
    if models.vllm is not None:
        config["vllm"] = models.vllm.description
    report = {"config": config, "versions": collect_versions(), "hardware": hardware(models.device), **out,
              "identity": identity_summary(runs), "notes": notes}
    report["consistency_violations"] = check_report_consistency(report)
    files = write_report(plan.out, report)
    if plan.report_to == "wandb":
        from .wandb_log import log_report

        log_report(report, files, project=plan.wandb_project, out_dir=plan.out)
    return report
