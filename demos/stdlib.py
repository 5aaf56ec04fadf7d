"""``eaglehead demo``: the whole job on a CPU, end to end, with nothing downloaded.

    make demo                      # = eaglehead demo --out runs/demo
    eaglehead demo --size tiny     # seconds: the same pipeline at toy sizes (what CI runs)

1. Target: the shipped demo target (``eaglehead.pretrain.demo_target``: a 10-layer Llama trained on the Python
   standard library), verified and cached under ``~/.cache/eaglehead``.
2. Heads: the target runs once over the training data (``eaglehead prepare --cache-features``); from
   those features an EAGLE-3 head (fused layers, reduced draft vocabulary, 3-step rollout) and the
   EAGLE-1 ablation (top layer only, full vocabulary) are each trained by the same accelerate recipe
   users run (``configs/demo.yaml``) with the same budget, side by side, then exported in the EAGLE-3
   layout.
3. Draft LM: a 1-layer Llama trained on the same corpus with the target's tokenizer (classic
   speculative sampling's drafter, of similar per-step cost to the head), shipped like the target
   with the recipe and command that reproduce it (``eaglehead.builtin.shipped.DRAFT_LM_ASSETS_DIR``).
4. Evaluation with ``eaglehead eval`` on held-out standard-library files and on HumanEval prompts:
   every method, greedy and temperature 1, batch 1 and 4, gamma chosen by the rule on the tune split.
5. A first-token distribution check at temperature 1, the report, and a three-line summary.

Everything is cached in ``--out`` keyed by its inputs; a changed recipe or a damaged file is rebuilt
with a message saying so.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

from .common import CONFIGS, first_token_check, has_stamp, input_key, pick_run, say, stage_timer, write_stamp

SHIPPED_HEADS = Path(str(files("eaglehead.builtin") / "assets"))
RETRAIN = "eaglehead demo --retrain"
# The demo's methods: every chain method of our loop and transformers' peers (the tree and llama.cpp methods are
# evaluated on SmolLM2, whose target llama.cpp loads as a GGUF file).
METHODS = ("vanilla", "hf-generate", "eagle3", "eagle1", "draft-lm", "prompt-lookup", "hf-assisted")


# ----------------------------------------------------------------------------------------- sizes

def _sizes(size: str, head_steps: int | None = None) -> dict:
    """Every stage's size; ``head_steps`` overrides ``optim.max_steps`` of both heads (same budget)."""
    sizes = _base_sizes(size)
    if head_steps is not None:
        if head_steps < 1:
            raise ValueError(f"--head-steps: expected a positive number of training steps, got {head_steps}")
        sizes["head"] = [*sizes["head"], f"optim.max_steps={head_steps}"]
    return sizes


def _base_sizes(size: str) -> dict:
    from eaglehead.pretrain.demo_target import Settings

    if size == "tiny":
        return dict(
            target=Settings(steps=3, vocab=512, layers=4, width=32, heads=2, intermediate=64, seq_len=160, batch=2,
                            warmup=1, eval_every=3, eval_chunks=2, corpus_limit=6),
            draft_lm=Settings(steps=3, vocab=512, layers=1, width=32, heads=2, intermediate=64, seq_len=160, batch=2,
                              warmup=1, eval_every=3, eval_chunks=2, corpus_limit=6),
            head=["optim.max_steps=3", "optim.micro_batch_size=2", "data.max_samples=12", "data.max_length=64",
                  "head.draft_vocab_size=256", "rollout.depth=2", "head.fused_layer_ids=[1,2,3]", "log_every=1", "save_every=0"],
            eval=dict(max_prompts=2, max_new_tokens=16, gamma_mode="fixed", gammas=(2,), repeats=2),
            states={"stdlib-heldout": dict(temperatures=(0.0, 1.0), batch_sizes=(1, 2)),
                    "humaneval": dict(temperatures=(0.0, 1.0), batch_sizes=(1,))},
            prompts=6, prompt_chars=80, first_token_rows=200, heads_shipped=False)
    return dict(
        target=None,
        draft_lm=None,  # shipped: builtin.shipped.DRAFT_LM_ASSETS_DIR (1 layer, 1500 steps; command in its recipe.json)
        head=[],
        # The two heads trained by this recipe are shipped (builtin/assets/demo_eagle3, demo_eagle1, with the
        # recipe key they were trained from): training them takes 10-13 of the cold run's minutes on 2 cores,
        # which put the cold run over 20 minutes (BENCHMARKS.md). `eaglehead demo --retrain` trains them.
        heads_shipped=True,
        # Tune on 4 prompts (32 x 0.125) over gamma 3..5, report on 8 held-out test prompts; every timed pass
        # twice, interleaved (medians and min-max; the gamma choice on medians and the fitted round-time
        # model). Three repeats over gamma 2..6 took the cold run past 30 minutes (BENCHMARKS.md).
        eval=dict(max_prompts=8, max_new_tokens=64, gamma_mode="auto", gammas=(3, 4, 5), tune_fraction=0.125,
                  repeats=2),
        # Greedy and temperature 1 at batch 1 and 4 on the held-out stdlib; HumanEval greedy, batch 1.
        states={"stdlib-heldout": dict(temperatures=(0.0, 1.0), batch_sizes=(1, 4)),
                "humaneval": dict(temperatures=(0.0,), batch_sizes=(1,))},
        prompts=32, prompt_chars=360, first_token_rows=2000)


