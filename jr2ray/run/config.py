"""Where jr2ray keeps its files. The paths themselves are resolved by `jr2ray.settings.Settings`; this module only
keeps the run layer's old names for them."""

from __future__ import annotations

from pathlib import Path

from jr2ray.settings import Settings, load_settings


def home(settings: Settings | None = None) -> Path:
    """Without `settings`, read now: the engine's Effects and Turns still call it so (see
    tests/unit/test_settings_entry_points.py, NOT_YET_PASSED_DOWN)."""
    return (settings or load_settings()).home_dir()


def store_dir(settings: Settings) -> Path:
    return settings.store_dir()
