"""eaglehead works as an installed package, not only as an editable checkout.

The check that fits CI time: build the wheel from a copy of the sources, assert the configs and the
shipped models are inside it, install it with ``pip install --no-deps --target DIR`` (the test venv
supplies the dependencies), and run ``python -m eaglehead demo --size tiny`` from a directory outside
the repository with ``PYTHONPATH=DIR``, asserting that the ``eaglehead`` it ran is the installed one.
(A fresh venv with every dependency would add minutes of installs for no more coverage of our code.)
"""

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The package folders are read from pyproject's package-dir mapping, so a new package is never left out.
SOURCES = ("pyproject.toml", "README.md",
           *tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:  # a copy: building in the checkout would leave build/ and egg-info behind
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                        if (ROOT / name).is_dir() else {}))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True)
    return next(out.glob("eaglehead-*.whl"))


def test_wheel_holds_the_configs_and_shipped_models(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("eaglehead/configs/demo.yaml", "eaglehead/configs/accelerate/cpu.yaml",
                 "eaglehead/builtin/assets/demo_target/model.safetensors",
                 "eaglehead/builtin/assets/demo_target/recipe.json",
                 "eaglehead/builtin/assets/draft_lm/model.safetensors",
                 "eaglehead/demos/stdlib.py", "eaglehead/builtin/models.py", "eaglehead/eval/plan.py"):
        assert name in names, name


def test_tiny_demo_runs_from_the_installed_wheel(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    # One torch thread, as conftest.py sets for the in-process tests: the toy models are all per-op
    # overhead, and two threads only contend with each other and anything else on a 2-core machine.
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    where = subprocess.run([sys.executable, "-c", "import eaglehead.demos.common as d, eaglehead.builtin.shipped as s; "
                            "print(d.__file__); print(d.CONFIGS); print(s.ASSETS_DIR)"],
                           cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert all(Path(p).resolve().is_relative_to(site.resolve()) for p in where), where
    run = subprocess.run([sys.executable, "-m", "eaglehead", "demo", "--size", "tiny", "--out", str(tmp_path / "demo")],
                         cwd=cwd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "demo" / "report.json").read_text())
    assert set(summary["reports"]) == {"stdlib-heldout", "humaneval"}
    # The heads were trained by subprocesses of the installed package too (their saved config says where).
    assert (tmp_path / "demo" / "eagle3" / "head" / "model.safetensors").is_file()
