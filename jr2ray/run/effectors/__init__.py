"""Effectors: how the Run performs each Effect kind (a subprocess, an HTTP call...), at most once.

Not to be confused with `jr2ray.chart.effects`, the pure transition's outputs. The built-in kinds register on
import; a new kind is one module that calls `register` (see registry.py).
"""

from . import command, http  # noqa: F401  (each registers its kind)
from .registry import Effector, UnknownEffectKind, effector_for, register, registered_kinds, resolve_value

__all__ = ["Effector", "UnknownEffectKind", "effector_for", "register", "registered_kinds", "resolve_value"]
