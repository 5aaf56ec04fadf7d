"""Shipping the SmolLM2 demo's artifacts: a chat data set the target wrote (``ship-data``: compressed, or for the
large sets their archived shards), what ``--retrain`` built (``ship-built``) and a finished run of one of the
README's recipes (``ship-run``), each with a ``recipe.json`` of its files' sha256 and how it was built.

    python -m eaglehead.demos.smollm2 ship-data --kind data-tasks       # compress a chat data set into the assets
    python -m eaglehead.demos.smollm2 ship-data --kind data-large       # a large one: its shards, archived
    python -m eaglehead.demos.smollm2 ship-run --run runs/smollm2-135m-instruct/eagle3 --kind eagle3
    python -m eaglehead.demos.smollm2 ship-run --run runs/smollm2-135m-instruct/large-eagle31 --kind eagle3 --recipe large
"""

from __future__ import annotations

import json
import lzma
import os
import shlex
import shutil
from pathlib import Path

from eaglehead.builtin.shipped import file_sha256, package_artifact, source_commit

from .smollm2_assets import (
    ARCHIVED_DATA,
    ASSETS,
    CHAT_DIRS,
    CONFIG,
    DATA_CONFIGS,
    DATA_FILE,
    HEAD_KINDS,
    RECIPE_DATA,
    data_kind,
    verify_asset,
    verify_data,
)


def ship_data(chat_dir: Path, dest: Path, *, kind: str = "data", overwrite: bool = False) -> Path:
    """Ship the ``kind`` chat data the target wrote (``eaglehead prepare --data-config`` of
    ``DATA_CONFIGS[kind]``: its ``conversations.jsonl``, checked against its ``manifest.json``) into ``dest``,
    xz-compressed, with a recipe.json holding that command, the data config, the manifest, the uncompressed
    file's sha256 (``inputs.conversations_sha256``) and the commit."""
    from eaglehead.pretrain.core import package_versions

    config_path = DATA_CONFIGS[data_kind(kind)]
    conversations, manifest_file = chat_dir / "conversations.jsonl", chat_dir / "manifest.json"
    for path in (conversations, manifest_file):
        if not path.is_file():
            raise ValueError(f"{path}: no such file; write the {kind} chat data first with: eaglehead prepare "
                             f"--data-config {config_path} (its out_dir is the --chat-dir)")
    manifest = json.loads(manifest_file.read_text())
    digest = file_sha256(conversations)
    if manifest.get("sha256") != digest:
        raise ValueError(f"{conversations}: its sha256 differs from {manifest_file} (changed after it was written)")
    if kind in ARCHIVED_DATA:
        return _ship_archive(chat_dir, dest, kind, manifest, overwrite=overwrite)
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


