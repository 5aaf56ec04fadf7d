"""Templated task prompts of the eight chat-benchmark categories: reproducible, balanced, unique, each with a
follow-up, none sharing an 8-word n-gram with MT-bench or HumanEval, too many asked is a named error."""

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
