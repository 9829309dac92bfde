"""The names of the run layer's detached Ray actors, in one place.

Why its own module: the host, the registry and the timer service each find the others by these names, so the names
sit below all three and none of them imports another just to spell one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["REGISTRY_NAME", "TIMERS_NAME", "registry_name"]

REGISTRY_NAME = "jr2ray:registry"
TIMERS_NAME = "jr2ray:timers"


def registry_name(store_dir: str) -> str:
    """The registry of one store (one per store in a namespace, so two stores on one Ray never mix runs)."""
    where = str(store_dir) if "://" in str(store_dir) else str(Path(store_dir).expanduser().resolve())
    return f"{REGISTRY_NAME}:{hashlib.sha1(where.encode()).hexdigest()[:12]}"
