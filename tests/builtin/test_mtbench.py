"""MT-bench's installed question file, and the errors a malformed one gives."""

import json
from collections import Counter

import pytest

from eaglehead.builtin.mtbench import CATEGORIES, CATEGORY_TEMPERATURE, Question, load_mtbench


def test_installed_mtbench_has_80_two_turn_questions_10_per_category():
    questions = load_mtbench()
    assert len(questions) == 80
    assert [q.question_id for q in questions] == list(range(81, 161))
    assert all(isinstance(q, Question) and len(q.turns) == 2 and all(q.turns) for q in questions)
    assert Counter(q.category for q in questions) == {c: 10 for c in CATEGORIES}
    # FastChat's order: ids 81-90 are the first category, 151-160 the last
    assert [questions[i].category for i in range(0, 80, 10)] == list(CATEGORIES)
    assert set(CATEGORY_TEMPERATURE) == set(CATEGORIES)


def test_question_is_frozen():
    q = Question(1, "math", ("a",))
    with pytest.raises(AttributeError):
        q.category = "stem"


def _write(tmp_path, records):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


GOOD = {"question_id": 1, "category": "math", "turns": ["What is 2+2?", "And 3+3?"]}


@pytest.mark.parametrize("bad, reason", [
    ({**GOOD, "turns": ["What is 2+2?", ""]}, "turn 1 is empty"),
    ({**GOOD, "turns": []}, "'turns' must be a non-empty list"),
    ({"question_id": 1, "turns": ["x"]}, "'category' missing"),
    ("{not json", "not valid JSON"),
])
def test_malformed_line_error_names_file_and_line(tmp_path, bad, reason):
    path = _write(tmp_path, [GOOD, bad])
    with pytest.raises(ValueError, match="question.jsonl:2: " + reason.replace("+", r"\+")):
        load_mtbench(path)


def test_explicit_path_is_read(tmp_path):
    assert load_mtbench(_write(tmp_path, [GOOD])) == [Question(1, "math", ("What is 2+2?", "And 3+3?"))]
