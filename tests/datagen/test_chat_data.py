"""Text side of self-written chat data: n-gram overlap filter, cleaning, de-duplication, seed prompts, shards."""

import json

import pytest

from eaglehead.builtin.mtbench import load_mtbench
from eaglehead.datagen import chat_data as cd


def test_overlap_filter_removes_a_planted_mtbench_question_and_keeps_others():
    questions = load_mtbench()
    flt = cd.OverlapFilter({"mt-bench": [t for q in questions for t in q.turns]}, n=8)
    planted = "Please help: " + questions[3].turns[0].upper() + " Thanks!"  # case and framing do not hide it
    assert flt.hit(planted) == "mt-bench"
    assert flt.hit("Write a Python function that returns the median of a list of numbers.") is None


def test_overlap_filter_catches_benchmark_texts_shorter_than_n():
    flt = cd.OverlapFilter({"bench": ["Sort these five words."]}, n=8)
    assert flt.hit("hey, sort these five words please") == "bench"
    assert flt.hit("sort these four words") is None


def test_ngrams_and_normalise():
    assert cd.ngrams("A b c", 2) == {("a", "b"), ("b", "c")}
    assert cd.ngrams("one", 3) == {("one",)}
    assert cd.normalise("  Hello\n  World ") == "hello world"


@pytest.mark.parametrize("text, keep", [
    ("Can you explain how a hash table works?", True),
    ("hi", False),  # too short
    ("ENTIRE " * 20, False),  # one word dominates
    ("line\n" * 6, False),  # repeated lines
    ("Привет, как дела? Расскажи про Python и про его историю", False),  # mostly non-ASCII
])
def test_clean_user_turn(text, keep):
    assert (cd.clean_user_turn(text) is not None) == keep


def test_dedupe_counts_what_it_drops():
    kept, dropped = cd.dedupe([{"prompt": "Hello  there"}, {"prompt": "hello there"}, {"prompt": "other"}])
    assert [p["prompt"] for p in kept] == ["Hello  there", "other"] and dropped == 1


def test_seed_prompts_are_reproducible_and_sized():
    a, b = cd.stdlib_task_prompts(40, seed=1), cd.stdlib_task_prompts(40, seed=1)
    assert a == b and len(a) == 40 and len({p["prompt"] for p in a}) == 40
    assert cd.stdlib_task_prompts(40, seed=2) != a
    topics = cd.pydoc_topic_prompts(10)
    assert len(topics) == 10 and all(p["source"] == "pydoc" and len(p["prompt"]) < 1400 for p in topics)


def test_shards_are_written_atomically(tmp_path, monkeypatch):
    path = cd.shard_path(tmp_path, "answer", 3)
    assert path.name == "answer-00003.jsonl" and cd.read_shard(path) is None
    cd.write_shard(path, [{"a": 1}, {"b": "é"}])
    assert cd.read_shard(path) == [{"a": 1}, {"b": "é"}]

    def broken_dumps(obj, **kw):
        raise KeyboardInterrupt  # killed midway through writing

    monkeypatch.setattr(cd.json, "dumps", broken_dumps)
    other = cd.shard_path(tmp_path, "answer", 4)
    with pytest.raises(KeyboardInterrupt):
        cd.write_shard(other, [{"c": 1}])
    assert not other.exists()  # nothing that looks finished
    monkeypatch.undo()
    assert json.loads(path.read_text().splitlines()[0]) == {"a": 1}


def test_shard_seeds_differ_by_stage_and_index():
    seeds = {cd.shard_seed(0, s, i) for s in ("user", "answer") for i in range(3)}
    assert len(seeds) == 6 and all(0 <= s < 2**63 for s in seeds)
