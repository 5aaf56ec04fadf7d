"""Prompt-set loading (MT-bench, Spec-Bench, plain prompts, HumanEval) and the tune/test split."""

import hashlib
import json
import math
import random

import pytest

from eaglehead.eval.prompts import Prompt, load_prompt_set, split_prompts


def _write(path, lines):
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_mt_bench_style(tmp_path):
    path = _write(tmp_path / "question.jsonl", [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        "",
        {"question_id": 82, "category": "math", "turns": ["2+2?"], "reference": ["4"]},
    ])
    prompts = load_prompt_set(path)
    assert prompts == [
        Prompt("81", "writing", "Write a poem.", ["Write a poem.", "Shorter."]),
        Prompt("82", "math", "2+2?", ["2+2?"]),
    ]


def test_spec_bench_and_plain_prompt_lines(tmp_path):
    spec = _write(tmp_path / "spec.jsonl", [
        {"question_id": "translation_1", "category": "translation", "turns": ["Translate: hi"]},
    ])
    plain = _write(tmp_path / "plain.jsonl", [{"id": "a", "category": "qa", "prompt": "Why?"}])
    assert load_prompt_set(str(spec))[0] == Prompt(
        "translation_1", "translation", "Translate: hi", ["Translate: hi"]
    )
    assert load_prompt_set(plain) == [Prompt("a", "qa", "Why?", ["Why?"])]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "bad.jsonl:2: not valid JSON"),
        ('{"category": "x", "prompt": "p"}', r"bad.jsonl:2: missing field 'id'"),
        ('{"id": 3, "prompt": "p"}', r"bad.jsonl:2: missing field 'category'"),
        ('{"id": 3, "category": "x"}', r"bad.jsonl:2: missing field 'turns'"),
        ('{"id": 3, "category": "x", "turns": []}', r"bad.jsonl:2: field 'turns'"),
        ('{"id": 3, "category": "x", "prompt": 5}', r"bad.jsonl:2: field 'prompt'"),
        ('{"id": 1, "category": "x", "prompt": "p"}', r"bad.jsonl:2: duplicate id '1'"),
        ("[1, 2]", "bad.jsonl:2: expected a JSON object"),
    ],
)
def test_bad_lines_name_line_and_field(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "category": "x", "prompt": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        load_prompt_set(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_prompt_set(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no prompts"):
        load_prompt_set(tmp_path / "empty.jsonl")


def test_humaneval():
    prompts = load_prompt_set("humaneval")
    assert len(prompts) == 164
    assert len({p.id for p in prompts}) == 164
    assert all(p.category == "code" and p.text.strip() and p.turns == [p.text] for p in prompts)
    assert prompts[0].id == "HumanEval/0" and "def " in prompts[0].text


def _prompt_set():
    cats = {"writing": 10, "math": 7, "code": 23}
    return [Prompt(f"{c}-{i}", c, f"q{i}", [f"q{i}"]) for c, n in cats.items() for i in range(n)]


def test_split_deterministic_disjoint_stratified_and_order_independent():
    prompts = _prompt_set()
    tune, test = split_prompts(prompts, tune_fraction=0.25)
    tune_ids, test_ids = {p.id for p in tune}, {p.id for p in test}
    assert not tune_ids & test_ids and tune_ids | test_ids == {p.id for p in prompts}
    for cat, n in {"writing": 10, "math": 7, "code": 23}.items():
        assert sum(p.category == cat for p in tune) == math.floor(n * 0.25 + 0.5)
    # Same answer from a fresh call and from any input order.
    assert [p.id for p in split_prompts(prompts, 0.25)[0]] == [p.id for p in tune]
    shuffled = prompts[:]
    random.Random(3).shuffle(shuffled)
    assert {p.id for p in split_prompts(shuffled, 0.25)[0]} == tune_ids
    # Stable across runs and machines: the tune ids are the lowest sha256(salt NUL id) per category.
    for cat in ("writing", "math", "code"):
        ids = sorted((p.id for p in prompts if p.category == cat),
                     key=lambda i: hashlib.sha256(f"eaglehead\x00{i}".encode()).hexdigest())
        k = math.floor(len(ids) * 0.25 + 0.5)
        assert set(ids[:k]) == {p.id for p in tune if p.category == cat}
    # A different salt gives a different split (C(23, 6) ~ 1e5 choices for "code" alone).
    assert {p.id for p in split_prompts(prompts, 0.25, salt="other")[0]} != tune_ids


def test_split_edges_and_errors():
    prompts = _prompt_set()
    assert split_prompts(prompts, 0.0)[0] == [] and split_prompts(prompts, 1.0)[1] == []
    with pytest.raises(ValueError, match="tune_fraction"):
        split_prompts(prompts, 1.5)
    with pytest.raises(ValueError, match="duplicate id"):
        split_prompts(prompts + prompts[:1])
