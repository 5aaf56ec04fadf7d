"""The demo target's recipe: corpus split, a tiny build, exact reproduction, the cached loader, the shipped artifact."""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from dataclasses import asdict

import pytest
import torch

from eaglehead.builtin.corpus import HELDOUT_FRACTION, corpus_files, corpus_fingerprint, corpus_split, is_heldout
from eaglehead.builtin.shipped import (
    ASSETS_DIR,
    DRAFT_LM_ASSETS_DIR,
    RECIPE_VERSION,
    file_sha256,
    load_demo_draft_lm,
    load_demo_target,
    read_recipe,
    recipe_key,
)
from eaglehead.pretrain.demo_target import Settings, build, main

# A few seconds per build: 2 layers x 32, vocab 512, 3 steps over the first 5 train and 5 held-out files.
TINY = Settings(steps=3, warmup=1, vocab=512, layers=2, width=32, heads=2, intermediate=64, seq_len=32, batch=2,
                eval_every=2, eval_chunks=4, corpus_limit=5)


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_target")
    recipe = build(TINY, out, progress=False)
    return out, recipe


def test_corpus_split_is_deterministic_disjoint_and_complete():
    train, heldout = corpus_split()
    assert (train, heldout) == corpus_split()
    train_ids, heldout_ids = {i for i, _ in train}, {i for i, _ in heldout}
    assert not train_ids & heldout_ids
    assert train_ids | heldout_ids == {i for i, _ in corpus_files()}
    assert all(is_heldout(i) for i in heldout_ids) and not any(is_heldout(i) for i in train_ids)
    # The rule is sha256 of the id, not Python's salted hash(): recompute it by hand.
    for file_id in list(heldout_ids)[:5] + list(train_ids)[:5]:
        value = int(hashlib.sha256(file_id.encode()).hexdigest()[:16], 16)
        assert (value < HELDOUT_FRACTION * 2 ** 64) == (file_id in heldout_ids)
    # Held-out count ~ Binomial(n, 0.1) for a hash that behaves like a random function of the id:
    # sd = sqrt(n * 0.1 * 0.9) (~7.8 files at n ~ 680); 5 sd bounds a fair split with p > 0.999999.
    n = len(train) + len(heldout)
    assert abs(len(heldout) - n * HELDOUT_FRACTION) <= 5 * math.sqrt(n * HELDOUT_FRACTION * (1 - HELDOUT_FRACTION))
    assert any(i.startswith("pydoc:") for i in heldout_ids) and any(i.startswith("pydoc:") for i in train_ids)
    # Excluded: tests, idlelib, the duplicate of the pydoc prose, generated codec tables.
    excluded_dirs = {"test", "tests", "idlelib", "__pycache__"}
    assert not any(excluded_dirs & set(i.split("/")[:-1]) for i in train_ids | heldout_ids)
    assert "pydoc_data/topics.py" not in train_ids | heldout_ids
    assert "encodings/cp1252.py" not in train_ids | heldout_ids and "encodings/utf_8.py" in train_ids | heldout_ids


def test_corpus_fingerprint_depends_on_ids_and_contents_not_order():
    files = [("a.py", "x = 1\n"), ("b.py", "y = 2\n")]
    assert corpus_fingerprint(files) == corpus_fingerprint(files[::-1])
    assert corpus_fingerprint(files) != corpus_fingerprint([("a.py", "x = 2\n"), ("b.py", "y = 2\n")])
    assert corpus_fingerprint(files) != corpus_fingerprint([("c.py", "x = 1\n"), ("b.py", "y = 2\n")])


def test_tiny_build_writes_a_loadable_artifact_that_matches_its_recipe(tiny_artifact, tmp_path):
    out, recipe = tiny_artifact
    assert read_recipe(out) == recipe
    assert recipe["status"] == "complete" and recipe["results"]["steps_done"] == TINY.steps
    assert recipe["recipe_version"] == RECIPE_VERSION and recipe["key"] == recipe_key(recipe)
    assert recipe["inputs"]["settings"] == asdict(TINY)
    train, heldout = corpus_split(TINY.corpus_limit)
    assert recipe["inputs"]["corpus"]["fingerprint"] == corpus_fingerprint(train + heldout)
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(recipe["files"])
    assert all(file_sha256(out / name) == digest for name, digest in recipe["files"].items())
    for key in ("train_loss", "heldout_loss", "heldout_loss_shipped", "wall_seconds"):
        assert math.isfinite(recipe["results"][key])

    model, tokenizer, loaded = load_demo_target(cache_dir=tmp_path, assets_dir=out)
    assert loaded == recipe and (tmp_path / recipe["key"] / "model.safetensors").is_file()
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings) == (2, 32, 512, True)
    assert model.dtype == torch.float32 and not model.training
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token_id == 0
    text = "def f(x):\n    return x + 1\n"
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert tokenizer.decode(ids[0]) == text
    assert torch.isfinite(model(input_ids=ids).logits).all()
    # Shipped float16 weights loaded back in float32 are the float16 rounding of nothing else.
    assert all(torch.equal(p, p.half().float()) for p in model.parameters())


