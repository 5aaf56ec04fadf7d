"""A resumable evaluation: every measured call is journaled as it finishes, ``--resume`` replays them.

A full MT-bench run on a CPU takes hours (four methods x 160 turns x 128 tokens at ~80 ms a token),
longer than a working session. ``eaglehead eval`` therefore appends each *batch group* (one batch of
one repeat, every method of the serving state, measured back to back in this process) to
``OUT/calls.jsonl`` the moment the group finishes, and records what was asked in ``OUT/plan.json``.
``eaglehead eval ... --out OUT --resume`` replays the finished groups and measures only the rest:

* the plan must be the same one (prompts, methods, gammas, states, budget, seed, dtype, device, and
  the content of the target and the draft checkpoints); a difference is an error naming it;
* a group is the unit: methods are compared side by side within one launch, never across launches
  (a group cut by a kill is measured again, whole);
* warm-ups run again in every launch that still measures something;
* the report says how many calls each launch measured (``config.launches``), so a reader knows the
  timings span launches. Token outputs do not depend on the launch (same seeds).

Results round-trip exactly (JSON floats are repr-exact), so a resumed report equals the report an
uninterrupted run would have written from the same measurements.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from eaglehead.builtin.shipped import file_sha256
from eaglehead.builtin.typed_config import changed_fields, flatten
from eaglehead.decode.generate import GenerationResult, RoundRecord
from eaglehead.decode.tree_generate import TreeRoundRecord

from .engine_result import EngineResult

CALLS = "calls.jsonl"
PLAN = "plan.json"
Tag = tuple[str, float, int]  # (phase "tune"/"test", temperature, batch size)


def result_to_dict(res: GenerationResult) -> dict:
    return dataclasses.asdict(res)


def result_from_dict(d: dict) -> GenerationResult:
    """The result :func:`result_to_dict` wrote, as its own type: tree rounds (they carry ``depth``) come back
    as ``TreeRoundRecord``, a call another engine answered (``engine_stats``) as ``EngineResult``."""
    rounds = [TreeRoundRecord(**r) if "depth" in r else RoundRecord(**r) for r in d["rounds"]]
    kind = EngineResult if "engine_stats" in d else GenerationResult
    return kind(**{**d, "rounds": rounds})


def _group_key(tag: Tag, rep: int, batch: int) -> str:
    return json.dumps([tag[0], float(tag[1]), int(tag[2]), int(rep), int(batch)])


class Journal:
    """The calls of one evaluation's ``--out`` directory (see the module docstring)."""

    def __init__(self, out: Path, fingerprint: dict, resume: bool) -> None:
        fingerprint = json.loads(json.dumps(fingerprint))  # as it will read back: lists, not tuples
        self.path = Path(out) / CALLS
        self.plan_path = Path(out) / PLAN
        self.groups: dict[str, dict[tuple[str, int | None], dict]] = {}
        self.loads: dict[str, dict] = {}  # a load sweep's states (eval/load_sweep.py), by their key
        self.launches: list[dict] = []
        if resume:
            if not self.path.is_file() or not self.plan_path.is_file():
                raise ValueError(f"--resume: {str(out)!r} holds no journal of an earlier run ({CALLS} and {PLAN}); "
                                 "drop --resume to start one")
            saved = json.loads(self.plan_path.read_text())
            diff = [f"{key}: {a!r} then, {b!r} now"
                    for key, a, b in changed_fields(flatten(saved["fingerprint"]), flatten(fingerprint))]
            if diff:
                raise ValueError(f"--resume: {str(out)!r} was started with a different plan; "
                                 + "; ".join(diff[:6]) + ". Use a new --out, or drop --resume and pass --overwrite")
            self.launches = saved.get("launches", [])
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")
        self.launch = {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "calls_measured": 0, "calls_replayed": 0}
        self.launches.append(self.launch)
        self.fingerprint = fingerprint
        self._save_plan()

    def _load(self) -> None:
        lines = self.path.read_text().splitlines()
        for n, line in enumerate(lines):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                if n == len(lines) - 1:
                    break  # a write cut by a kill: that group is measured again
                raise ValueError(f"--resume: {self.path} line {n + 1} is not JSON; the journal is damaged") from None
            if "load" in rec:
                self.loads[rec["load"]] = rec["record"]
            else:
                self.groups[rec["group"]] = {(m, g): c for m, g, c in rec["calls"]}

    def _save_plan(self) -> None:
        tmp = self.plan_path.with_name(f".{PLAN}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "launches": self.launches}, indent=1))
        os.replace(tmp, self.plan_path)

    def replay(self, tag: Tag, rep: int, batch: int, keys: list) -> dict | None:
        """``{key: (GenerationResult, peak bytes)}`` of a finished group with exactly these keys, else None."""
        calls = self.groups.get(_group_key(tag, rep, batch))
        if calls is None or set(calls) != {tuple(k) for k in keys}:
            return None
        self.launch["calls_replayed"] += len(keys)
        return {tuple(k): (result_from_dict(c["result"]), int(c["peak"])) for k, c in calls.items()}

    def replay_load(self, key: str) -> dict | None:
        """The record of a load state (one method, draft length, load, budget, context bucket, split) an earlier
        launch measured, else None. A state is the unit: one cut by a kill is measured again, whole."""
        rec = self.loads.get(key)
        if rec is not None:
            self.launch["calls_replayed"] += 1
        return rec

    def record_load(self, key: str, record: dict) -> None:
        """Append a measured load state and flush it to disk."""
        self._append({"load": key, "record": record})
        self.loads[key] = record
        self.launch["calls_measured"] += 1
        self._save_plan()

    def _append(self, rec: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def record(self, tag: Tag, rep: int, batch: int, calls: dict) -> None:
        """Append a finished group ``{key: (GenerationResult, peak bytes)}`` and flush it to disk."""
        self._append({"group": _group_key(tag, rep, batch),
                      "calls": [[k[0], k[1], {"result": result_to_dict(r), "peak": int(p)}]
                                for k, (r, p) in calls.items()]})
        self.launch["calls_measured"] += len(calls)
        self._save_plan()


def plan_fingerprint(plan_dict: dict[str, Any], target_fingerprint: str, draft_hashes: dict[str, str]) -> dict:
    """What must not change between launches of one resumable evaluation."""
    keep = {k: v for k, v in plan_dict.items()
            if k not in ("out", "overwrite", "resume", "report_to", "wandb_project")}
    return {"plan": keep, "target": target_fingerprint, "drafts": draft_hashes}


def path_digest(path: str) -> str:
    """sha256 over a checkpoint's files (relative names and contents); a name that is not a local path
    (a hub id, a built-in) stands for itself."""
    p = Path(path)
    if p.is_file():
        return file_sha256(p)
    if not p.is_dir():
        return str(path)
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}:{file_sha256(f)}\n".encode())
    return h.hexdigest()
