"""A stage's shards shared among CPU worker processes (``workers: N``): the same bytes as one process, a failing
worker named with its exit code, the cores split among the workers, and the settings checked."""

import dataclasses

import pytest

from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import RegenerateConfig, shard_defining
from eaglehead.datagen.workers import ShardJob, cpu_groups, sample_in_workers
from eaglehead.decode import SamplingConfig
from tests.datagen.test_pipeline import _cfg, count_sampler_calls, lenient_cleaning, target_dir  # noqa: F401


def test_two_workers_write_the_same_data_as_one_process(target_dir, tmp_path, monkeypatch):  # noqa: F811
    calls = count_sampler_calls(monkeypatch)
    one = dataclasses.replace(_cfg(target_dir, tmp_path / "one"), threads=1)
    datagen.run(one)
    in_one_process = calls["n"]
    calls["n"] = 0
    two = dataclasses.replace(_cfg(target_dir, tmp_path / "two"), threads=1, workers=2)
    manifest = datagen.run(two)
    assert (tmp_path / "two" / "conversations.jsonl").read_bytes() == \
        (tmp_path / "one" / "conversations.jsonl").read_bytes()
    assert manifest["conversations"] == 11
    # the answer stages were sampled in the workers, not here (Magpie's rounds stay in this process)
    assert calls["n"] < in_one_process
    # workers decides nothing that is written: a directory resumes with any number of them
    assert shard_defining(one) == shard_defining(two)


class _Bar:
    def __init__(self):
        self.steps = []

    def step(self, tokens):
        self.steps.append(tokens)


def test_a_worker_that_fails_is_named_with_its_exit_code_and_finished_shards_stay(tmp_path):
    cfg = datagen.ChatDataConfig(target=str(tmp_path / "no-such-model"), out_dir=str(tmp_path), workers=2, threads=1)
    jobs = [ShardJob(cd.shard_path(tmp_path, "answer", k), [k], [[1, 2, 3]], [f"answer[{k}]"], k) for k in range(2)]
    done = cd.shard_path(tmp_path, "answer", 2)
    cd.write_shard(done, [{"index": 2, "ids": [5], "eos": True}])
    with pytest.raises(RuntimeError, match=r"datagen worker [12]/2 exited with code 1 .*2 shard\(s\) not written"):
        sample_in_workers(cfg, jobs, progress=_Bar(), sampling=SamplingConfig(), max_new_tokens=4, batch_size=2,
                          sampler=cfg.sampler)
    assert cd.read_shard(done) == [{"index": 2, "ids": [5], "eos": True}]


def test_cores_are_cut_into_contiguous_groups_one_per_worker():
    assert cpu_groups(2, [0, 1]) == [[0], [1]]
    assert cpu_groups(2, [0, 1, 2, 3, 4]) == [[0, 1, 2], [3, 4]]
    assert cpu_groups(3, [4, 5]) == [None, None, None]  # fewer cores than workers: no pinning


@pytest.mark.parametrize("change, message", [
    (dict(workers=0), "workers: expected a number of processes >= 1, got 0"),
    (dict(workers=2, regenerate=RegenerateConfig(engine="llama.cpp")), "workers: 2 processes .*'llama.cpp'"),
    (dict(workers=2, device="cuda"), "workers: 2 processes .*device='cuda'"),
])
def test_bad_workers_settings_are_named(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        datagen.ChatDataConfig(target="x", out_dir=str(tmp_path), **change)
