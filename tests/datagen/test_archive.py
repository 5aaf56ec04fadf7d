"""Carrying a data run's shards between machines: packed once each, restored without overwriting, and a run
restored from the archive finishes with the same data as the run that wrote it, generating nothing again."""

import json
import lzma

import pytest

from eaglehead.datagen import archive
from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import RegenerateConfig, SynthesisConfig
from tests.tiny_models import save_tiny_target


def _data_dir(root):
    (root / "user").mkdir(parents=True)
    (root / "answer").mkdir()
    (root / "config.json").write_text('{"seed": 1}')
    (root / "user" / "user-00000.jsonl").write_text('{"ids": [1, 2], "eos": true}\n')
    (root / "answer" / "answer-00000.jsonl").write_text('{"index": 0, "ids": [3], "eos": false}\n')
    (root / "answer" / "answer-00000.engine.json").write_text('{"engine": "llama.cpp"}\n')
    (root / "answer" / ".answer-00001.jsonl.tmp77").write_text("half a shard")  # a write in progress
    (root / "conversations.jsonl").write_text("{}\n")  # rebuilt by rerunning: not carried
    return root


def test_pack_carries_finished_shards_once_and_unpack_restores_them_byte_for_byte(tmp_path):
    src = _data_dir(tmp_path / "run")
    assert archive.pack(src, tmp_path / "arc") == {"added": 4, "present": 0}
    packed = sorted(p.relative_to(tmp_path / "arc").as_posix() for p in (tmp_path / "arc").rglob("*"))
    assert packed == ["answer", "answer/answer-00000.engine.json.xz", "answer/answer-00000.jsonl.xz", "config.json.xz",
                      "user", "user/user-00000.jsonl.xz"]
    (src / "user" / "user-00001.jsonl").write_text('{"ids": [4], "eos": true}\n')
    assert archive.pack(src, tmp_path / "arc") == {"added": 1, "present": 4}

    dst = tmp_path / "elsewhere"
    assert archive.unpack(tmp_path / "arc", dst) == {"restored": 5, "present": 0}
    for rel in ("config.json", "user/user-00000.jsonl", "user/user-00001.jsonl", "answer/answer-00000.jsonl",
                "answer/answer-00000.engine.json"):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes(), rel
    assert not (dst / "conversations.jsonl").exists() and not (dst / "answer" / ".answer-00001.jsonl.tmp77").exists()
    assert archive.unpack(tmp_path / "arc", dst) == {"restored": 0, "present": 5}


def test_nothing_is_overwritten_when_the_two_sides_hold_different_shards(tmp_path):
    src = _data_dir(tmp_path / "run")
    archive.pack(src, tmp_path / "arc")
    (src / "user" / "user-00000.jsonl").write_text('{"ids": [9], "eos": true}\n')
    with pytest.raises(ValueError, match=r"user-00000\.jsonl.*another run"):
        archive.pack(src, tmp_path / "arc")
    assert lzma.decompress((tmp_path / "arc" / "user" / "user-00000.jsonl.xz").read_bytes()) == b'{"ids": [1, 2], "eos": true}\n'
    with pytest.raises(ValueError, match=r"user-00000\.jsonl differs from the archived"):
        archive.unpack(tmp_path / "arc", src)
    assert (src / "user" / "user-00000.jsonl").read_text() == '{"ids": [9], "eos": true}\n'


def test_bad_folders_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty: not a data directory \(no config.json\)"):
        archive.pack(tmp_path / "empty", tmp_path / "arc")
    with pytest.raises(ValueError, match=r"empty: no archived shards"):
        archive.unpack(tmp_path / "empty", tmp_path / "out")
    assert archive.main(["unpack", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2


def test_a_run_restored_from_its_archive_finishes_with_identical_data_and_generates_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cd, "clean_user_turn", lambda text, **kw: text.strip() or None)  # untrained model's text
    target = tmp_path / "target"
    save_tiny_target(target, seed=3, layers=2)

    def cfg(out):
        synth = SynthesisConfig(magpie_prompts=5, stdlib_prompts=2, pydoc_prompts=1, second_turn_fraction=0.5,
                                max_new_tokens=5, max_rounds=4, keep_unfinished=True)
        return datagen.ChatDataConfig(target=str(target), out_dir=str(out), synthesis=synth,
                                      regenerate=RegenerateConfig(max_new_tokens=6, batch_size=3, shard_size=4))

    first = datagen.run(cfg(tmp_path / "first"))
    assert archive.main(["pack", str(tmp_path / "first"), str(tmp_path / "arc")]) == 0
    assert archive.main(["unpack", str(tmp_path / "arc"), str(tmp_path / "second")]) == 0

    def no_generation(*a, **kw):
        raise AssertionError("a restored shard was generated again")

    monkeypatch.setattr(datagen, "_sample", no_generation)
    second = datagen.run(cfg(tmp_path / "second"))
    assert second["sha256"] == first["sha256"] and second["conversations"] == first["conversations"]
    assert json.loads((tmp_path / "second" / "config.json").read_text()) == json.loads(
        (tmp_path / "first" / "config.json").read_text())
