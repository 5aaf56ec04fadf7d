"""The SmolLM2 demo's artifacts: the shipped heads, draft LM and chat data, and how ``--retrain`` rebuilds them
from the shipped data with the README's own commands (shipping them: ``smollm2_ship``).

Two recipes train a head: ``small`` (``configs/smollm2-135m-instruct.yaml``: the two small chat sets, features
cached once) and ``large`` (``configs/smollm2-135m-instruct-large.yaml``: those plus the two large sets, ~6x the
answer tokens, features computed online). ``--retrain`` runs the small one.

Every artifact directory carries a ``recipe.json`` with its files' sha256 (:func:`verify_asset`).
"""

from __future__ import annotations

import json
import lzma
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


def llamacpp_head(root: Path | None = None) -> Path:
    """The shipped head llama.cpp can run: ``smollm2_eagle3_plain`` when shipped (beside an EAGLE 3.1
    ``smollm2_eagle3``, which llama.cpp's EAGLE-3 graph cannot run), else ``smollm2_eagle3``."""
    root = assets_root() if root is None else root
    plain = root / ASSETS["eagle3-plain"]
    return plain if (plain / "recipe.json").is_file() else root / ASSETS["eagle3"]


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


def data_kind(kind: str) -> str:
    """``kind`` if it names a shipped chat data set (``DATA_ASSETS``), else a ValueError listing them."""
    if kind not in DATA_ASSETS:
        raise ValueError(f"kind: expected one of the chat data assets {', '.join(DATA_ASSETS)}, got {kind!r}")
    return kind


def data_rebuild_hint(data_dir: Path, kind: str = "data") -> str:
    """The commands that build the ``kind`` chat data asset into ``data_dir``."""
    if kind in ARCHIVED_DATA:
        hours, what = " (hours)", (f"archives the directory's shards into {data_dir} and lists them and the "
                                   "conversations' sha256 in recipe.json")
    else:
        hours, what = "", (f"compresses the conversations.jsonl it wrote into {data_dir / DATA_FILE} and lists its "
                           "sha256 in recipe.json")
    return (f"eaglehead prepare --data-config {DATA_CONFIGS[data_kind(kind)]}{hours}, then python -m "
            f"eaglehead.demos.smollm2 ship-data --kind {kind} --chat-dir {CHAT_DIRS[kind]} --assets {data_dir.parent} "
            f"(it {what})")


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