def _ship_archive(chat_dir: Path, dest: Path, kind: str, manifest: dict, *, overwrite: bool) -> Path:
    """An archived data asset: every finished shard of ``chat_dir`` (and its config) xz-compressed into ``dest``
    by ``datagen.archive pack`` (a shard already there is kept when it holds the same rows; another run's is an
    error), then a recipe.json listing each file's sha256, the commands that rebuild the conversations from
    them and the conversations' sha256. A file of ``dest`` that ``chat_dir`` does not hold is refused (the
    archive must be exactly this directory's). A README.md there is kept, not listed."""
    from eaglehead.datagen import archive
    from eaglehead.pretrain.core import package_versions

    recipe_file = dest / "recipe.json"
    if recipe_file.is_file() and not overwrite:
        raise ValueError(f"{dest} is shipped already (recipe.json); pass --overwrite to replace the shipped {kind}")
    archive.pack(chat_dir, dest)
    carried = {str(rel) + ".xz" for rel in archive.carried_files(chat_dir)}
    packed = {str(p.relative_to(dest)) for p in dest.rglob("*.xz")}
    if packed != carried:
        extra = sorted(packed - carried)
        raise ValueError(f"{dest}: holds {len(extra)} archived file(s) that {chat_dir} does not ({', '.join(extra[:3])}"
                         f"{' ...' if len(extra) > 3 else ''}): another run's shards; remove them, or ship into a new directory")
    config = DATA_CONFIGS[kind].name
    recipe = {"files": {name: file_sha256(dest / name) for name in sorted(packed)},
              "commands": [f"python -m eaglehead.datagen.archive unpack builtin/assets/{dest.name} {CHAT_DIRS[kind]}",
                           f"eaglehead prepare --assemble-only --data-config configs/{config}"],
              "inputs": {"conversations_sha256": manifest["sha256"], "conversations": manifest.get("conversations"),
                         "answer_tokens": manifest.get("answer_tokens")},
              "manifest": manifest, "commit": source_commit(), "versions": package_versions()}
    staging = recipe_file.with_name("recipe.json.tmp")
    staging.write_text(json.dumps(recipe, indent=1))
    os.replace(staging, recipe_file)
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
    (``eaglehead.pretrain.draft_lm``: one file's ``path`` and ``sha256``, or several ``files``)."""
    data = recipe.get("inputs", {}).get("data")
    files = (data.get("files") if "files" in data else [data]) if isinstance(data, dict) else None
    if not (isinstance(files, list) and files and all(isinstance(f, dict) and isinstance(f.get("sha256"), str)
                                                      for f in files)):
        raise ValueError(f"{run / 'recipe.json'}: expected inputs.data with the sha256 of its data file (or a "
                         f"'files' list of them), as python -m eaglehead.pretrain.draft_lm writes it; got {data!r}"[:400])
    return [(str(f.get("path")), f["sha256"]) for f in files]


def _check_trained_on(run: Path, what: str, trained: list[tuple[str, str | None]], want: list[str],
                      kinds: tuple[str, ...] = RECIPE_DATA["small"]) -> None:
    """Refuse a run whose data files ((path, sha256 or None where the file is missing), in order) are not
    the shipped chat data files ``kinds`` (``want``: their sha256s in that order), naming the difference."""
    shipped = ", ".join(f"{ASSETS[k]} (sha256 {w})" for k, w in zip(kinds, want))
    expected = f"expected the shipped chat data, {len(want)} file(s) in this order: {shipped}"
    if len(trained) != len(want):
        raise ValueError(f"{run}: {what} lists {len(trained)} file(s) ({', '.join(p for p, _ in trained)}): not the "
                         f"shipped chat data; {expected}")
    for i, ((path, got), w, k) in enumerate(zip(trained, want, kinds)):
        if got == w:
            continue
        if got is None:
            raise ValueError(f"{run}: {what}[{i}] {path}: no such file, so it cannot be checked against the shipped "
                             f"chat data {ASSETS[k]} (sha256 {w}); {expected}")
        elsewhere = [ASSETS[kinds[j]] for j, x in enumerate(want) if x == got]
        why = f"the shipped {elsewhere[0]}, in the wrong order" if elsewhere else "not the shipped chat data"
        raise ValueError(f"{run}: {what}[{i}] {path} has sha256 {got}: {why} (position {i} must be {ASSETS[k]}, "
                         f"sha256 {w}); {expected}")


def _run_commands(recipe: str, cfg, launch: dict) -> list[str]:
    """The commands that rebuild a head of ``recipe`` from the shipped data: the small recipe caches features
    once (``eaglehead prepare --cache-features``); the large one restores the chat data sets and computes
    features online. The training command is the run's last launch (its overrides set the final schedule: a
    wsd run annealed at step N was last launched with optim.max_steps=N, which reproduces it from step 0)."""
    argv = launch["argv"]
    if recipe == "small":
        config_arg = argv[argv.index("--config") + 1] if "--config" in argv else str(CONFIG)
        return [f"eaglehead prepare --config {config_arg} --cache-features {cfg.features.dir}",
                f"accelerate launch --config_file configs/accelerate/cpu.yaml -m eaglehead.train {shlex.join(argv)}"]
    data = []
    for kind in RECIPE_DATA[recipe]:
        asset, chat = f"builtin/assets/{ASSETS[kind]}", CHAT_DIRS[kind]
        if kind in ARCHIVED_DATA:
            data.append(f"python -m eaglehead.datagen.archive unpack {asset} {chat} && eaglehead prepare "
                        f"--assemble-only --data-config configs/{DATA_CONFIGS[kind].name}")
        else:
            data.append(f"mkdir -p {chat} && xz -dc {asset}/{DATA_FILE} > {chat}/conversations.jsonl")
    processes, threads = int(launch.get("processes") or 1), launch.get("threads")
    accelerate = f"cpu_ddp.yaml --num_processes {processes}" if processes > 1 else "cpu.yaml"
    env = f"OMP_NUM_THREADS={threads} " if threads else ""
    return data + [f"{env}accelerate launch --config_file configs/accelerate/{accelerate} -m eaglehead.train "
                   f"{shlex.join(argv)}"]


def ship_run(run: Path, kind: str, root: Path, *, recipe: str = "small", overwrite: bool = False) -> Path:
    """Ship a finished training run of one of the README's recipes (``recipe``: ``small`` or ``large``; not
    ``--retrain``'s layout) as the ``kind`` artifact, in float16: an EAGLE-3 head (``eagle3``, EAGLE 3.1
    included; ``eagle3-plain``, without the 3.1 norms, for llama.cpp) in the EAGLE-3 layout the engines load, the
    EAGLE-1 ablation in eaglehead's layout, the draft LM as ``python -m eaglehead.pretrain.draft_lm`` wrote it
    (small recipe only). The recipe.json records the recipe's name, the commands (the data's, then one training
    command that reproduces the run's schedule), the resolved config, every launch of the run (start step,
    argv, commit, processes, threads), the data files' sha256s (``inputs.data_sha256s``), the steps and final
    metrics, and the commit shipping it.

    The run must have trained on exactly the recipe's shipped chat data files, in order (``RECIPE_DATA``): a
    head's ``data.sources``, a draft LM's recipe ``inputs.data`` (the sha256 of its file or of each of its
    ``files``); those data assets must be there (:func:`verify_data`)."""
    import torch

    from eaglehead.builtin.typed_config import load_config
    from eaglehead.draftheads.checkpoint import export_eagle3, load_pretrained, save_pretrained
    from eaglehead.train.recipe import TrainConfig

    if kind not in (*HEAD_KINDS, "draft-lm"):
        raise ValueError(f"kind: expected one of {', '.join(HEAD_KINDS)}, draft-lm, got {kind!r}")
    if recipe not in RECIPE_DATA:
        raise ValueError(f"recipe: expected one of {', '.join(RECIPE_DATA)}, got {recipe!r}")
    if kind == "draft-lm" and recipe != "small":
        raise ValueError(f"recipe {recipe!r}: the draft LM has one recipe, small (its own config, on the two small "
                         "chat data sets)")
    dest = root / ASSETS[kind]
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise ValueError(f"{dest} exists and is not empty; pass --overwrite to replace the shipped {kind}")
    kinds = RECIPE_DATA[recipe]
    want = [r["inputs"]["conversations_sha256"] for r in verify_data(root, kinds)]
    staging = dest.with_name(dest.name + ".build")
    shutil.rmtree(staging, ignore_errors=True)
    if kind == "draft-lm":
        lm_recipe = verify_asset(run)
        _check_trained_on(run, "its recipe.json inputs.data", _draft_lm_data(run, lm_recipe), want, kinds)
        staging.mkdir(parents=True)
        for name in lm_recipe["files"]:
            shutil.copyfile(run / name, staging / name)
        record = {k: v for k, v in lm_recipe.items() if k != "files"}
    else:
        summary_file = run / "summary.json"
        if not summary_file.is_file():
            raise ValueError(f"{summary_file}: no such file; the training in {run} has not finished")
        cfg = load_config(TrainConfig, run / "config.yaml")
        summary = json.loads(summary_file.read_text())
        if summary.get("step") != cfg.optim.max_steps:
            raise ValueError(f"{summary_file}: the run finished at step {summary.get('step')}, but its config.yaml (its "
                             f"last launch) runs to optim.max_steps {cfg.optim.max_steps}: it was relaunched and has "
                             "not finished that launch; let it finish (or rerun with optim.max_steps=<step> to anneal)")
        head_type = "eagle1" if kind == "eagle1" else "eagle3"
        if cfg.head.type != head_type:
            raise ValueError(f"{run}: holds an {cfg.head.type} head, not {kind}")
        if kind == "eagle3-plain" and (cfg.head.fc_norm or cfg.head.norm_output):
            raise ValueError(f"{run}: holds an EAGLE 3.1 head (head.fc_norm {cfg.head.fc_norm}, head.norm_output "
                             f"{cfg.head.norm_output}); eagle3-plain is the head llama.cpp runs, both off")
        sources = [(str(s), file_sha256(Path(s)) if Path(s).is_file() else None) for s in cfg.data.sources]
        _check_trained_on(run, "its data.sources", sources, want, kinds)
        launches = _launch_records(run)
        head = load_pretrained(run / "head")
        if head_type == "eagle3":
            export_eagle3(head, staging, dtype=torch.float16)
        else:
            save_pretrained(head.to(torch.float16), staging)
        record = {"recipe": recipe, "commands": _run_commands(recipe, cfg, launches[-1]),
                  "config": (run / "config.yaml").read_text(), "launches": launches,
                  "inputs": {"data_sha256s": want, "target": cfg.model.target},
                  "results": {"steps": summary.get("step"), "metrics": summary.get("metrics")},
                  "format": ("EAGLE-3 layout (vLLM / SGLang), float16" if head_type == "eagle3"
                             else "eaglehead layout, float16")}
    record["commit"] = source_commit()
    packed = package_artifact(staging, staging.with_name(staging.name + ".packed"), record)
    shutil.rmtree(staging)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(packed, dest)
    verify_asset(dest)
    return dest
