"""The models shipped inside the package: the demo target and the demo's draft LM, each verified by the
sha256 hashes in its ``recipe.json`` and copied once into the user's cache.

Both are ``save_pretrained`` directories in float16 (package data, ``assets/demo_target`` and
``assets/draft_lm``), loaded in float32. Their training recipe, and the command that rebuilds them,
is ``eaglehead.pretrain.demo_target``.

API::

    model, tokenizer, recipe = load_demo_target()        # float32, eval mode, from the user's cache
    path, recipe = demo_target_dir()                     # the verified cached directory, nothing loaded
    recipe_key(recipe)                                   # sha256 of the recipe inputs
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from importlib.resources import files
from pathlib import Path

from .jsonio import read_json
from .paths import cache_root

RECIPE_VERSION = 1
REBUILD = "python -m eaglehead.pretrain.demo_target build"
# The package data directory (a real directory: the package is installed unzipped, editable or not).
ASSETS_DIR = Path(str(files(__package__) / "assets" / "demo_target"))
# The demo's draft-LM baseline: the same recipe at one layer (its command is in its recipe.json).
DRAFT_LM_ASSETS_DIR = ASSETS_DIR.parent / "draft_lm"


def recipe_key(recipe: dict | None = None) -> str:
    """sha256 of a recipe's ``inputs`` (canonical JSON); default: the shipped recipe.json."""
    if recipe is None:
        recipe = read_recipe(ASSETS_DIR)
    if "inputs" not in recipe:
        raise ValueError("recipe: expected a dict with an 'inputs' key (the content of recipe.json)")
    return hashlib.sha256(json.dumps(recipe["inputs"], sort_keys=True).encode()).hexdigest()


def read_recipe(directory: str | os.PathLike) -> dict:
    path = Path(directory) / "recipe.json"
    if not path.is_file():
        raise ValueError(f"{path}: expected a demo-target recipe.json; build one with `{REBUILD} --out {directory}`")
    return json.loads(path.read_text())


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _problems(directory: Path, recipe: dict) -> list[str]:
    """What is wrong with an artifact directory, compared with ``recipe``'s file hashes (empty: nothing)."""
    problems = []
    for name, digest in recipe.get("files", {}).items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif file_sha256(path) != digest:
            problems.append(f"{path} does not match its sha256 in recipe.json (damaged or replaced)")
    return problems


def write_half_precision(model, tokenizer, out: Path, names: tuple[str, ...] | None = None):
    """Save ``model`` in float16 plus ``tokenizer`` into ``out``, file by file, each replaced atomically
    (staged in ``out/.staging``, made world-readable: save_pretrained may write 0600).

    ``names``: only these files are kept (default every file written). Returns the float16 copy (to
    measure what rounding costs) and ``{file name: sha256}`` for the recipe.
    """
    import copy

    import torch

    half = copy.deepcopy(model).to(torch.float16)
    staging = out / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    half.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    hashes = {}
    for path in sorted(staging.iterdir()):
        if names is not None and path.name not in names:
            continue
        hashes[path.name] = file_sha256(path)
        os.chmod(path, 0o644)
        os.replace(path, out / path.name)
    shutil.rmtree(staging)
    return half, hashes


