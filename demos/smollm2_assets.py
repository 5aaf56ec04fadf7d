"""The SmolLM2 demo's artifacts: the shipped heads, draft LM and chat data, how ``--retrain`` rebuilds them
from the shipped data with the README's own commands, and how a finished run is shipped.

    python -m eaglehead.demos.smollm2 ship-data --kind data-tasks       # compress a chat data set into the assets
    python -m eaglehead.demos.smollm2 ship-data --kind data-large       # a large one: its shards, archived
    python -m eaglehead.demos.smollm2 ship-run --run runs/smollm2-135m-instruct/eagle3 --kind eagle3
    python -m eaglehead.demos.smollm2 ship-run --run runs/smollm2-135m-instruct/large-eagle31 --kind eagle3 --recipe large

Two recipes train a head: ``small`` (``configs/smollm2-135m-instruct.yaml``: the two small chat sets, features
cached once) and ``large`` (``configs/smollm2-135m-instruct-large.yaml``: those plus the two large sets, ~6x the
answer tokens, features computed online). ``--retrain`` runs the small one.

Every artifact directory carries a ``recipe.json`` with its files' sha256 (:func:`verify_asset`).
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

from eaglehead.builtin.shipped import (
    MissingArtifactError,
    file_sha256,
    package_artifact,
    source_commit,
    verify_artifact,
)

from .common import CONFIGS, has_stamp, input_key, say, write_stamp

TARGET = "builtin:smollm2-135m-instruct"
RETRAIN = "eaglehead demo --target smollm2-135m-instruct --retrain"
CONFIG = CONFIGS / "smollm2-135m-instruct.yaml"
LARGE_CONFIG = CONFIGS / "smollm2-135m-instruct-large.yaml"
DRAFT_LM_CONFIG = CONFIGS / "smollm2-135m-instruct-draft-lm.yaml"
ACCELERATE_CPU = CONFIGS / "accelerate" / "cpu.yaml"
# eagle3: the head the demo evaluates (EAGLE-3 or EAGLE 3.1); eagle3-plain: an EAGLE-3 head without the 3.1
# norms, for llama.cpp (whose EAGLE-3 drafter cannot run a 3.1 head), shipped when eagle3 is a 3.1 head.
ASSETS = {"eagle3": "smollm2_eagle3", "eagle3-plain": "smollm2_eagle3_plain", "eagle1": "smollm2_eagle1",
          "draft-lm": "smollm2_draft_lm", "data": "smollm2_data", "data-tasks": "smollm2_data_tasks",
          "data-large": "smollm2_data_large", "data-large-tasks": "smollm2_data_large_tasks"}
HEAD_KINDS = ("eagle3", "eagle3-plain", "eagle1")
# The chat data assets, in the order the recipes train on them (data.sources of each recipe's config; the draft
# LM reads the small recipe's), with the data config that writes each and its output directory.
RECIPE_DATA = {"small": ("data", "data-tasks"), "large": ("data", "data-tasks", "data-large", "data-large-tasks")}
RECIPE_CONFIGS = {"small": CONFIG, "large": LARGE_CONFIG}
DATA_ASSETS = RECIPE_DATA["large"]  # every shipped chat data set
# Shipped as the finished shards of their data directory (datagen.archive: xz each, ~1/2 the size of the
# conversations compressed) and rebuilt by `eaglehead prepare --assemble-only`; the others as conversations.jsonl.xz.
ARCHIVED_DATA = ("data-large", "data-large-tasks")
DATA_CONFIGS = {"data": CONFIGS / "smollm2-135m-instruct-data.yaml",
                "data-tasks": CONFIGS / "smollm2-135m-instruct-data-tasks.yaml",
                "data-large": CONFIGS / "smollm2-135m-instruct-data-large.yaml",
                "data-large-tasks": CONFIGS / "smollm2-135m-instruct-data-large-tasks.yaml"}
CHAT_DIRS = {"data": "runs/smollm2-135m-instruct/chat", "data-tasks": "runs/smollm2-135m-instruct/chat-tasks",
             "data-large": "runs/smollm2-135m-instruct/chat-large",
             "data-large-tasks": "runs/smollm2-135m-instruct/chat-large-tasks"}
DATA_FILE = "conversations.jsonl.xz"
ARCHIVE_CONFIG = "config.json.xz"  # the first file of an archived data asset (its data directory's config.json)
# (data files in order, output dir, target) -> the commands it ran; writes a save_pretrained draft LM into output dir.
DraftLMTrainer = Callable[[list[Path], Path, str], list[str]]
Runner = Callable[[list[str], Path], None]  # runs one user-facing command, its output to a log file


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
            say(f"eagle1: no EAGLE-1 ablation in {shipped}: evaluating without it (build it with: {RETRAIN})")
            continue
        if path is None:
            raise MissingArtifactError(f"{shipped} is not shipped (no recipe.json), and no earlier --retrain built "
                                    f"{built}; build it (hours on 2 cores) with: {RETRAIN}")
        verify_asset(path)
        if path == built:
            say(f"{kind}: using {built}, built by --retrain")
        found[kind] = path
    return found


def _data_kind(kind: str) -> str:
    if kind not in DATA_ASSETS:
        raise ValueError(f"kind: expected one of the chat data assets {', '.join(DATA_ASSETS)}, got {kind!r}")
    return kind


def data_rebuild_hint(data_dir: Path, kind: str = "data") -> str:
    """The commands that build the ``kind`` chat data asset into ``data_dir``."""
    if kind in ARCHIVED_DATA:
        return (f"eaglehead prepare --data-config {DATA_CONFIGS[kind]} (hours), then python -m eaglehead.demos.smollm2 "
                f"ship-data --kind {kind} --chat-dir {CHAT_DIRS[kind]} --assets {data_dir.parent} (it archives the "
                f"directory's shards into {data_dir} and lists them and the conversations' sha256 in recipe.json)")
    return (f"eaglehead prepare --data-config {DATA_CONFIGS[_data_kind(kind)]}, then python -m eaglehead.demos.smollm2 "
            f"ship-data --kind {kind} --chat-dir {CHAT_DIRS[kind]} --assets {data_dir.parent} (it compresses the "
            f"conversations.jsonl it wrote into {data_dir / DATA_FILE} and lists its sha256 in recipe.json)")


def verify_data(root: Path, kinds: tuple[str, ...] = RECIPE_DATA["small"]) -> list[dict]:
    """The recipe.json of each chat data asset ``kinds`` under ``root``, in order, each verified (a missing one:
    :class:`MissingArtifactError` with the commands that build it) and holding the sha256 of its uncompressed
    conversations (``inputs.conversations_sha256``)."""
    recipes = []
    for kind in kinds:
        data_dir = root / ASSETS[kind]
        recipe = _data_recipe(data_dir, kind)
        if not isinstance(recipe.get("inputs", {}).get("conversations_sha256"), str):
            raise ValueError(f"{data_dir / 'recipe.json'}: expected inputs.conversations_sha256, the sha256 of the "
                             f"uncompressed conversations; rebuild it with: {data_rebuild_hint(data_dir, kind)}")
        recipes.append(recipe)
    return recipes


def _data_recipe(data_dir: Path, kind: str) -> dict:
    """``data_dir``'s recipe.json, its files verified by hash, with the compressed conversations (an archived
    kind: the data directory's config) among them."""
    recipe = verify_asset(data_dir, rebuild=data_rebuild_hint(data_dir, kind))
    first = ARCHIVE_CONFIG if kind in ARCHIVED_DATA else DATA_FILE
    if first not in recipe["files"]:
        raise ValueError(f"{data_dir / 'recipe.json'}: expected {first} among its files")
    return recipe


