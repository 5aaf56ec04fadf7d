"""The guides' commands run as written.

1. Every fenced ``bash`` block marked ``<!-- runs-in-test -->`` (the line before it) in ``docs/`` runs here, in a
   fresh directory that links the repository's ``builtin``, ``configs``, ``docs``, ``tests`` and top files (so the
   relative paths of the guides resolve and nothing is written into the checkout), with this venv first on PATH;
   each must exit 0. They are the ones that take seconds on a 2-core CPU.
2. Every other command in the guides' and the README's ``bash`` blocks is checked without running it: each
   ``eaglehead SUBCOMMAND --option`` exists in the parser, each ``python -m eaglehead.X`` module exists, each
   ``--config``/``--data-config`` file exists, and each ``key=value`` override names a key of that config.
"""

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from eaglehead.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- runs-in-test -->"
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
LINKED = ("builtin", "configs", "docs", "tests", "README.md", "mkdocs.yml", "pyproject.toml")
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```bash\n(?P<body>.*?)\n```", re.S)


def bash_blocks(path: Path) -> list[tuple[bool, str]]:
    """``(marked to run, text)`` of every fenced bash block of a page."""
    return [(m["before"].strip() == MARKER, m["body"]) for m in BLOCK.finditer("\n" + path.read_text())]


RUNNABLE = [(path.relative_to(ROOT).as_posix(), i, body) for path in PAGES
            for i, (marked, body) in enumerate(bash_blocks(path)) if marked]


def test_the_guides_mark_blocks_to_run():
    pages = {page for page, _, _ in RUNNABLE}
    assert {"docs/serve.md", "docs/evaluate.md", "docs/exactness.md", "docs/cpu.md"} <= pages, pages


@pytest.mark.parametrize("page,index,body", RUNNABLE, ids=[f"{p}#{i}" for p, i, _ in RUNNABLE])
def test_marked_block_runs_as_written(tmp_path, page, index, body):
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (f"{page}, bash block {index} exited {done.returncode}:\n{body}\n--- stdout\n"
                                  f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


# ------------------------------------------------------------------------------ the rest, checked statically


def commands(body: str) -> list[list[str]]:
    """Each command line of a block as tokens (continuations joined, comments dropped, split at ; && |)."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = shlex.split(line, comments=True)
        current: list[str] = []
        for tok in tokens:
            if tok in (";", "&&", "|", "||"):
                out.append(current)
                current = []
            else:
                current.append(tok)
        out.append(current)
    return [c for c in out if c]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _config_classes():
    from eaglehead.datagen.config import ChatDataConfig
    from eaglehead.train.recipe import TrainConfig

    return TrainConfig, ChatDataConfig


def key_exists(cls: type, dotted: str) -> bool:
    for part in dotted.split("."):
        hints = typing.get_type_hints(cls)
        if not is_dataclass(cls) or part not in {f.name for f in fields(cls)}:
            return False
        cls = hints[part]
    return True


def problems(cmd: list[str]) -> list[str]:
    bad = []
    for i, tok in enumerate(cmd):
        if tok == "-m" and i + 1 < len(cmd) and cmd[i + 1].startswith("eaglehead"):
            if importlib.util.find_spec(cmd[i + 1]) is None:
                bad.append(f"no module {cmd[i + 1]}")
        if tok in ("--config", "--data-config", "--config_file") and i + 1 < len(cmd):
            if cmd[i + 1].startswith("configs/") and not (ROOT / cmd[i + 1]).is_file():
                bad.append(f"{tok} {cmd[i + 1]}: no such file")
    names = [Path(t).name for t in cmd]
    if "eaglehead" in names and names.index("eaglehead") + 1 < len(cmd):
        at = names.index("eaglehead")
        sub = _subparsers().get(cmd[at + 1])
        if sub is None:
            bad.append(f"eaglehead {cmd[at + 1]}: no such subcommand")
        else:
            known = {s for a in sub._actions for s in a.option_strings}
            bad += [f"eaglehead {cmd[at + 1]} {t}: no such option" for t in cmd[at + 2:]
                    if t.startswith("--") and t.split("=")[0] not in known]
    trains = "eaglehead.train" in cmd or ("eaglehead" in names and cmd[names.index("eaglehead") + 1:][:1] in
                                          (["train"], ["prepare"]))
    if trains:
        train_cls, data_cls = _config_classes()
        cls = data_cls if "--data-config" in cmd and "--config" not in cmd else train_cls
        for tok in cmd:
            key = re.fullmatch(r"([a-z_][a-z0-9_.]*)=.*", tok)
            if key and not key_exists(cls, key[1]):
                bad.append(f"{key[1]}: not a key of {cls.__name__}")
    return bad


def test_every_command_in_the_guides_names_real_options_modules_files_and_keys():
    bad = [f"{path.relative_to(ROOT)}: {' '.join(cmd)[:80]}...: {p}" for path in PAGES
           for _, body in bash_blocks(path) for cmd in commands(body) for p in problems(cmd)]
    assert bad == [], "\n".join(bad)


def test_the_static_check_catches_a_wrong_option_module_file_and_key():
    found = [p for line in ("eaglehead export X --formatt gguf", "python -m eaglehead.no_such_module",
                            "eaglehead train --config configs/nope.yaml", "eaglehead train --config "
                            "configs/smoke.yaml optim.no_such_key=1 head.type=eagle1")
             for p in problems(shlex.split(line))]
    assert found == ["eaglehead export --formatt: no such option", "no module eaglehead.no_such_module",
                     "--config configs/nope.yaml: no such file", "optim.no_such_key: not a key of TrainConfig"]