# --------------------------------------------------------------------------------------- stages

def stage_target(out: Path, sizes: dict) -> tuple[str, str]:
    """(target directory, recipe key)."""
    from eaglehead.builtin.shipped import demo_target_dir, read_recipe, recipe_key
    from eaglehead.pretrain.demo_target import build

    if sizes["target"] is None:
        say("target: the shipped demo target (verified by its sha256 hashes, cached under ~/.cache/eaglehead)")
        path, recipe = demo_target_dir()
        return str(path), recipe_key(recipe)
    path = out / "target"
    want = input_key(sizes["target"].__dict__)
    if has_stamp(path, want):
        return str(path), recipe_key(read_recipe(path))
    say(f"target: building a toy target in {path}")
    shutil.rmtree(path, ignore_errors=True)
    build(sizes["target"], path, progress=False)
    write_stamp(path, want)
    return str(path), recipe_key(read_recipe(path))


def _head_config(out: Path, kind: str, target_dir: str, sizes: dict):
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.train.recipe import TrainConfig

    overrides = [f"output_dir={out / kind}", f"head.type={kind}", f"model.target={target_dir}", *sizes["head"]]
    if kind == "eagle1":  # the ablation reads the target's last hidden state only (its default layer)
        overrides.append("head.fused_layer_ids=null")
    return overrides, load_config(TrainConfig, CONFIGS / "demo.yaml", overrides)


def stage_heads(out: Path, target_dir: str, target_key: str, sizes: dict, retrain: bool = False) -> dict[str, Path]:
    """Train the EAGLE-3 head and the EAGLE-1 ablation with the same recipe and budget, side by side.

    Each runs ``python -m eaglehead.train --config configs/demo.yaml ...`` in its own process with half of
    the CPU threads (two single-threaded trainings beat one after the other at two threads each on a
    2-core machine); the logs go to ``DIR/<kind>/train.log`` and one progress bar follows both.
    """
    from eaglehead.draftheads.checkpoint import load_pretrained

    todo, keys, found = {}, {}, {}
    for kind in ("eagle3", "eagle1"):
        run = out / kind
        overrides, cfg = _head_config(out, kind, target_dir, sizes)
        keys[kind] = head_recipe_key(cfg, target_key)
        if sizes["heads_shipped"] and not retrain:
            shipped = shipped_head(kind, keys[kind])
            if shipped is not None:
                found[kind] = shipped
                continue
        if has_stamp(run, keys[kind]):
            try:
                load_pretrained(run / "head")
                say(f"{kind} head: cached in {run / 'head'} (inputs unchanged)")
                continue
            except Exception as exc:  # any failure to read it back (safetensors raises its own error type)
                say(f"{kind} head: cached copy is damaged ({type(exc).__name__}: {exc}); retraining")
        elif run.exists():
            say(f"{kind} head: recipe or target changed since {run} was trained; retraining")
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        todo[kind] = (overrides, cfg)
    if todo:
        from eaglehead.train.features import DiskSpaceError

        try:
            features = stage_features(out, target_dir, target_key, sizes)
        except DiskSpaceError as exc:  # nothing was written; each head runs the target itself instead
            shutil.rmtree(out / "features", ignore_errors=True)
            features = None
            say(f"features: {exc}. Training with online features instead (the target then runs in every "
                 "step of both heads: slower)")
        if features is not None:
            todo = {kind: ([*overrides, f"features.dir={features}"], cfg) for kind, (overrides, cfg) in todo.items()}
        procs = _launch_side_by_side(out, todo)
        for kind, (p, log) in procs.items():
            log.close()
            if p.returncode != 0:
                tail = (out / kind / "train.log").read_text()[-3000:]
                raise RuntimeError(f"training the {kind} head failed (exit {p.returncode}); the end of "
                                   f"{out / kind / 'train.log'}:\n{tail}")
            write_stamp(out / kind, keys[kind])
            summary = json.loads((out / kind / "summary.json").read_text())["metrics"]
            accs = " ".join(f"{summary[k]:.2f}" for k in sorted(summary) if k.startswith("acc_"))
            say(f"{kind} head: trained; last logged per-step accuracy vs the target's top token: {accs}")
    if todo and features is not None:
        size = sum(f.stat().st_size for f in features.iterdir() if f.is_file())
        shutil.rmtree(features)
        say(f"features: removed {features} ({size / 2**30:.2f} GiB; rebuilt only when a head is retrained)")
    return {kind: found.get(kind, out / kind / "head") for kind in ("eagle3", "eagle1")}


