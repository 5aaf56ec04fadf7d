"""Text side of chat data the target writes itself: seed prompts, cleaning, de-duplication, the
benchmark-overlap filter and resumable JSONL shards. The generation side (sampling the target) is in
``eaglehead.datagen.pipeline`` and ``eaglehead.datagen.stream``; nothing here runs a model.

Seed task prompts come from material that ships with Python: the docstrings of public standard-library
functions (``Write a Python function ...``, ``Explain ...``) and the reference sections of
``pydoc_data.topics``. User turns sampled from the target's own chat template (Magpie) are cleaned by
:func:`clean_user_turn`. Every prompt is normalised (:func:`normalise`) and kept once; a prompt that
shares a word n-gram with a benchmark question (MT-bench, HumanEval) is removed and counted, so the
head is never trained on the text it is measured on.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

_WORD = re.compile(r"[a-z0-9]+")
_SPACE = re.compile(r"\s+")


# ------------------------------------------------------------------------------------ normalising

def normalise(text: str) -> str:
    """Lower case, whitespace collapsed: the key for exact de-duplication."""
    return _SPACE.sub(" ", text.strip().lower())


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Word ``n``-grams of ``text``; a text shorter than ``n`` words is one gram of all its words."""
    w = words(text)
    if not w:
        return set()
    if len(w) < n:
        return {tuple(w)}
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


class OverlapFilter:
    """Finds prompts that share a word ``n``-gram with any text of the named benchmarks."""

    def __init__(self, benchmarks: dict[str, Iterable[str]], n: int = 8):
        if n < 1:
            raise ValueError(f"overlap n-gram size must be >= 1, got {n}")
        self.n = n
        self.grams: dict[tuple[str, ...], str] = {}
        for name, texts in benchmarks.items():
            for text in texts:
                for g in ngrams(text, n):
                    self.grams.setdefault(g, name)
        # Benchmark texts shorter than n words are single grams of their own length: look those up too.
        self.lengths = sorted({len(g) for g in self.grams} | {n})

    def hit(self, text: str) -> str | None:
        """The benchmark ``text`` overlaps with, or ``None``."""
        w = words(text)
        for k in self.lengths:
            for i in range(len(w) - k + 1):
                hit = self.grams.get(tuple(w[i:i + k]))
                if hit is not None:
                    return hit
        return None


def clean_user_turn(text: str, *, min_chars: int = 12, max_chars: int = 1500) -> str | None:
    """A sampled user turn worth keeping, stripped, or ``None``.

    Rejects turns that are too short or long, mostly non-ASCII, or degenerate: one word making up over
    a quarter of a turn of 12+ words, or the same line repeated (a small model's usual failure).
    """
    text = text.strip()
    if not (min_chars <= len(text) <= max_chars):
        return None
    if sum(c.isascii() for c in text) < 0.9 * len(text):
        return None
    w = words(text)
    if len(w) < 3:
        return None
    if len(w) >= 12 and Counter(w).most_common(1)[0][1] > len(w) / 4:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 3 and len(set(lines)) < len(lines) / 2:
        return None
    return text


def dedupe(prompts: Iterable[dict]) -> tuple[list[dict], int]:
    """Keep the first prompt of each normalised text; return ``(kept, dropped)``."""
    seen: set[str] = set()
    kept, dropped = [], 0
    for p in prompts:
        key = normalise(p["prompt"])
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        kept.append(p)
    return kept, dropped


# ---------------------------------------------------------------------------------- seed prompts

def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _public_functions(path: Path) -> Iterator[tuple[str, str, str]]:
    """``(name, signature, docstring)`` of documented public top-level functions in one file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc and len(doc.split()) >= 6:
                yield node.name, ast.unparse(node.args), doc


STDLIB_TEMPLATES = (
    "Write a Python function `{name}({args})` that does the following:\n\n{doc}",
    "Explain what the Python standard library function `{module}.{name}` does and give a short example of "
    "how to use it. Its documentation says:\n\n{doc}",
    "I am reading the documentation of `{module}.{name}` in Python:\n\n{doc}\n\nCan you explain it in simpler "
    "words?",
)

TOPIC_TEMPLATES = (
    "Explain the following part of the Python language reference to a beginner, with an example:\n\n{text}",
    "Summarise this section of the Python documentation in a few sentences:\n\n{text}",
)


def stdlib_task_prompts(count: int, seed: int = 0) -> list[dict]:
    """Up to ``count`` prompts built from standard-library docstrings, chosen reproducibly."""
    root = _stdlib_dir()
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    files += sorted(p for d in ("json", "email", "http", "urllib", "collections", "concurrent", "logging",
                                "importlib", "asyncio", "xml/etree", "sqlite3", "unittest")
                    for p in (root / d).glob("*.py") if not p.name.startswith("_"))
    funcs = []
    for path in files:
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for name, args, doc in _public_functions(path):
            funcs.append((module, name, args, doc.split("\n\n")[0].strip()[:800]))
    rng = random.Random(seed)
    rng.shuffle(funcs)
    out = []
    for i, (module, name, args, doc) in enumerate(funcs[:count]):
        template = STDLIB_TEMPLATES[i % len(STDLIB_TEMPLATES)]
        out.append({"source": "stdlib", "prompt": template.format(module=module, name=name, args=args, doc=doc)})
    return out


def pydoc_topic_prompts(count: int, seed: int = 0, max_chars: int = 1200) -> list[dict]:
    """Up to ``count`` prompts from ``pydoc_data.topics`` sections (one section each, first paragraphs)."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    random.Random(seed).shuffle(names)
    out = []
    for i, name in enumerate(names[:count]):
        text = topics[name].strip()
        if len(text) > max_chars:
            text = text[:max_chars].rsplit("\n\n", 1)[0]
        template = TOPIC_TEMPLATES[i % len(TOPIC_TEMPLATES)]
        out.append({"source": "pydoc", "prompt": template.format(text=text)})
    return out


# ------------------------------------------------------------------------------------------ shards

def shard_path(directory: Path, stage: str, index: int) -> Path:
    return Path(directory) / f"{stage}-{index:05d}.jsonl"


def read_shard(path: Path) -> list[dict] | None:
    """A finished shard's rows, or ``None`` when the shard does not exist yet."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_shard(path: Path, rows: list[dict]) -> None:
    """Write atomically: a shard file either holds all its rows or does not exist."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def record_path(shard: Path) -> Path:
    """Where a shard written by a serving engine keeps its record (engine, server version, model file sha256):
    ``answer-00003.jsonl`` -> ``answer-00003.engine.json``. Shards of the in-process sampler have none."""
    shard = Path(shard)
    return shard.with_name(shard.name.removesuffix(".jsonl") + ".engine.json")


def write_record(shard: Path, record: dict) -> None:
    """Write a shard's record atomically; done before the shard itself, so a finished shard always has one."""
    path = record_path(shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_record(shard: Path) -> dict | None:
    """A shard's record, or ``None`` (a shard written in process by the torch sampler)."""
    path = record_path(shard)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def shard_seed(seed: int, stage: str, index: int) -> int:
    """An independent, reproducible seed per (run seed, stage, shard)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{stage}:{index}".encode()).digest()[:8], "little") >> 1
