"""A results file of benchmark rows: each run of a benchmark appends its row, so earlier figures stay beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def append_row(out: Path, row: dict[str, Any]) -> None:
    """Append `row` to the JSON list in `out` (a new file holds just it)."""
    rows = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps([*rows, row], indent=1) + "\n")
