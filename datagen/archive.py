"""Carry a data directory's finished shards between machines, compressed, and put them back.

A long data run (hours, several sessions) writes immutable shards into ``out_dir``; this copies each finished
shard (and its engine record) xz-compressed into an archive folder that can be committed or copied, and restores
them into an ``out_dir`` so the run resumes at the first missing shard (``python -m eaglehead.datagen`` reruns
skip every shard that exists). Each shard is packed once: a later ``pack`` adds only new shards, so a folder
committed after each session grows by the new shards alone.

    python -m eaglehead.datagen.archive pack runs/smollm2-135m-instruct/chat-large archive/chat-large
    python -m eaglehead.datagen.archive unpack archive/chat-large runs/smollm2-135m-instruct/chat-large

Nothing is overwritten: a shard that exists on both sides with other contents is an error naming both files
(shards of two different runs must not mix; the directory's ``config.json`` is compared the same way).
"""

from __future__ import annotations

import argparse
import lzma
import os
import re
import sys
from pathlib import Path

# What a data directory holds that is worth carrying: its shard-defining config and every finished shard (with the
# engine record a server-written shard has). conversations.jsonl and manifest.json are rebuilt by rerunning.
_SHARD = re.compile(r"^(?P<stage>[a-z0-9]+)-\d{5}(\.jsonl|\.engine\.json)$")


def carried_files(out_dir: Path) -> list[Path]:
    """Paths relative to ``out_dir`` of the files ``pack`` carries, in a stable order."""
    files = [Path("config.json")] if (out_dir / "config.json").is_file() else []
    for stage in sorted(p for p in out_dir.iterdir() if p.is_dir()):
        files += [f.relative_to(out_dir) for f in sorted(stage.iterdir())
                  if f.is_file() and (m := _SHARD.match(f.name)) and m["stage"] == stage.name]
    return files


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def pack(out_dir: str | Path, archive: str | Path) -> dict:
    """Copy each finished shard of ``out_dir`` not yet in ``archive`` there, as ``<file>.xz``.

    Returns ``{"added": n, "present": n}``. Raises ``ValueError`` when a shard already archived differs from the
    directory's (another run's shard: nothing is overwritten)."""
    src, dst = Path(out_dir), Path(archive)
    if not (src / "config.json").is_file():
        raise ValueError(f"{src}: not a data directory (no config.json); expected the out_dir of a data config")
    added = present = 0
    for rel in carried_files(src):
        data = (src / rel).read_bytes()
        target = dst / rel.parent / (rel.name + ".xz")
        if target.is_file():
            if lzma.decompress(target.read_bytes()) != data:
                raise ValueError(f"{target} holds another {rel} than {src / rel}: the archive belongs to another run "
                                 "(or the directory's shard was rewritten); use another archive folder")
            present += 1
            continue
        _write_atomic(target, lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        added += 1
    return {"added": added, "present": present}


def unpack(archive: str | Path, out_dir: str | Path) -> dict:
    """Restore every archived file missing from ``out_dir``; returns ``{"restored": n, "present": n}``.

    Raises ``ValueError`` when a file exists on both sides with other contents (the directory belongs to another
    run or config): nothing in ``out_dir`` is overwritten."""
    src, dst = Path(archive), Path(out_dir)
    packed = sorted(src.rglob("*.xz"))
    if not packed:
        raise ValueError(f"{src}: no archived shards (*.xz) found; expected a folder written by 'pack'")
    restored = present = 0
    for path in packed:
        rel = path.relative_to(src)
        target = dst / rel.parent / rel.name.removesuffix(".xz")
        data = lzma.decompress(path.read_bytes())
        if target.is_file():
            if target.read_bytes() != data:
                raise ValueError(f"{target} differs from the archived {path}: this directory belongs to another run "
                                 "or config; restore into an empty out_dir")
            present += 1
            continue
        _write_atomic(target, data)
        restored += 1
    return {"restored": restored, "present": present}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eaglehead.datagen.archive", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="add a data directory's new finished shards to an archive folder")
    p.add_argument("out_dir")
    p.add_argument("archive")
    u = sub.add_parser("unpack", help="restore an archive folder's shards into a data directory")
    u.add_argument("archive")
    u.add_argument("out_dir")
    args = parser.parse_args(argv)
    try:
        result = pack(args.out_dir, args.archive) if args.command == "pack" else unpack(args.archive, args.out_dir)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