def head_recipe_key(cfg, target_key: str) -> str:
    """What a demo head is trained from: its config without the paths of this machine (output, target and
    feature directories) and the target's recipe key."""
    from eaglehead.builtin.typed_config import dump_config, omit_added_later

    config = omit_added_later(dump_config(cfg), ADDED_LATER)
    config.pop("output_dir", None)
    config.get("model", {}).pop("target", None)
    config.get("features", {}).pop("dir", None)
    if config.get("head", {}).get("type") != "dflash":  # the block drafter's section trains nothing else
        config.pop("dflash", None)
    return input_key({"config": config, "target": target_key})


# Training-config fields added after the demo heads were shipped, with the value that reproduces how they were
# trained: at that value the field leaves the recipe key unchanged (no re-keying of shipped heads).
ADDED_LATER = {("head", "layer_init"): "random", ("optim", "autocast"): "none", ("head", "fc_norm"): False,
               ("head", "norm_output"): False, ("optim", "schedule"): "cosine", ("optim", "decay_steps"): 0,
               ("data", "turn_rows"): "auto", ("data", "thinking_loss"): True,
               ("data", "thinking_markers"): ["<think>", "</think>"], ("data", "last_turn_only"): False,
               ("data", "regen_enable_thinking"): None}


def shipped_head(kind: str, key: str, root: Path | None = None) -> Path | None:
    """The shipped ``kind`` head if it was trained from the recipe hashed into ``key`` (checked by hash),
    else None with a message saying why it is trained instead."""
    from eaglehead.builtin.shipped import MissingArtifactError, verify_artifact

    path = (root or SHIPPED_HEADS) / f"demo_{kind}"
    try:
        recipe = verify_artifact(path, RETRAIN)
    except MissingArtifactError:
        say(f"{kind} head: none shipped in {path}; training it")
        return None
    if recipe.get("key") != key:
        say(f"{kind} head: the shipped one in {path} was trained from another recipe (key {recipe.get('key')}, "
             f"this code's is {key}); training it")
        return None
    steps = recipe.get("results", {}).get("steps")
    say(f"{kind} head: the shipped one ({path}, {steps} steps of this recipe, verified by its sha256 hashes; "
         f"`{RETRAIN}` trains it here)")
    return path


def ship_heads(out: Path, root: Path | None = None, *, overwrite: bool = False) -> list[Path]:
    """Copy the heads a full-size run trained in ``out`` into the shipped assets (``root``), each with a
    recipe.json: the recipe key it was trained from, the command, its final metrics and the commit."""
    from eaglehead.builtin.shipped import package_artifact, source_commit, verify_artifact

    plan = {kind: (out / kind, (root or SHIPPED_HEADS) / f"demo_{kind}") for kind in ("eagle3", "eagle1")}
    for kind, (run, dest) in plan.items():  # both checked before either is copied
        if not (run / "head" / "config.json").is_file() or not (run / "demo_key").is_file():
            raise ValueError(f"{run}: no trained {kind} head here; train both with: {RETRAIN} --out {out}")
        if dest.exists() and any(dest.iterdir()) and not overwrite:
            raise ValueError(f"{dest} exists and is not empty; pass --overwrite to replace the shipped {kind} head")
    shipped = []
    for kind, (run, dest) in plan.items():
        key_file = run / "demo_key"
        summary = json.loads((run / "summary.json").read_text())
        recipe = {"key": key_file.read_text(), "command": f"{RETRAIN} --out {out}",
                  "config": (run / "config.yaml").read_text(), "results": {"steps": summary.get("step"),
                                                                       "metrics": summary.get("metrics")},
                  "commit": source_commit()}
        package_artifact(run / "head", dest, recipe)
        verify_artifact(dest, RETRAIN)
        shipped.append(dest)
    return shipped


