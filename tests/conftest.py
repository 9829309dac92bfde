"""Shared by every tier: the recording fake model server lives in tests/conformance and serves other tiers too."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "conformance"))
