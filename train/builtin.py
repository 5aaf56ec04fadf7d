"""Built-in names a config may use instead of paths, so the demo and smoke configs need no download.

* ``model.target: builtin:demo-target``: the shipped demo target (``eaglehead.demo_target``), copied to
  the user's cache and verified there; resolved to that directory.
* ``data.sources: [builtin:stdlib-train]`` / ``[builtin:stdlib-heldout]``: the Python standard
  library corpus split by file (the demo target's split: no held-out file is ever trained on), as
  plain-text chunks of at most ``CHUNK_LINES`` lines, written once to a JSONL file in the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

DEMO_TARGET = "builtin:demo-target"
STDLIB = {"builtin:stdlib-train": 0, "builtin:stdlib-heldout": 1}
CHUNK_LINES = 40


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eaglehead"


def resolve_target(name: str) -> str:
    if name != DEMO_TARGET:
        return name
    from eaglehead.demo_target import load_demo_target

    model, _, _ = load_demo_target()
    return model.config._name_or_path  # the verified cached copy


def chunk_file(text: str, lines: int = CHUNK_LINES) -> list[str]:
    """Split a file into consecutive pieces of at most ``lines`` lines (empty pieces dropped)."""
    rows = text.splitlines(keepends=True)
    return [c for c in ("".join(rows[i:i + lines]) for i in range(0, len(rows), lines)) if c.strip()]


def resolve_sources(sources: list[str], limit_files: int | None = None) -> list[str]:
    out = []
    for src in sources:
        if src not in STDLIB:
            out.append(src)
            continue
        from eaglehead.demo_target import corpus_fingerprint, corpus_split

        files = corpus_split()[STDLIB[src]]
        if limit_files is not None:
            files = files[:limit_files]
        key = hashlib.sha256(f"{corpus_fingerprint(files)}:{CHUNK_LINES}".encode()).hexdigest()[:16]
        path = cache_root() / "corpus" / f"{src.split(':')[1]}-{key}.jsonl"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            with tmp.open("w") as f:
                for file_id, text in files:
                    for chunk in chunk_file(text):
                        f.write(json.dumps({"text": chunk, "file": file_id}) + "\n")
            os.replace(tmp, path)
        out.append(str(path))
    return out
