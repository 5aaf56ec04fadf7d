"""The built-in corpus: the Python standard library of the running interpreter, split by file.

Every machine has it: the ``*.py`` files of the running Python's ``Lib/`` (without ``test/``,
``tests/``, ``idle_test/``, ``idlelib/``, ``site-packages/``, ``__pycache__``) plus each entry of
``pydoc_data.topics.topics`` as its own file ``pydoc:<name>``. Three kinds of file are left out on
purpose: ``pydoc_data/topics.py`` (it holds all the topic prose again, so a held-out topic would leak
into training through it), the codec tables in ``encodings/`` (files defining ``decoding_table`` or
``decoding_map``: lines of ``'\\x00'  # 0x00`` that would teach tables and flatter any drafter), and
platform build data (``_sysconfigdata*``, ``config-*``). A file is held out when the first 8 bytes of
``sha256(relative path)`` fall in the lowest 10 %: the decision depends only on the path, so a file
held out here is held out on every Python version. File counts and sizes: BENCHMARKS.md.

A training config names the two parts as data sources: ``data.sources: [builtin:stdlib-train]`` or
``[builtin:stdlib-heldout]``; :func:`resolve_sources` writes each once to a JSONL file of plain-text
chunks of at most ``CHUNK_LINES`` lines in the cache and returns its path.

API::

    train_files, heldout_files = corpus_split()          # lists of (file id, text)
    corpus_fingerprint(train_files + heldout_files)      # sha256 of the ids and their contents
    heldout_excerpts(360)                                # (file id, excerpt) prompts never trained on
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

from .paths import cache_root

HELDOUT_FRACTION = 0.1
STDLIB = {"builtin:stdlib-train": 0, "builtin:stdlib-heldout": 1}
CHUNK_LINES = 40
_EXCLUDED_DIRS = {"test", "tests", "idle_test", "idlelib", "site-packages", "__pycache__"}


def _is_excluded(rel: str, text: str) -> bool:
    parts = rel.split("/")
    if set(parts[:-1]) & _EXCLUDED_DIRS or parts[0].startswith("config-") or parts[-1].startswith("_sysconfigdata"):
        return True
    tables = "decoding_table = (" in text or "decoding_map" in text
    return rel == "pydoc_data/topics.py" or (parts[0] == "encodings" and tables)


def is_heldout(file_id: str) -> bool:
    """True when ``file_id`` belongs to the held-out part: a stable function of the id alone."""
    return int.from_bytes(hashlib.sha256(file_id.encode()).digest()[:8], "big") < HELDOUT_FRACTION * 2 ** 64


def corpus_files(stdlib: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """All corpus files as (id, text), sorted by id: stdlib sources by relative path, then ``pydoc:<topic>``."""
    import pydoc_data.topics

    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise ValueError(f"stdlib: expected a directory of Python sources, got {str(root)!r}")
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        # Bytes decoded as UTF-8 so the text does not depend on the locale; a few old files are Latin-1.
        text = path.read_bytes().decode("utf-8", errors="replace")
        if not _is_excluded(rel, text):
            files.append((rel, text))
    files.sort()
    files += sorted((f"pydoc:{name}", text) for name, text in pydoc_data.topics.topics.items())
    return files


def corpus_split(limit: int | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train_files, heldout_files), each a list of (id, text) sorted by id; ``limit`` keeps the first few of each."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive number of files or None, got {limit}")
    files = corpus_files()
    train = [f for f in files if not is_heldout(f[0])][:limit]
    heldout = [f for f in files if is_heldout(f[0])][:limit]
    return train, heldout


def heldout_excerpts(chars: int) -> list[tuple[str, str]]:
    """(file id, excerpt) of every held-out file with at least ``chars`` characters: ``chars`` characters
    from a third of the way in (inside the file, not only license headers), starting at a line."""
    out = []
    for file_id, text in corpus_split()[1]:
        body = text.lstrip()
        if len(body) < chars:
            continue
        start = len(body) // 3
        cut = body[start:start + chars]
        out.append((file_id, cut[cut.find("\n") + 1:] if "\n" in cut else cut))
    return out


def corpus_fingerprint(files: list[tuple[str, str]]) -> str:
    """sha256 over the sorted file ids and the sha256 of each file's text."""
    h = hashlib.sha256()
    for file_id, text in sorted(files):
        h.update(f"{file_id}\0{hashlib.sha256(text.encode()).hexdigest()}\n".encode())
    return h.hexdigest()


def chunk_file(text: str, lines: int = CHUNK_LINES) -> list[str]:
    """Split a file into consecutive pieces of at most ``lines`` lines (empty pieces dropped)."""
    rows = text.splitlines(keepends=True)
    return [c for c in ("".join(rows[i:i + lines]) for i in range(0, len(rows), lines)) if c.strip()]


def resolve_sources(sources: list[str], limit_files: int | None = None) -> list[str]:
    """``sources`` with each ``builtin:stdlib-*`` name replaced by its chunked JSONL file in the cache."""
    out = []
    for src in sources:
        if src not in STDLIB:
            out.append(src)
            continue
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