# --------------------------------------------------------------------------------------- retrain

def unpack_data(data_dir: Path, out: Path, kind: str = "data") -> tuple[Path, str]:
    """(``out/data/<data_dir's name>/conversations.jsonl``, its sha256): the shipped ``kind`` chat data,
    verified and decompressed once per shipped file (an archived kind: its shards restored and assembled once
    per shipped archive, :func:`_assemble`); the sha256 is the uncompressed file's, checked against the
    recipe's ``inputs.conversations_sha256`` where it records one."""
    recipe = _data_recipe(data_dir, kind)
    archived = kind in ARCHIVED_DATA
    stamp = input_key(recipe["files"]) if archived else recipe["files"][DATA_FILE]
    dest = out / "data" / data_dir.name
    want = recipe.get("inputs", {}).get("conversations_sha256")
    path = dest / "conversations.jsonl"
    digest = file_sha256(path) if has_stamp(dest, stamp) and path.is_file() else None
    if digest is None or (want is not None and digest != want):
        dest.mkdir(parents=True, exist_ok=True)
        if archived:
            _assemble(data_dir, dest, kind)
        else:
            with lzma.open(data_dir / DATA_FILE) as src, path.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        write_stamp(dest, stamp)
        digest = file_sha256(path)
    if want is not None and digest != want:
        raise ValueError(f"{data_dir / (ARCHIVE_CONFIG if archived else DATA_FILE)}: "
                         f"{'its shards assemble' if archived else 'decompresses'} to a file with sha256 {digest}, not the "
                         f"inputs.conversations_sha256 {want} of its recipe.json; rebuild it with: "
                         f"{data_rebuild_hint(data_dir, kind)}")
    return path, digest


