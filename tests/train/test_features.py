"""Offline feature cache (shards, index, resume, refusals) against online features of the same batches."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from datasets import Dataset
from eaglehead.train.data import collate_tokens
from eaglehead.train.features import (
    FeatureDataset,
    OnlineFeatures,
    cache_features,
    collate_features,
)
from safetensors.torch import save_file

from tests.tiny_models import tiny_llama

LAYERS = [1, 2, 4]  # includes L=4: the final-normed state
HIDDEN = 32
N_SEQ, SHARD, BATCH = 10, 4, 2  # shards of 4, 4 and 2 sequences; batches never straddle a shard


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, vocab=64, hidden=HIDDEN, layers=4)


@pytest.fixture(scope="module")
def dataset():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 20, (N_SEQ,), generator=g).tolist()
    ids = [torch.randint(0, 64, (n,), generator=g).tolist() for n in lengths]
    masks = [torch.randint(0, 2, (n,), generator=g).tolist() for n in lengths]
    return Dataset.from_dict({"input_ids": ids, "loss_mask": masks})


class RowCounter:
    """Counts sequences the target runs on; optionally raises after ``fail_after`` forwards (an interruption)."""

    def __init__(self, model, fail_after=None):
        self.rows, self.calls, self.fail_after = 0, 0, fail_after
        # On the decoder: OnlineFeatures calls it directly (without lm_head) after the first batch.
        self.handle = model.get_decoder().register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        if self.fail_after is not None and self.calls == self.fail_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.rows += kwargs["input_ids"].shape[0]


@pytest.fixture(scope="module")
def cached(dataset, target, tmp_path_factory):
    """The float32 cache of the whole dataset, built once (the target forward dominates these tests)."""
    return cache(dataset, target, tmp_path_factory.mktemp("features") / "ref")


def cache(dataset, target, out, layers=LAYERS, dtype="float32"):
    return cache_features(dataset, target, layers, out, shard_size=SHARD, dtype=dtype, batch_size=BATCH)


def load_all(path):
    ds = FeatureDataset(path)
    return [ds[i] for i in range(len(ds))]


def assert_same(items_a, items_b):
    assert len(items_a) == len(items_b)
    for a, b in zip(items_a, items_b):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_offline_equals_online(dataset, target, cached):
    ds = FeatureDataset(cached)
    assert len(ds) == N_SEQ and ds.layer_ids == LAYERS and ds.dtype == "float32" and ds.hidden_size == HIDDEN
    assert ds.lengths() == [len(r) for r in dataset["input_ids"]]
    online = OnlineFeatures(target, LAYERS)
    for start in range(0, N_SEQ, BATCH):
        rows = [dataset[i] for i in range(start, start + BATCH)]
        batch = online(collate_tokens(rows))
        for r, row in enumerate(rows):
            item, n = ds[start + r], len(row["input_ids"])
            assert item["input_ids"].tolist() == row["input_ids"] and item["loss_mask"].tolist() == row["loss_mask"]
            assert item["fused"].shape == (n, 3 * HIDDEN) and item["final_hidden"].shape == (n, HIDDEN)
            # Same batches, float32: the cache holds exactly the online tensors.
            assert torch.equal(item["fused"], batch["fused"][r, :n])
            assert torch.equal(item["final_hidden"], batch["final_hidden"][r, :n])


def test_features_match_the_unpadded_targets_hidden_states(dataset, target, cached):
    # Right padding must not leak into real tokens, and the ids must follow output_hidden_states indexing.
    # Tolerance 1e-5: float32 kernels for another sequence length may sum in another order (~1e-7 here).
    ds = FeatureDataset(cached)
    for i in range(3):
        with torch.no_grad():
            ref = target(torch.tensor([dataset[i]["input_ids"]]), output_hidden_states=True).hidden_states
        torch.testing.assert_close(ds[i]["fused"], torch.cat([ref[k][0] for k in LAYERS], -1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ds[i]["final_hidden"], ref[4][0], atol=1e-5, rtol=1e-5)


def test_index_and_file_sizes(dataset, cached):
    tokens = sum(len(r) for r in dataset["input_ids"])
    index = json.loads((cached / "index.json").read_text())
    assert [s["num_sequences"] for s in index["shards"]] == [4, 4, 2] and all(s["complete"] for s in index["shards"])
    assert index["num_tokens"] == tokens and index["num_sequences"] == N_SEQ and index["layer_ids"] == LAYERS
    # Each file is its payload (4H float32 + int64 id + bool mask per token, int64 offsets) plus a small header.
    payload = tokens * (4 * HIDDEN * 4 + 8 + 1) + 8 * (N_SEQ + 3)
    written = sum(p.stat().st_size for p in cached.glob("shard_*.safetensors"))
    assert payload <= written <= payload + 3 * 1024


def test_collate_features_pads_to_a_batch(dataset, cached):
    ds = FeatureDataset(cached)
    batch = collate_features([ds[0], ds[1]])
    n0, n1 = len(dataset[0]["input_ids"]), len(dataset[1]["input_ids"])
    assert batch["fused"].shape == (2, max(n0, n1), 3 * HIDDEN) and batch["attention_mask"].sum().item() == n0 + n1
    short, n = (0, n0) if n0 < n1 else (1, n1)
    assert torch.equal(batch["fused"][short, :n], ds[short]["fused"])
    assert batch["fused"][short, n:].abs().sum() == 0 and batch["loss_mask"][short, n:].sum() == 0


def test_resume_redoes_only_unfinished_shards(dataset, target, cached, tmp_path):
    reference = load_all(cached)
    out = tmp_path / "c"
    # Interrupted in the second shard's second batch: shard 0 is finished, shard 1 is not.
    counter = RowCounter(target, fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        cache(dataset, target, out)
    counter.handle.remove()
    assert [s["complete"] for s in json.loads((out / "index.json").read_text())["shards"]] == [True, False, False]
    with pytest.raises(ValueError, match="incomplete"):
        FeatureDataset(out)
    (out / "shard_00001.safetensors.tmp").write_bytes(b"half a shard")  # left by a crash during the write
    counter = RowCounter(target)
    cache(dataset, target, out)
    counter.handle.remove()
    assert counter.rows == N_SEQ - SHARD and not list(out.glob("*.tmp"))
    assert_same(load_all(out), reference)

    # A finished shard deleted, another one damaged (wrong shapes): both are redone, nothing else.
    (out / "shard_00002.safetensors").unlink()
    save_file({"fused": torch.zeros(1, 2)}, str(out / "shard_00000.safetensors"))
    counter = RowCounter(target)
    cache(dataset, target, out)
    counter.handle.remove()
    assert counter.rows == SHARD + 2
    assert_same(load_all(out), reference)

    counter = RowCounter(target)
    cache(dataset, target, out)  # everything done: no forward at all
    counter.handle.remove()
    assert counter.rows == 0


def test_refuses_when_the_disk_is_too_small(dataset, target, tmp_path, monkeypatch, capsys):
    out = tmp_path / "small"
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - 100, 100))
    with pytest.raises(ValueError, match=f"not enough free disk space in {out}"):
        cache(dataset, target, out)
    assert not list(out.glob("shard_*"))
    # The announced size: tokens x (4H x 4 bytes + 8-byte id + 1-byte mask) + int64 offsets per shard.
    payload = sum(len(r) for r in dataset["input_ids"]) * (4 * HIDDEN * 4 + 8 + 1) + 8 * (N_SEQ + 3)
    assert f"writing {payload} bytes" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"layers": [1, 3, 4]}, "layer_ids"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"data": "ids"}, "different data"),
        ({"data": "mask"}, "different data"),
        ({"rows": 9}, "num_sequences"),
    ],
)
def test_refuses_a_cache_built_differently(dataset, target, cached, tmp_path, change, needle):
    out = shutil.copytree(cached, tmp_path / "c")
    ds = dataset
    if change.get("data") == "ids":
        ds = dataset.map(lambda r: {"input_ids": [(t + 1) % 64 for t in r["input_ids"]]})
    if change.get("data") == "mask":
        ds = dataset.map(lambda r: {"loss_mask": [1 - m for m in r["loss_mask"]]})
    if "rows" in change:
        ds = dataset.select(range(change["rows"]))
    counter = RowCounter(target)
    with pytest.raises(ValueError, match=f"{out}.*{needle}"):
        cache(ds, target, out, layers=change.get("layers", LAYERS), dtype=change.get("dtype", "float32"))
    counter.handle.remove()
    assert counter.rows == 0


def test_other_target_is_refused_and_bf16_cache_round_trips(dataset, target, tmp_path):
    out, two = tmp_path / "c", dataset.select(range(2))
    cache_features(two, target, LAYERS, out, shard_size=SHARD, dtype="bfloat16", batch_size=BATCH, target_name="a")
    with pytest.raises(ValueError, match="target='a'"):
        cache_features(two, target, LAYERS, out, shard_size=SHARD, dtype="bfloat16", batch_size=BATCH, target_name="b")
    item = FeatureDataset(out)[0]
    batch = OnlineFeatures(target, LAYERS)(collate_tokens([dataset[0], dataset[1]]))
    n = len(dataset[0]["input_ids"])
    assert item["fused"].dtype == torch.bfloat16 and item["final_hidden"].dtype == torch.bfloat16
    assert torch.equal(item["fused"], batch["fused"][0, :n].bfloat16())
    assert torch.equal(item["final_hidden"], batch["final_hidden"][0, :n].bfloat16())


def test_decoder_only_shortcut_is_exact_and_checked(dataset, target):
    rows = [dataset[i] for i in range(BATCH)]
    batch = collate_tokens(rows)
    with torch.no_grad():
        ref = target(**batch, output_hidden_states=True).hidden_states
    online = OnlineFeatures(target, LAYERS)
    counter = RowCounter(target)
    calls = []
    handle = target.register_forward_pre_hook(lambda m, a, kw: calls.append(1), with_kwargs=True)
    first, second = online(batch), online(batch)
    handle.remove()
    counter.handle.remove()
    assert online.decoder_only and len(calls) == 1 and counter.calls == 2  # the second batch skipped lm_head
    for out in (first, second):
        assert torch.equal(out["fused"], torch.cat([ref[k] for k in LAYERS], -1))
        assert torch.equal(out["final_hidden"], ref[4])

    # A model that changes the state between its decoder and lm_head (here a pre-hook doubling it): the
    # shortcut is refused and every batch keeps reading what lm_head receives.
    doubled = target.get_output_embeddings().register_forward_pre_hook(lambda m, args: (2 * args[0],))
    try:
        online = OnlineFeatures(target, LAYERS)
        outs = [online(batch), online(batch)]
    finally:
        doubled.remove()
    assert online.decoder_only is False
    for out in outs:
        assert torch.equal(out["final_hidden"], 2 * ref[4])


def test_source_of_serves_the_final_state_to_an_eagle1_head(cached):
    ds = FeatureDataset(cached)
    assert ds.source_of(LAYERS) == "fused"
    assert ds.source_of([4]) == "final_hidden"  # id L: the final-normed state every cache stores
    with pytest.raises(ValueError, match=f"feature cache {cached} holds layer ids .*the head reads \\[1, 2, 3\\]"):
        ds.source_of([1, 2, 3])


def test_decoder_that_rejects_the_call_falls_back_to_the_full_forward(dataset, target, monkeypatch):
    batch = collate_tokens([dataset[i] for i in range(BATCH)])
    online = OnlineFeatures(target, LAYERS)
    reference = online(batch)
    assert online.decoder_only

    class Picky(torch.nn.Module):  # same hidden states through the hook, but no use_cache argument
        def forward(self, input_ids, attention_mask):
            raise AssertionError("not reached")

    monkeypatch.setattr(online, "decoder", Picky())
    out = online(batch)
    assert online.decoder_only is False
    assert torch.equal(out["fused"], reference["fused"]) and torch.equal(out["final_hidden"], reference["final_hidden"])
