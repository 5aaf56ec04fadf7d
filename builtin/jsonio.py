"""JSON and JSONL files read with errors that say where: ``file``, ``file:line`` and the parser's column.

    record = read_json(path)                      # ValueError: "<path>: not valid JSON (... at line 3, column 7)"
    for line, row in read_jsonl(path): ...        # ValueError: "<path>:12: not valid JSON (... at column 5)"
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: str | os.PathLike, *, expect: type | None = None) -> Any:
    """The JSON value in ``path``; ``expect`` (``dict``, ``list``) also checks its type.

    A missing file, text that is not UTF-8, invalid JSON or a value of another type is a ``ValueError`` naming
    the file (and, for invalid JSON, the line and column)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    try:
        value = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{p}: not UTF-8 text ({err})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{p}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    if expect is not None and not isinstance(value, expect):
        raise ValueError(f"{p}: expected a JSON {_KIND.get(expect, expect.__name__)}, got {type(value).__name__}")
    return value


def read_jsonl(path: str | os.PathLike) -> list[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line of ``path``, in order.

    A missing file, text that is not UTF-8 or a line that is not JSON is a ``ValueError`` naming the file
    (``file:line`` and the column for a bad line). Checking each value's shape is the caller's job."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    try:
        # split on "\n" only: str.splitlines would also cut at U+2028 and other separators that JSON strings may hold
        lines = p.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{p}: not UTF-8 text ({err})") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as err:
            raise ValueError(f"{p}:{n}: not valid JSON ({err.msg} at column {err.colno})") from None
    return rows


_KIND = {dict: "object", list: "array"}
