"""The observe tier: a real `jr2ray up` scraped by a real Prometheus (Debian's `prometheus` package)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))  # up_instance: the shared `up` helpers
