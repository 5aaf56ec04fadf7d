"""Templated task prompts of the eight chat-benchmark categories: reproducible, balanced, unique, each with a
follow-up, none sharing an 8-word n-gram with MT-bench or HumanEval, too many asked is a named error. Version 1 still
gives the shipped data's prompts; version 2 gives 1000 varied prompts a category for the large data set."""

from pathlib import Path

import pytest

from eaglehead.datagen import chat_data as cd
from eaglehead.datagen.task_prompts import CATEGORIES, category_task_prompts


def test_reproducible_balanced_unique_with_follow_ups():
    a = category_task_prompts(400, seed=0)
    assert a == category_task_prompts(400, seed=0)
    assert a != category_task_prompts(400, seed=1)
    assert len({p["prompt"] for p in a}) == 400
    for cat in CATEGORIES:
        assert sum(p["source"] == f"task:{cat}" for p in a) == 50
    assert all(p["followup"].strip() and p["prompt"].strip() for p in a)
    # A smaller request is a prefix of a larger one (round robin with one generator per category).
    assert category_task_prompts(40, seed=0) == a[:40]


def test_the_smollm2_task_data_configs_prompts_have_no_benchmark_overlap():
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.datagen.config import ChatDataConfig
    from eaglehead.datagen.pipeline import benchmark_texts

    cfg = load_config(ChatDataConfig, Path(__file__).resolve().parents[2] / "configs" /
                      "smollm2-135m-instruct-data-tasks.yaml")
    flt = cd.OverlapFilter(benchmark_texts(), cfg.synthesis.overlap_ngram)
    rows = category_task_prompts(cfg.synthesis.category_prompts, seed=cfg.seed)
    assert len(rows) == cfg.synthesis.category_prompts >= 8 * 50
    assert [p["prompt"] for p in rows if flt.hit(p["prompt"])] == []
    assert sorted({p["followup"] for p in rows if flt.hit(p["followup"])}) == []


def test_asking_for_more_than_the_word_lists_give_names_the_parameter_and_the_count():
    with pytest.raises(ValueError, match=r"category_prompts=100000: category '\w+' gave only \d+ unique prompts"):
        category_task_prompts(100000)
    with pytest.raises(ValueError, match="count must be >= 0"):
        category_task_prompts(-1)


# sha256 of json.dumps(category_task_prompts(640, seed=0), sort_keys=True), computed before version 2 existed: the
# prompts the shipped data set (builtin/assets/smollm2_data_tasks) was written from.
SHIPPED_640 = "f4500698e50aa406b0ee0a466782f768e00233f94af43457f987c3671f6d89e8"
# the same of configs/smollm2-135m-instruct-data-large-tasks.yaml's 8000 (version 2, seed 1): its data directory is
# resumed shard by shard, so an edit of version 2's word lists that changes them must become a version 3
LARGE_TASKS_8000 = "55a51674d4347b3eb36a40ae0f9f3773bc322daae8875ab5c6642c5d96b1e648"
ROOT = Path(__file__).resolve().parents[2]


def _fingerprint(rows: list[dict]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_version_1_still_gives_the_shipped_datas_prompts():
    rows = category_task_prompts(640, seed=0)
    assert rows == category_task_prompts(640, seed=0, version=1)
    assert _fingerprint(rows) == SHIPPED_640


@pytest.fixture(scope="module")
def large_tasks():
    """The prompts of configs/smollm2-135m-instruct-data-large-tasks.yaml (version 2, 1000 a category)."""
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.datagen.config import ChatDataConfig

    cfg = load_config(ChatDataConfig, ROOT / "configs" / "smollm2-135m-instruct-data-large-tasks.yaml")
    s = cfg.synthesis
    assert (s.category_prompts, s.task_prompts_version) == (8000, 2)
    return category_task_prompts(s.category_prompts, seed=cfg.seed, version=s.task_prompts_version)


def test_version_2_gives_1000_unique_prompts_a_category_with_follow_ups(large_tasks):
    rows = large_tasks
    assert _fingerprint(rows) == LARGE_TASKS_8000
    assert len({cd.normalise(p["prompt"]) for p in rows}) == len(rows) == 8000
    for cat in CATEGORIES:
        mine = [p for p in rows if p["source"] == f"task:{cat}"]
        assert len(mine) == 1000, cat
        assert all(p["prompt"].strip() and p["followup"].strip() for p in mine)
        assert len({p["followup"] for p in mine}) >= 15, cat  # 17 to 44 today
    # reproducible, and a smaller request is a prefix of a larger one, as in version 1
    assert category_task_prompts(80, seed=1, version=2) == rows[:80]
    assert category_task_prompts(80, seed=2, version=2) != rows[:80]
    assert len(category_task_prompts(8000, seed=0, version=2)) == 8000  # not one lucky seed


def test_version_2_prompts_are_varied(large_tasks):
    """No two prompts differ in one word only (the makers' one-word masks never collide), and within a category
    the prompts open in many ways: >= 150 distinct first four words (digits folded; 214 to 486 today), none of
    them opening more than 10 % of the category (7.5 % at most today)."""
    import re
    from collections import Counter

    from eaglehead.datagen.task_prompts import one_word_masks

    masks = [one_word_masks(p["prompt"]) for p in large_tasks]
    assert len(set().union(*masks)) == sum(map(len, masks))
    for cat in CATEGORIES:
        openings = Counter(re.sub(r"\d+", "#", " ".join(cd.words(p["prompt"])[:4]))
                           for p in large_tasks if p["source"] == f"task:{cat}")
        assert len(openings) >= 150, (cat, len(openings))
        assert openings.most_common(1)[0][1] <= 100, (cat, openings.most_common(3))


def test_version_2_prompts_barely_overlap_mt_bench_or_humaneval(large_tasks):
    """The pipeline drops prompts sharing an 8-word n-gram with a benchmark; at most 1 in 1000 may (0 today)."""
    from eaglehead.datagen.pipeline import benchmark_texts

    flt = cd.OverlapFilter(benchmark_texts(), 8)
    hits = [p["prompt"] for p in large_tasks if flt.hit(p["prompt"])]
    followups = sorted({p["followup"] for p in large_tasks if flt.hit(p["followup"])})
    assert len(hits) <= len(large_tasks) // 1000, hits
    assert followups == []


def test_the_version_is_a_named_choice_and_version_1_directories_stay_valid():
    from eaglehead.datagen.config import ChatDataConfig, SynthesisConfig, config_differences, shard_defining

    with pytest.raises(ValueError, match="task prompts version must be one of"):
        category_task_prompts(8, version=3)
    with pytest.raises(ValueError, match=r"synthesis.task_prompts_version: expected one of \[1, 2\], got 3"):
        SynthesisConfig(task_prompts_version=3)
    before = shard_defining(ChatDataConfig(target="t", out_dir="o", synthesis=SynthesisConfig(category_prompts=8)))
    assert "task_prompts_version" not in before["synthesis"]  # what a directory started before it holds
    now = ChatDataConfig(target="t", out_dir="o", synthesis=SynthesisConfig(category_prompts=8, task_prompts_version=2))
    assert config_differences(before, shard_defining(now)) == [
        "synthesis.task_prompts_version: the directory has 1, this config 2"]