def package_artifact(src: Path, dest: Path, recipe: dict) -> Path:
    """Copy the files of ``src`` into a fresh ``dest`` with ``recipe`` plus a ``files`` table of their sha256."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    names = sorted(p.name for p in src.iterdir() if p.is_file() and p.name != "recipe.json")
    for name in names:
        shutil.copyfile(src / name, dest / name)
    recipe = {"files": {n: file_sha256(dest / n) for n in names}, **recipe}
    (dest / "recipe.json").write_text(json.dumps(recipe, indent=1))
    return dest


def source_commit() -> str | None:
    """The git commit this code runs from (None outside a git checkout, e.g. an installed wheel)."""
    import subprocess

    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


class MissingArtifactError(ValueError):
    """A shipped artifact directory is absent (no ``recipe.json``)."""


def verify_artifact(directory: Path, rebuild: str) -> dict:
    """``directory``'s recipe.json after checking every file it lists against its sha256; errors name the
    file and give ``rebuild``, the command that builds the artifact again."""
    recipe_file = directory / "recipe.json"
    if not recipe_file.is_file():
        raise MissingArtifactError(f"{directory} is not shipped (no recipe.json); build it with: {rebuild}")
    try:
        recipe = read_json(recipe_file)
    except ValueError as err:
        raise ValueError(f"{err}; rebuild it with: {rebuild}") from None
    if not isinstance(recipe, dict) or not isinstance(recipe.get("files"), dict) or not recipe["files"]:
        raise ValueError(f"{recipe_file}: expected a 'files' table mapping file names to sha256 hashes")
    problems = _problems(directory, recipe)
    if problems:
        raise ValueError(f"{'; '.join(problems)} (listed in {recipe_file}); restore the shipped "
                         f"files or rebuild them with: {rebuild}")
    return recipe


def demo_target_dir(cache_dir: str | os.PathLike | None = None,
                    assets_dir: str | os.PathLike | None = None) -> tuple[Path, dict]:
    """(directory, recipe) of the verified cached copy of the shipped demo target (see :func:`load_demo_target`)."""
    return _cached_copy(Path(assets_dir) if assets_dir is not None else ASSETS_DIR,
                        Path(cache_dir) if cache_dir is not None else cache_root() / "demo-target", "demo target")


def load_demo_target(cache_dir: str | os.PathLike | None = None, assets_dir: str | os.PathLike | None = None):
    """(model, tokenizer, recipe): the shipped target in float32 and eval mode, read from the user's cache.

    The artifact is copied from ``assets_dir`` (default: the package's ``assets/demo_target``) into
    ``cache_dir/<recipe_key>/`` (default ``$XDG_CACHE_HOME`` or ``~/.cache``, then ``eaglehead/demo-target``).
    A cached copy whose files do not match the hashes in recipe.json, or whose recipe differs from the
    shipped one, is reported with a warning and copied again. A shipped artifact that fails its own hashes
    raises ValueError with the command that rebuilds it.
    """
    return _load(*demo_target_dir(cache_dir, assets_dir))


def load_demo_draft_lm(cache_dir: str | os.PathLike | None = None, assets_dir: str | os.PathLike | None = None):
    """(model, tokenizer, recipe): the shipped 1-layer draft LM (the demo's ``draft-lm`` baseline), like
    :func:`load_demo_target` (default cache ``~/.cache/eaglehead/draft-lm``, assets ``assets/draft_lm``)."""
    return _load(*_cached_copy(Path(assets_dir) if assets_dir is not None else DRAFT_LM_ASSETS_DIR,
                               Path(cache_dir) if cache_dir is not None else cache_root() / "draft-lm",
                               "demo draft LM"))


def _load(directory: Path, recipe: dict):
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory)
    model = LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    return model, tokenizer, recipe


def _cached_copy(assets: Path, cache_dir: Path, what: str) -> tuple[Path, dict]:
    recipe = read_recipe(assets)
    if not recipe.get("files"):
        raise ValueError(f"{assets / 'recipe.json'}: expected a 'files' table of sha256 hashes")
    problems = _problems(assets, recipe)
    if problems:
        raise ValueError(f"shipped {what} in {assets} is damaged ({'; '.join(problems)}); rebuild it with: "
                         f"{recipe.get('command', REBUILD)}")
    if recipe.get("recipe_version") != RECIPE_VERSION:
        warnings.warn(f"{assets}: built by demo-target recipe version {recipe.get('recipe_version')}, this code is "
                      f"version {RECIPE_VERSION}; rebuild with `{REBUILD} --out {assets}`")
    target = cache_dir / recipe_key(recipe)
    if target.exists():
        cached = json.loads((target / "recipe.json").read_text()) if (target / "recipe.json").is_file() else None
        problems = ["recipe.json differs from the shipped recipe"] if cached != recipe else _problems(target, recipe)
        if problems:
            warnings.warn(f"cached {what} {target}: {'; '.join(problems)}; copying it again from {assets}")
            shutil.rmtree(target)
    if not target.exists():
        staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in list(recipe["files"]) + ["recipe.json"]:
            shutil.copyfile(assets / name, staging / name)
        try:
            os.replace(staging, target)
        except OSError:
            # Another process (a second test worker, a parallel run) copied the same recipe first: keep its copy.
            shutil.rmtree(staging, ignore_errors=True)
            if _problems(target, recipe):
                raise
    return target, recipe
