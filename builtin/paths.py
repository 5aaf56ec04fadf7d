"""Where eaglehead keeps what it builds once and reuses: ``$XDG_CACHE_HOME/eaglehead`` (default
``~/.cache/eaglehead``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eaglehead"