def _launch_side_by_side(out: Path, todo: dict) -> dict:
    """Start ``python -m eaglehead.train`` for each head in ``todo`` ({kind: (overrides, config)}), each
    with an even share of the CPU threads, and follow them under one progress bar until all exit.
    Returns {kind: (process, open log file)}."""
    import os
    import subprocess
    import sys

    from tqdm.auto import tqdm

    threads = max(1, (os.cpu_count() or 2) // len(todo))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    steps = {kind: cfg.optim.max_steps for kind, (_, cfg) in todo.items()}
    say(f"heads: training {', '.join(todo)} with configs/demo.yaml for {max(steps.values())} steps each, "
         f"in parallel ({threads} thread(s) each); logs in {out}/<head>/train.log")
    procs = {}
    for kind, (overrides, _) in todo.items():
        log = (out / kind / "train.log").open("w")
        procs[kind] = (subprocess.Popen([sys.executable, "-m", "eaglehead.train", "--config",
                                         str(CONFIGS / "demo.yaml"), *overrides],
                                        stdout=log, stderr=subprocess.STDOUT, env=env), log)
    with tqdm(total=sum(steps.values()), desc="train heads", unit="step") as bar:
        while True:
            done = sum(_last_step(out / kind) for kind in todo)
            bar.update(done - bar.n)
            if all(p.poll() is not None for p, _ in procs.values()):
                break
            time.sleep(2)
    return procs


def stage_features(out: Path, target_dir: str, target_key: str, sizes: dict) -> Path:
    """Run the target once over the training data and cache what both heads read (``eaglehead prepare
    --cache-features``): the EAGLE-3 head's three fused layers and the final hidden state, which is the
    EAGLE-1 ablation's feature and the source of both heads' labels. Training from the cache skips the
    target forward in every step of both runs (a third of a step's time: BENCHMARKS.md)."""
    from eaglehead.builtin.typed_config import dump_config
    from eaglehead.train.prepare import prepare

    path = out / "features"
    _, cfg = _head_config(out, "eagle3", target_dir, sizes)
    cfg = replace(cfg, output_dir=str(path))
    want = input_key({"data": dump_config(cfg.data), "features": dump_config(cfg.features), "target": target_key,
                 "layers": cfg.head.fused_layer_ids, "vocab": cfg.head.draft_vocab_size})
    if path.exists() and not has_stamp(path, want):
        say(f"features: recipe or target changed since {path} was written; rebuilding")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    write_stamp(path, want)  # an interrupted cache is resumed shard by shard (cache_features checks the data)
    say(f"features: running the target once over the training data for both heads -> {path}")
    prepare(cfg, cache_dir=str(path), device="cpu")
    return path


def _last_step(run: Path) -> int:
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def stage_draft_lm(out: Path, target_dir: str, sizes: dict) -> Path:
    from eaglehead.pretrain.demo_target import build

    if sizes["draft_lm"] is None:
        from eaglehead.builtin.shipped import load_demo_draft_lm

        model, _, recipe = load_demo_draft_lm()
        path = Path(model.config._name_or_path)
        results = recipe["results"]
        say(f"draft LM: the shipped {model.config.num_hidden_layers}-layer Llama (same corpus and tokenizer, "
             f"{results['steps_done']} steps; held-out loss {results['heldout_loss_shipped']:.2f}), verified by its "
             "sha256 hashes")
        _same_tokenizer(target_dir, path)
        return path
    path = out / "draft_lm"
    settings = sizes["draft_lm"]
    if sizes["target"] is not None:  # the toy target: match its vocabulary and corpus
        settings = replace(settings, vocab=sizes["target"].vocab, corpus_limit=sizes["target"].corpus_limit)
    want = input_key(settings.__dict__)
    if has_stamp(path, want):
        say(f"draft LM: cached in {path}")
    else:
        say(f"draft LM: training a {settings.layers}-layer Llama for {settings.steps} steps (same corpus and tokenizer)")
        shutil.rmtree(path, ignore_errors=True)
        build(settings, path, progress=True, desc="draft LM")
        write_stamp(path, want)
    _same_tokenizer(target_dir, path)
    return path


def _same_tokenizer(target_dir: str, draft_dir: Path) -> None:
    ours, theirs = (Path(target_dir) / "tokenizer.json").read_bytes(), (draft_dir / "tokenizer.json").read_bytes()
    if ours != theirs:
        raise ValueError(f"draft LM tokenizer in {draft_dir} differs from the target's in {target_dir}: the BPE "
                         "training was not reproducible on this machine, so the draft LM cannot share the target's "
                         "vocabulary")


def stage_prompts(out: Path, n: int, chars: int) -> dict[str, Path]:
    """Held-out standard-library excerpts (never trained on) and the ends of HumanEval prompts.

    Prompts are cut to ``chars`` characters (at line starts) so that prompt + new tokens fit the
    target's context (the full demo: ~100 tokens + 96 new ones within 256 positions).
    """
    from eaglehead.builtin.corpus import heldout_excerpts
    from eaglehead.eval.prompts import load_prompt_set

    rows = [{"id": file_id, "category": "prose" if file_id.startswith("pydoc:") else "code", "prompt": cut}
            for file_id, cut in heldout_excerpts(chars)][:n]
    paths = {"stdlib-heldout": out / "prompts" / "stdlib_heldout.jsonl", "humaneval": out / "prompts" / "humaneval.jsonl"}
    paths["stdlib-heldout"].parent.mkdir(parents=True, exist_ok=True)
    paths["stdlib-heldout"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = []
    for p in load_prompt_set("humaneval")[:n]:
        text = p.text if len(p.text) <= chars else p.text[-chars:]
        if len(p.text) > chars and "\n" in text:
            text = text[text.find("\n") + 1:]  # start at a line: the end holds the signature and docstring
        code.append({"id": p.id, "category": "humaneval", "prompt": text})
    paths["humaneval"].write_text("".join(json.dumps(r) + "\n" for r in code))
    say(f"prompts: {len(rows)} held-out stdlib excerpts, {len(code)} HumanEval prompts (last {chars} characters)")
    return paths


def stage_eval(out: Path, name: str, prompts: Path, target_dir: str, heads: dict, draft_lm: Path, sizes: dict) -> dict:
    from eaglehead.eval.plan import EvalPlan
    from eaglehead.eval.runner import run_eval

    plan = EvalPlan(target=target_dir, prompts=str(prompts), methods=list(METHODS),
                    drafts={"eagle3": str(heads["eagle3"]), "eagle1": str(heads["eagle1"]), "draft-lm": str(draft_lm)},
                    out=str(out / f"eval_{name}"), overwrite=True, device="cpu", **sizes["eval"], **sizes["states"][name])
    say(f"evaluating on {name}: every method side by side (tune split picks gamma, test split reports)")
    return run_eval(plan)


# ---------------------------------------------------------------------------------------- report

def goals(report: dict) -> list[tuple[str, bool | None, str]]:
    e3, e1, van = pick_run(report, "eagle3"), pick_run(report, "eagle1"), pick_run(report, "vanilla")
    rows = [("EAGLE-3 tau >= 3.0 (greedy, batch 1)", e3["tau"] >= 3.0, f"{e3['tau']:.2f}"),
            (f"EAGLE-3 time per token >= 1.5x better than the fastest baseline ({e3['baseline_method']})",
             e3["speedup"] >= 1.5, f"{e3['speedup']:.2f}x ({e3['speedup_vs_vanilla']:.2f}x vs vanilla)"),
            ("EAGLE-3 tau >= 1.2x the EAGLE-1 ablation's", e3["tau"] >= 1.2 * e1["tau"],
             f"{e3['tau']:.2f} vs {e1['tau']:.2f} ({e3['tau'] / e1['tau']:.2f}x)")]
    for peer in ("draft-lm", "prompt-lookup", "hf-assisted"):
        r = pick_run(report, peer)
        if r is not None:
            rows.append((f"EAGLE-3 faster than {peer}", e3["time_per_token_s"] < r["time_per_token_s"],
                         f"{1000 * e3['time_per_token_s']:.2f} vs {1000 * r['time_per_token_s']:.2f} ms/token"))
    rows.append(("vanilla time per token (reference, not a goal)", None,
                 f"{1000 * van['time_per_token_s']:.2f} ms/token"))
    return rows


def write_summary(out: Path, reports: dict, check: dict, timings: dict) -> str:
    lines = ["# eaglehead demo", "", f"Stage times (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}", ""]
    for name, rep in reports.items():
        lines += [f"## {name}", "", f"Full tables and plots: [eval_{name}/report.md](eval_{name}/report.md)", "",
                  "| goal (greedy, batch 1, test split) | met | measured |", "| --- | --- | --- |"]
        lines += [f"| {g} | {'-' if ok is None else 'yes' if ok else 'no'} | {v} |" for g, ok, v in goals(rep)]
        lines += ["", f"Greedy outputs of every exact method identical to vanilla: {rep['identity']['all_identical']}",
                  f"Report consistency violations: {len(rep['consistency_violations'])}", ""]
    lines += ["## Temperature 1: first-token distribution through EAGLE-3 speculative decoding", "",
              f"{check['rows']} samples; TV distance {check['tv_distance']:.4f}; largest excess over the Bernstein "
              f"bound {check['max_excess_over_bound']:.4g}; passed: {check['passed']}", ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps({"timings_s": timings, "first_token_check": check,
                                                 "reports": {k: f"eval_{k}/report.json" for k in reports},
                                                 "goals": {k: goals(v) for k, v in reports.items()}}, indent=1))
    return text


def run_demo(args) -> int:
    from eaglehead.eval.tables import compact_table

    sizes = _sizes(args.size, getattr(args, "head_steps", None))  # bad sizes fail before anything is written
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings = {}
    lap = stage_timer(timings)
    target_dir, target_key = stage_target(out, sizes)
    lap("target")
    heads = stage_heads(out, target_dir, target_key, sizes, retrain=getattr(args, "retrain", False))
    lap("heads")
    draft_lm = stage_draft_lm(out, target_dir, sizes)
    lap("draft_lm")
    prompts = stage_prompts(out, sizes["prompts"], sizes["prompt_chars"])
    reports = {name: stage_eval(out, name, path, target_dir, heads, draft_lm, sizes) for name, path in prompts.items()}
    lap("eval")
    first_prompt = json.loads(prompts["stdlib-heldout"].read_text().splitlines()[0])["prompt"]
    check = first_token_check(target_dir, heads["eagle3"], first_prompt, sizes["first_token_rows"])
    lap("distribution_check")
    write_summary(out, reports, check, timings)
    main = reports["stdlib-heldout"]
    e3, van = pick_run(main, "eagle3"), pick_run(main, "vanilla")
    total = sum(timings.values())
    print()
    for name, report in reports.items():
        print(f"== {name} ==")
        print(compact_table(report))
    print()
    print(f"EAGLE-3 on held-out stdlib (greedy, batch 1): tau {e3['tau']:.2f} (includes the bonus token), "
          f"{1000 * e3['time_per_token_s']:.2f} ms/token = {e3['speedup']:.2f}x against the fastest baseline "
          f"({e3['baseline_method']}), {e3['speedup_vs_vanilla']:.2f}x against vanilla "
          f"({1000 * van['time_per_token_s']:.2f} ms/token)")
    print(f"Exactness: greedy outputs identical to vanilla: {main['identity']['all_identical']}; "
          f"temperature-1 first-token check passed: {check['passed']} (TV {check['tv_distance']:.4f})")
    print(f"Report: {out / 'report.md'} (and eval_*/report.html with tables and plots); total {total / 60:.1f} min")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m eaglehead.demos.stdlib ship-heads [--out runs/demo]``: ship the heads a ``--retrain`` run trained."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m eaglehead.demos.stdlib", description=main.__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    ship = sub.add_parser("ship-heads", help="copy the heads trained in --out into the shipped assets")
    ship.add_argument("--out", default="runs/demo", help="the --out of an `eaglehead demo --retrain` run")
    ship.add_argument("--assets", default=None, help="shipped assets directory (default: the package's)")
    ship.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    for dest in ship_heads(Path(args.out), Path(args.assets) if args.assets else None, overwrite=args.overwrite):
        print(f"shipped {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
