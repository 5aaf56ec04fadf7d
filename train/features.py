"""Target features for draft-head training: computed per batch (online) or cached once on disk (offline).

Usage::

    # offline, once (``eaglehead prepare``): resumable, refuses when the disk is too small
    cache_features(splits["train"], target, layer_ids, "cache/train", shard_size=64, dtype="bfloat16", batch_size=8)
    loader = DataLoader(FeatureDataset("cache/train"), batch_size=4, collate_fn=collate_features)

    # online, inside the training loop
    online = OnlineFeatures(target, layer_ids)
    batch = online(collate_tokens(rows))

Both modes give batches with ``input_ids``, ``attention_mask``, ``loss_mask`` (``LongTensor[B, T]``),
``fused`` ``[B, T, 3H]`` (the tapped hidden states, low to high, see ``FeatureTaps``) and
``final_hidden`` ``[B, T, H]`` (the input of ``lm_head``). Target logits are recomputed in both modes as
``target.get_output_embeddings()(final_hidden)``: storing H numbers per token instead of V.

Cache layout: ``index.json`` plus ``shard_00000.safetensors``, ... Shard ``k`` holds sequences
``[k * shard_size, (k + 1) * shard_size)`` concatenated along tokens: ``input_ids`` int64 ``[N]``,
``loss_mask`` bool ``[N]``, ``fused`` ``[N, 3H]``, ``final_hidden`` ``[N, H]`` and ``offsets`` int64
``[S + 1]`` (sequence ``s`` is rows ``offsets[s]:offsets[s+1]``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import shutil
import zlib
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import torch
from eaglehead.builtin.devices import DTYPES
from eaglehead.draftheads.taps import FeatureTaps
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from .data import collate_tokens

INDEX = "index.json"
FORMAT_VERSION = 1


class DiskSpaceError(ValueError):
    """The feature cache would not fit on its disk (raised before anything is written)."""


class OnlineFeatures:
    """Run the frozen target on a token batch and return it with ``fused`` and ``final_hidden`` added.

    No gradients; bf16 autocast on CUDA only (on CPU the target runs in its own dtype, so float32
    features are exact). The target is put in eval mode. Nothing needs the target's logits, so after
    the first batch the target's decoder (``get_decoder()``, whose output is the final-normed state)
    runs without ``lm_head`` (a ``hidden x vocab`` product per token: ~18 % of a forward of the demo
    target). That shortcut is taken only if, on the first batch, it reproduced exactly the state the
    full forward feeds to ``lm_head``; otherwise every batch runs the full forward.
    """

    def __init__(self, target_model, layer_ids: list[int]):
        self.model = target_model.eval()
        self.taps = FeatureTaps(target_model, layer_ids, capture_final=True)
        self.layer_ids = self.taps.layer_ids
        decoder = target_model.get_decoder() if hasattr(target_model, "get_decoder") else None
        self.decoder = decoder if decoder is not target_model else None  # the model without lm_head, if any
        self.decoder_only: bool | None = None  # decided on the first batch

    def _run(self, module, batch, full: bool, decoder=None):
        """(fused, final_hidden[, the decoder's own output when ``decoder`` is given, for the first-batch check])."""
        device = batch["input_ids"].device
        seen = {}
        hook = decoder.register_forward_hook(lambda m, a, out: seen.setdefault("out", out)) if decoder else None
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"), \
                    self.taps.capture() as cap:
                out = module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
                if not full:
                    cap.set_final(out.last_hidden_state)
        finally:
            if hook is not None:
                hook.remove()
        return cap.fused(), cap.final_hidden, seen.get("out")

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        decoder = self.decoder
        if self.decoder_only:
            try:
                fused, final, _ = self._run(decoder, batch, full=False)
                return {**batch, "fused": fused, "final_hidden": final}
            except TypeError:  # a decoder whose forward takes other arguments: keep the full forward
                self.decoder_only = False
        # The full forward calls the decoder: its output, seen through a hook, must be exactly what
        # lm_head receives for the shortcut to be taken from the next batch on.
        check = self.decoder_only is None and decoder is not None
        fused, final, seen = self._run(self.model, batch, full=True, decoder=decoder if check else None)
        if self.decoder_only is None:
            hidden = getattr(seen, "last_hidden_state", None)
            self.decoder_only = (hidden is not None and final is not None and hidden.shape == final.shape
                                 and torch.equal(hidden, final))
        return {**batch, "fused": fused, "final_hidden": final}


def cache_features(
    dataset, target_model, layer_ids: list[int], out_dir: str | Path, shard_size: int = 64,
    dtype: str = "bfloat16", batch_size: int = 8, target_name: str | None = None,
) -> Path:
    """Write the features of every row of a tokenised ``dataset`` (``input_ids``, ``loss_mask``) to ``out_dir``.

    Prints the number of bytes it will write and raises ValueError, naming ``out_dir``, when the free
    disk space cannot hold them. Rerunning after an interruption redoes only unfinished shards; it
    refuses (ValueError naming the field) when the existing cache was built for another target,
    other layer ids, dtype or shard size, or from different data. ``target_name`` defaults to the
    target's ``config._name_or_path``. Returns ``out_dir``.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {list(DTYPES)}, got {dtype!r}")
    if shard_size < 1 or batch_size < 1:
        raise ValueError(f"shard_size and batch_size must be positive, got {shard_size} and {batch_size}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    online = OnlineFeatures(target_model, layer_ids)
    hidden = target_model.get_input_embeddings().embedding_dim
    index = _new_index(dataset, target_model, target_name, online.layer_ids, dtype, hidden, shard_size)
    if (out_dir / INDEX).exists():
        index = _resume_index(out_dir, index)
    for tmp in out_dir.glob("*.tmp"):
        tmp.unlink()  # an interrupted write; its shard is not marked complete
    todo = [s for s in index["shards"] if not s["complete"]]
    need = sum(s["num_tokens"] for s in todo) * _bytes_per_token(hidden, dtype) + sum(
        8 * (s["num_sequences"] + 1) for s in todo
    )
    free = shutil.disk_usage(out_dir).free
    print(
        f"feature cache {out_dir}: {index['num_sequences']} sequences, {index['num_tokens']} tokens, "
        f"{len(index['shards'])} shards ({len(index['shards']) - len(todo)} already done); "
        f"writing {need} bytes ({need / 2**30:.2f} GiB), {free / 2**30:.2f} GiB free"
    )
    if need > free:
        raise DiskSpaceError(
            f"not enough free disk space in {out_dir}: the feature cache needs {need} bytes, {free} are free. "
            "Free space, choose another features.dir, a smaller features.dtype, or train online (features.dir: null)"
        )
    _write_index(out_dir, index)
    bar = tqdm(total=index["num_tokens"], initial=index["num_tokens"] - sum(s["num_tokens"] for s in todo),
               unit="tok", desc="caching target features")
    for shard in todo:
        tensors = _shard_tensors(dataset, online, shard, batch_size, DTYPES[dtype], bar)
        tmp = out_dir / (shard["file"] + ".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, out_dir / shard["file"])  # atomic: a shard file is always whole
        shard["complete"] = True
        _write_index(out_dir, index)
    bar.close()
    return out_dir


def _bytes_per_token(hidden: int, dtype: str) -> int:
    # fused (3H) + final_hidden (H) in dtype, int64 input id, bool loss mask
    return 4 * hidden * DTYPES[dtype].itemsize + 8 + 1


def _new_index(dataset, model, target_name, layer_ids, dtype, hidden, shard_size) -> dict:
    missing = {"input_ids", "loss_mask"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"cache_features: the dataset lacks columns {sorted(missing)}; tokenise it first")
    cfg = model.config
    shards = []
    # One arrow batch per shard: its sequence count, token count and a checksum of its ids and loss
    # mask, so that a resumed run can tell whether it is caching the same data.
    rows = dataset.select_columns(["input_ids", "loss_mask"]).with_format("arrow")
    for k, batch in enumerate(rows.iter(batch_size=shard_size)):
        ids, mask = _flat(batch.column("input_ids")), _flat(batch.column("loss_mask"))
        shards.append({
            "file": f"shard_{k:05d}.safetensors", "first_sequence": k * shard_size, "num_sequences": batch.num_rows,
            "num_tokens": int(ids.size), "crc32": zlib.crc32(mask.tobytes(), zlib.crc32(ids.tobytes())),
            "complete": False,
        })
    return {
        "format_version": FORMAT_VERSION,
        "target": target_name if target_name is not None else getattr(cfg, "_name_or_path", ""),
        "target_config": {
            k: getattr(cfg, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
        },
        "layer_ids": list(layer_ids),
        "dtype": dtype,
        "hidden_size": hidden,
        "shard_size": shard_size,
        "num_sequences": sum(s["num_sequences"] for s in shards),
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "shapes": {"input_ids": ["tokens"], "loss_mask": ["tokens"], "fused": ["tokens", 3 * hidden],
                   "final_hidden": ["tokens", hidden], "offsets": ["sequences + 1"]},
        "shards": shards,
    }


def _flat(column) -> np.ndarray:
    """An arrow list column as one int64 array over all its elements: ``[N_tokens]``."""
    return np.asarray(pc.list_flatten(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def _resume_index(out_dir: Path, new: dict) -> dict:
    old = _read_index(out_dir)
    for key in ("format_version", "target", "target_config", "layer_ids", "dtype", "hidden_size", "shard_size",
                "num_sequences", "num_tokens"):
        if old.get(key) != new[key]:
            raise ValueError(
                f"existing feature cache in {out_dir} was built with {key}={old.get(key)!r}, this run has "
                f"{key}={new[key]!r}; use another directory or delete this one"
            )
    for o, n in zip(old["shards"], new["shards"]):
        if {k: v for k, v in o.items() if k != "complete"} != {k: v for k, v in n.items() if k != "complete"}:
            raise ValueError(
                f"existing feature cache in {out_dir} was built from different data ({o['file']} holds other "
                "token ids or loss masks); use another directory or delete this one"
            )
        n["complete"] = o["complete"] and _shard_ok(out_dir / o["file"], n, new)
    return new


def _shard_ok(path: Path, shard: dict, index: dict) -> bool:
    """A finished shard is reused only if its file exists with the expected shapes and dtype."""
    if not path.exists():
        return False
    t, h = shard["num_tokens"], index["hidden_size"]
    expected = {"input_ids": [t], "loss_mask": [t], "fused": [t, 3 * h], "final_hidden": [t, h],
                "offsets": [shard["num_sequences"] + 1]}
    float_dtype = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[index["dtype"]]
    try:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != set(expected):
                return False
            for name, shape in expected.items():
                sl = f.get_slice(name)
                if list(sl.get_shape()) != shape:
                    return False
                if name in ("fused", "final_hidden") and sl.get_dtype() != float_dtype:
                    return False
    except (OSError, SafetensorError):  # unreadable header: a damaged file is redone, not trusted
        return False
    return True


def _shard_tensors(dataset, online: OnlineFeatures, shard: dict, batch_size: int, dtype, bar) -> dict:
    first, n = shard["first_sequence"], shard["num_sequences"]
    rows = dataset[first:first + n]
    # Batches of similar lengths (chat sequences vary ~10x: padding would be a third of the forwards);
    # the shard keeps the dataset's order.
    order = sorted(range(n), key=lambda j: -len(rows["input_ids"][j]))
    done: dict[int, dict] = {}
    for b in range(0, n, batch_size):
        picked = order[b: b + batch_size]
        batch = collate_tokens([{"input_ids": rows["input_ids"][j], "loss_mask": rows["loss_mask"][j]}
                                for j in picked])
        out = online(batch)
        for r, length in enumerate(batch["attention_mask"].sum(1).tolist()):
            # Drop the right padding: [T, ...] -> [length, ...]
            done[picked[r]] = {"input_ids": batch["input_ids"][r, :length],
                               "loss_mask": batch["loss_mask"][r, :length].bool(),
                               "fused": out["fused"][r, :length].to("cpu", dtype),
                               "final_hidden": out["final_hidden"][r, :length].to("cpu", dtype)}
        bar.update(int(batch["attention_mask"].sum()))
    tensors = {k: torch.cat([done[j][k] for j in range(n)]).contiguous()
               for k in ("input_ids", "loss_mask", "fused", "final_hidden")}
    lengths = [len(done[j]["input_ids"]) for j in range(n)]
    tensors["offsets"] = torch.tensor([0] + lengths, dtype=torch.long).cumsum(0)
    return tensors


def _read_index(out_dir: Path) -> dict:
    try:
        return json.loads((Path(out_dir) / INDEX).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read the feature cache index {Path(out_dir) / INDEX}: {e}") from None


def _write_index(out_dir: Path, index: dict) -> None:
    tmp = out_dir / (INDEX + ".tmp")
    tmp.write_text(json.dumps(index, indent=1))
    os.replace(tmp, out_dir / INDEX)


class FeatureDataset(torch.utils.data.Dataset):
    """The sequences of a finished feature cache, one dict per item (unpadded, ``T`` = its length):
    ``input_ids``/``loss_mask`` ``LongTensor[T]``, ``fused`` ``[T, 3H]``, ``final_hidden`` ``[T, H]`` in
    the cache dtype. ``layer_ids``, ``dtype``, ``hidden_size``, ``target`` describe the cache."""

    def __init__(self, cache_dir: str | Path):
        self.cache_dir = Path(cache_dir)
        index = _read_index(self.cache_dir)
        unfinished = [s["file"] for s in index["shards"] if not s["complete"]]
        if unfinished:
            raise ValueError(
                f"feature cache {self.cache_dir} is incomplete ({len(unfinished)} of {len(index['shards'])} shards "
                "missing); rerun cache_features (eaglehead prepare) to finish it"
            )
        self.index = index
        self.layer_ids, self.dtype = index["layer_ids"], index["dtype"]
        self.hidden_size, self.target = index["hidden_size"], index["target"]
        self._firsts = [s["first_sequence"] for s in index["shards"]]
        self._offsets: dict[int, list[int]] = {}
        self._handles: dict[int, object] = {}

    def __len__(self) -> int:
        return self.index["num_sequences"]

    def source_of(self, layer_ids: list[int]) -> str:
        """Which stored tensor holds the features of ``layer_ids``: ``"fused"`` when they are the cache's
        own ids; ``"final_hidden"`` when they are ``[L]`` alone (the final-normed state that enters
        ``lm_head``, which every cache stores), so an EAGLE-1 head trains from an EAGLE-3 head's cache.
        Raises ValueError naming the cache otherwise."""
        ids = [int(i) for i in layer_ids]
        if ids == list(self.layer_ids):
            return "fused"
        if ids == [self.index["target_config"]["num_hidden_layers"]]:
            return "final_hidden"
        raise ValueError(f"feature cache {self.cache_dir} holds layer ids {self.layer_ids} (and the final hidden "
                         f"state, id {self.index['target_config']['num_hidden_layers']}); the head reads {ids}: "
                         "rebuild the cache or set head.fused_layer_ids")

    def lengths(self) -> list[int]:
        """Token count of every sequence (reads each shard's ``offsets``), e.g. for length-grouped batching."""
        out = []
        for k in range(len(self._firsts)):
            off = self._shard_offsets(k)
            out.extend(b - a for a, b in itertools.pairwise(off))
        return out

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for a feature cache of {len(self)} sequences")
        k = bisect.bisect_right(self._firsts, i) - 1
        off = self._shard_offsets(k)
        a, b = off[i - self._firsts[k]], off[i - self._firsts[k] + 1]
        f = self._handle(k)
        return {
            "input_ids": f.get_slice("input_ids")[a:b].long(),
            "loss_mask": f.get_slice("loss_mask")[a:b].long(),
            "fused": f.get_slice("fused")[a:b],
            "final_hidden": f.get_slice("final_hidden")[a:b],
        }

    def _handle(self, k: int):
        if k not in self._handles:
            self._handles[k] = safe_open(str(self.cache_dir / self.index["shards"][k]["file"]), framework="pt")
        return self._handles[k]

    def _shard_offsets(self, k: int) -> list[int]:
        if k not in self._offsets:
            self._offsets[k] = self._handle(k).get_tensor("offsets").tolist()
        return self._offsets[k]

    def __getstate__(self):
        # safetensors handles cannot be pickled (DataLoader workers): each worker reopens its own.
        return {**self.__dict__, "_handles": {}}


def collate_features(items: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad ``FeatureDataset`` items to ``[B, T, ...]`` and add ``attention_mask``."""
    batch = collate_tokens(items, pad_token_id)
    width = batch["input_ids"].shape[1]
    for name in ("fused", "final_hidden"):
        ref = items[0][name]
        out = torch.zeros(len(items), width, ref.shape[-1], dtype=ref.dtype)
        for b, item in enumerate(items):
            out[b, : item[name].shape[0]] = item[name]
        batch[name] = out
    return batch
