"""Where jr2ray keeps its files. The paths themselves are resolved by `jr2ray.settings.Settings`; this module only
keeps the run layer's old names for them."""

from __future__ import annotations

from pathlib import Path

from jr2ray.settings import Settings


def home(settings: Settings) -> Path:
    return settings.home_dir()


def store_dir(settings: Settings) -> Path:
    return settings.store_dir()
