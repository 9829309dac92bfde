"""Where jr2ray keeps its files: one home directory, set by JR2RAY_HOME (default ~/.jr2ray)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    p = Path(os.environ.get("JR2RAY_HOME", str(Path.home() / ".jr2ray"))).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p


def store_dir() -> Path:
    p = Path(os.environ.get("JR2RAY_STORE", str(home() / "runs"))).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p
