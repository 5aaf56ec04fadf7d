"""Chat JSONL files as a pretraining corpus: conversations read with located errors, split into train and
held-out by a hash of their ids, rendered with a chat template into one token stream and its loss mask, packed.

    rows = read_data(["chat.jsonl", "tasks.jsonl"])            # (file index, line, row)
    train, heldout = split_heldout(rows, 0.02, by_file=True)
    chunks, masks = pack(*encode(tokenizer, train, "assistant", paths), seq_len=256, what="train split")
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from eaglehead.builtin.jsonio import read_jsonl

from .core import pack_stream

ROLES = ("system", "user", "assistant")


def read_conversations(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """(line number, row) of every conversation in a chat JSONL file; blank lines are skipped.

    Raises ValueError naming ``file:line`` for a line that is not JSON or has no valid ``messages``.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data: {p}: no such file (expected a chat JSONL, one {{\"messages\": [...]}} per line)")
    rows = []
    for n, row in read_jsonl(p):
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{p}:{n}: expected an object with a non-empty 'messages' list, got {json.dumps(row)[:80]}")
        for k, m in enumerate(messages):
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise ValueError(f"{p}:{n}: messages[{k}]: expected {{'role': one of {', '.join(ROLES)}, "
                                 f"'content': a string}}, got {json.dumps(m)[:80]}")
        rows.append((n, row))
    if not rows:
        raise ValueError(f"{p}: no conversations (the file is empty)")
    return rows


def read_data(paths: list[str]) -> list[tuple[int, int, dict]]:
    """(file index in ``paths``, line number, row) of every conversation of every file, the files in order.

    Raises ValueError naming ``file:line`` (:func:`read_conversations`) for the first bad line.
    """
    return [(i, n, row) for i, path in enumerate(paths) for n, row in read_conversations(path)]


def split_heldout(rows: list[tuple[int, int, dict]], fraction: float, *, by_file: bool = False) -> tuple[list, list]:
    """(train, held-out) of ``rows`` ((file index, line, row), as :func:`read_data` gives): the ``fraction`` of
    conversations (at least one) with the smallest sha256 of their ``id`` (of their messages without one) is
    held out; both keep the files' order. ``by_file`` (several files, whose ids may repeat): the hashed name
    is ``"<file index>:<id>"``."""
    def key(file_index: int, row: dict) -> str:
        name = row["id"] if isinstance(row.get("id"), str) else json.dumps(row["messages"], sort_keys=True)
        return hashlib.sha256((f"{file_index}:{name}" if by_file else name).encode()).hexdigest()

    n_held = max(1, round(len(rows) * fraction))
    if n_held >= len(rows):
        raise ValueError(f"heldout_fraction: {len(rows)} conversation(s) cannot be split into train and held-out "
                         f"({n_held} held out at {fraction})")
    held = set(sorted(range(len(rows)), key=lambda i: key(rows[i][0], rows[i][2]))[:n_held])
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def encode(tokenizer, rows: list[tuple[int, int, dict]], loss_on: str, paths: list[str], progress: bool = False):
    """One token stream of the rendered conversations and its loss mask: (LongTensor[N], BoolTensor[N]).

    ``rows``: (index in ``paths``, line number, row); a conversation the chat template rejects is named by
    its own file and line."""
    import jinja2
    import torch
    from tqdm.auto import tqdm

    from eaglehead.train.data import tokenize_conversation

    ids, mask = [], []
    for file_index, line, row in tqdm(rows, desc="rendering", disable=not progress, mininterval=5):
        try:
            row_ids, row_mask = tokenize_conversation(tokenizer, row["messages"])
        except (ValueError, jinja2.TemplateError) as err:
            raise ValueError(f"{paths[file_index]}:{line}: {err}") from None
        ids += row_ids
        mask += [1] * len(row_ids) if loss_on == "all" else row_mask
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.bool)


def pack(ids, mask, seq_len: int, what: str):
    """Chunks of the stream (n, seq_len + 1) and of its mask; chunks without a loss target are dropped."""
    chunks = pack_stream(ids, seq_len, what, "seq_len")
    masks = pack_stream(mask, seq_len, what, "seq_len")
    keep = masks[:, 1:].any(1)  # position 0 of a chunk is never a target
    if not bool(keep.any()):
        raise ValueError(f"{what}: no chunk holds a loss token (no assistant turns?)")
    return chunks[keep], masks[keep]