def _assemble(data_dir: Path, dest: Path, kind: str) -> None:
    """An archived data asset's shards restored into ``dest`` and assembled there (nothing generated: a missing
    shard is an error naming it), as ``python -m eaglehead.datagen.archive unpack`` + ``eaglehead prepare
    --assemble-only --data-config DATA_CONFIGS[kind] out_dir=dest`` do."""
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.datagen import ChatDataConfig
    from eaglehead.datagen import archive
    from eaglehead.datagen.pipeline import run as run_datagen

    archive.unpack(data_dir, dest)
    run_datagen(load_config(ChatDataConfig, DATA_CONFIGS[kind], [f"out_dir={dest}"]), assemble_only=True)


def unpack_all_data(root: Path, out: Path, kinds: tuple[str, ...] = RECIPE_DATA["small"]) -> tuple[list[Path], list[str]]:
    """(files, their sha256s): the shipped chat data assets ``kinds`` under ``root`` unpacked by
    :func:`unpack_data`, in order (the order the recipes train on them)."""
    unpacked = [unpack_data(root / ASSETS[kind], out, kind) for kind in kinds]
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
    return ["python", "-m", "eaglehead.pretrain.draft_lm", "--config", str(DRAFT_LM_CONFIG), f"target={target}",
            f"data={json.dumps([str(p) for p in data])}", *extra, f"out={out}"]


def run_command(cmd: list[str], log: Path) -> None:
    """Run a user-facing command (``eaglehead ...`` or ``accelerate launch ...``) with this Python,
    its output in ``log``; a failure raises with the end of the log."""
    argv = {"eaglehead": [sys.executable, "-m", "eaglehead"], "python": [sys.executable],
            "accelerate": [sys.executable, "-m", "accelerate.commands.launch"]}[cmd[0]]
    argv = argv + cmd[2 if cmd[0] == "accelerate" else 1:]
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"running {shlex.join(cmd)} (log: {log})")
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
        dest, key = out / "assets" / ASSETS[kind], input_key({"commands": [prep, cmd], **inputs})
        if _recipe_key(dest) == key:
            say(f"{kind}: {dest} is up to date (same commands and data)")
            continue
        if not prepared:  # an interrupted feature cache resumes shard by shard
            _fresh(work / "features", input_key({"command": prep, **inputs}))
            run(prep, work / "prepare.log")
            prepared = True
        _fresh(work / kind, key)
        run(cmd, work / kind / "train.log")
        package_artifact(work / kind / "head", dest, {"commands": [shlex.join(prep), shlex.join(cmd)],
                                                   "inputs": inputs, "key": key})
        say(f"{kind}: built {dest}")
    dest = out / "assets" / ASSETS["draft-lm"]
    if draft_lm_trainer is None:  # it writes dest itself, recipe.json and sha256 hashes included
        run(draft_lm_command(data, dest, target, extra["draft_lm"]), work / "draft_lm.log")
    else:
        _custom_draft_lm(data, dest, target, inputs, draft_lm_trainer)
    verify_asset(dest)
    say(f"draft LM: built {dest}")


def _fresh(path: Path, key: str) -> None:
    """Keep ``path`` if it was started with the inputs hashed into ``key`` (to resume), else empty it."""
    if path.exists() and not has_stamp(path, key):
        say(f"{path}: built from other commands or data; starting it over")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    write_stamp(path, key)


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


# ------------------------------------------------------------------------------------------ ship

def ship_data(chat_dir: Path, dest: Path, *, kind: str = "data", overwrite: bool = False) -> Path:
    """Ship the ``kind`` chat data the target wrote (``eaglehead prepare --data-config`` of
    ``DATA_CONFIGS[kind]``: its ``conversations.jsonl``, checked against its ``manifest.json``) into ``dest``,
    xz-compressed, with a recipe.json holding that command, the data config, the manifest, the uncompressed
    file's sha256 (``inputs.conversations_sha256``) and the commit."""
    from eaglehead.pretrain.core import package_versions

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