def test_recorded_command_reproduces_the_weights_bit_for_bit(tiny_artifact, tmp_path):
    out, recipe = tiny_artifact
    argv = shlex.split(recipe["command"])[3:]                  # drop "python -m eaglehead.pretrain.demo_target"
    argv[argv.index("--out") + 1] = str(tmp_path)
    assert main(argv + ["--no-progress"]) == 0
    again = read_recipe(tmp_path)
    assert again["key"] == recipe["key"]
    assert again["files"] == recipe["files"]                   # weights, tokenizer and config byte for byte
    assert again["results"]["heldout_loss"] == recipe["results"]["heldout_loss"]


@pytest.mark.parametrize("stop", [{"stop_at": 2}, {"seconds": 0.0}])
def test_early_stop_keeps_the_schedule_and_records_how_to_reproduce(tmp_path, stop):
    recipe = build(TINY, tmp_path, progress=False, **stop)
    done = stop.get("stop_at", 1)                              # seconds=0 stops after the first step
    assert recipe["status"] == "partial" and recipe["results"]["steps_done"] == done
    assert recipe["command"].endswith(f"--stop-at {done}") and f"--steps {TINY.steps}" in recipe["command"]
    assert recipe["inputs"]["stop_at"] == done and recipe["key"] == recipe_key(recipe)
    assert read_recipe(tmp_path) == recipe


def test_corrupted_or_stale_cache_is_reported_and_replaced(tiny_artifact, tmp_path):
    out, recipe = tiny_artifact
    load_demo_target(cache_dir=tmp_path, assets_dir=out)
    cached = tmp_path / recipe["key"]
    weights = bytearray((cached / "model.safetensors").read_bytes())
    weights[-8:] = bytes(8)                                    # zero the last float16 values
    (cached / "model.safetensors").write_bytes(bytes(weights))
    with pytest.warns(UserWarning, match="model.safetensors does not match"):
        load_demo_target(cache_dir=tmp_path, assets_dir=out)
    assert file_sha256(cached / "model.safetensors") == recipe["files"]["model.safetensors"]

    (cached / "recipe.json").write_text(json.dumps(recipe | {"status": "edited"}))
    with pytest.warns(UserWarning, match="recipe.json differs"):
        load_demo_target(cache_dir=tmp_path, assets_dir=out)
    assert read_recipe(cached) == recipe


def test_damaged_shipped_artifact_raises_with_the_rebuild_command(tiny_artifact, tmp_path):
    out, recipe = tiny_artifact
    damaged = tmp_path / "assets"
    damaged.mkdir()
    for name in list(recipe["files"]) + ["recipe.json"]:
        (damaged / name).write_bytes((out / name).read_bytes())
    (damaged / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="tokenizer.json does not match.*python -m eaglehead.pretrain.demo_target build"):
        load_demo_target(cache_dir=tmp_path / "cache", assets_dir=damaged)


def test_bad_settings_name_the_flag():
    with pytest.raises(ValueError, match="--width"):
        Settings(width=100, heads=3).validate()
    with pytest.raises(ValueError, match="--steps"):
        Settings(steps=0).validate()
    with pytest.raises(ValueError, match="--warmup"):
        Settings(steps=10, warmup=10).validate()


@pytest.mark.parametrize("assets, load", [(ASSETS_DIR, load_demo_target), (DRAFT_LM_ASSETS_DIR, load_demo_draft_lm)],
                         ids=["target", "draft_lm"])
def test_shipped_artifact_is_intact_and_matches_its_recipe(tmp_path, assets, load):
    recipe = read_recipe(assets)
    assert recipe["key"] == recipe_key(recipe) and recipe["status"] == "complete"
    assert all(file_sha256(assets / name) == digest for name, digest in recipe["files"].items())
    assert (assets / "model.safetensors").stat().st_size <= 32 * 2 ** 20
    settings = Settings(**recipe["inputs"]["settings"])
    assert f"--steps {settings.steps}" in recipe["command"]
    model, tokenizer, _ = load(cache_dir=tmp_path)
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (settings.layers, settings.width,
                                                                        settings.vocab)
    assert len(tokenizer) == settings.vocab and model.dtype == torch.float32
    assert recipe["results"]["heldout_loss_shipped"] < math.log(settings.vocab)   # learned something
    # The draft LM drafts for the target: the very same tokenizer, and a cheaper model.
    assert (assets / "tokenizer.json").read_bytes() == (ASSETS_DIR / "tokenizer.json").read_bytes()
    assert settings.layers <= Settings(**read_recipe(ASSETS_DIR)["inputs"]["settings"]).layers