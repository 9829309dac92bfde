"""Which jr2ray code a process runs: a digest of the package's Python sources as they are on disk now.

`jr2ray up` records it in instance.json, and `connect()` compares its own with it. A driver whose code differs from
the code its instance was started with (an editable install edited since `up`, another checkout) calls hosts that
may not take its calls' arguments; a trial failed just so ("too many positional arguments", and runs woken once an
idle spell). A warning naming both digests says so at once. Pure: no import of the rest of jr2ray.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["code_digest"]


@functools.lru_cache(maxsize=4)
def code_digest(root: Path | None = None) -> str:
    """16 hex digits over every .py file under `root` (this package by default; path and bytes, in path order):
    the same code, the same digest, on any machine."""
    root = root or Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]
