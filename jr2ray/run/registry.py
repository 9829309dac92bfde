"""Workflows are found by name: `workflows/<name>.py` exporting `machine`, or a `module:attribute` path."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from jr2ray.authoring import Jr2Machine

from .errors import UnknownWorkflow


def load_workflow(name: str) -> Jr2Machine:
    module_name, _, attr = name.partition(":")
    if "." not in module_name and not attr:
        module_name = f"workflows.{module_name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name)):
            raise UnknownWorkflow(f"no workflow {name!r} (looked for module {module_name!r})") from None
        raise
    m: Any = getattr(module, attr or "machine", None)
    if not isinstance(m, Jr2Machine):
        raise UnknownWorkflow(f"{module_name!r} exports no workflow machine as {attr or 'machine'!r}")
    return m


def list_workflows() -> list[str]:
    import workflows

    return sorted(m.name for m in pkgutil.iter_modules(workflows.__path__) if not m.name.startswith("_"))
