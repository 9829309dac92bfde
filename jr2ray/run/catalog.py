"""Which workflows exist, and where each one's machine is imported from. The one place workflows are looked up.

Three sources, in this order:
- the project's own `workflows/` package: `workflows/<name>.py` exporting `machine`;
- installed distributions that declare the `jr2ray.workflows` entry-point group, e.g. in their pyproject:
  `[project.entry-points."jr2ray.workflows"] greet = "mypkg.greet"` (or `"mypkg.flows:greet_machine"`);
- modules named by `jr2ray up --workflows pkg.module` (or JR2RAY_WORKFLOWS, comma-separated): a module exporting
  `machine` is one workflow named after its last component; a package is one workflow per public submodule.

A name must be a plain identifier and mean one thing: two sources offering the same name with different targets is
a `CatalogError`, named with both origins, rather than one silently winning.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict

from jr2ray.authoring import Jr2Machine
from jr2ray.settings import workflow_modules

from .errors import CatalogError, UnknownWorkflow

ENTRY_POINT_GROUP = "jr2ray.workflows"
PROJECT_PACKAGE = "workflows"
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")


class WorkflowEntry(BaseModel):
    """One workflow of the catalog: its name, what to import (`module` or `module:attr`), and where it came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    target: str
    origin: str


def _project() -> Iterator[WorkflowEntry]:
    try:
        package = importlib.import_module(PROJECT_PACKAGE)
    except ModuleNotFoundError:  # jr2ray installed without its example workflows
        return
    for m in pkgutil.iter_modules(package.__path__):
        if not m.name.startswith("_"):
            yield WorkflowEntry(name=m.name, target=f"{PROJECT_PACKAGE}.{m.name}", origin="workflows/")


def _entry_points() -> Iterator[WorkflowEntry]:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", None) or "an installed distribution"
        yield WorkflowEntry(name=ep.name, target=ep.value.replace(" ", ""),
                            origin=f"entry point {ENTRY_POINT_GROUP}:{ep.name} of {dist}")


def _module(spec: str) -> Iterator[WorkflowEntry]:
    """The workflows in one `--workflows` module (imported now: a module that does not import is an error here)."""
    if not _TARGET.match(spec):
        raise CatalogError(f"--workflows {spec!r} is not a module path (pkg.module or pkg.module:attr)")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CatalogError(f"workflow module {module_name!r} does not import: {exc}") from None
    origin = f"--workflows {spec}"
    if not attr and hasattr(module, "__path__") and not hasattr(module, "machine"):
        for m in pkgutil.iter_modules(module.__path__):
            if not m.name.startswith("_"):
                yield WorkflowEntry(name=m.name, target=f"{module_name}.{m.name}", origin=origin)
        return
    name = attr if attr and attr != "machine" else module_name.rpartition(".")[2]
    yield WorkflowEntry(name=name, target=spec, origin=origin)


def catalog(modules: Sequence[str] | None = None) -> dict[str, WorkflowEntry]:
    """Every workflow by name. `modules`: the `--workflows` modules (default: the settings' JR2RAY_WORKFLOWS)."""
    if modules is None:
        modules = workflow_modules()
    found: dict[str, WorkflowEntry] = {}
    sources: list[Iterator[WorkflowEntry]] = [_project(), _entry_points(), *(_module(m) for m in modules)]
    for source in sources:
        for entry in source:
            if not _NAME.match(entry.name):
                raise CatalogError(f"workflow name {entry.name!r} ({entry.origin}) is not a plain identifier")
            if not _TARGET.match(entry.target):
                raise CatalogError(f"workflow {entry.name!r} ({entry.origin}) names {entry.target!r}, which is not "
                                   f"a module path")
            seen = found.get(entry.name)
            if seen is not None and seen.target != entry.target:
                raise CatalogError(f"two workflows are named {entry.name!r}: {seen.target} ({seen.origin}) and "
                                   f"{entry.target} ({entry.origin})")
            found.setdefault(entry.name, entry)
    return found


def list_workflows(modules: Sequence[str] | None = None) -> list[str]:
    return sorted(catalog(modules))


def _import_machine(target: str, name: str) -> Jr2Machine:
    module_name, _, attr = target.partition(":")
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


def load_workflow(name: str, modules: Sequence[str] | None = None) -> Jr2Machine:
    """The machine of a catalog name, or of an explicit `pkg.module[:attr]` path (drivers and tests use those)."""
    if "." in name or ":" in name:
        return _import_machine(name, name)
    entry = catalog(modules).get(name)
    if entry is None:
        raise UnknownWorkflow(f"no workflow {name!r} (looked in {PROJECT_PACKAGE}/, the {ENTRY_POINT_GROUP} entry "
                              f"points and the --workflows modules)")
    return _import_machine(entry.target, name)


@functools.lru_cache(maxsize=256)
def _cached(name: str, modules: tuple[str, ...]) -> Jr2Machine:
    return load_workflow(name, list(modules))


def load_workflow_cached(name: str) -> Jr2Machine:
    """`load_workflow` memoised per process, for the hot paths (every start and every wake of a virtual run): a
    catalog lookup scans the installed entry points (about 20 ms), and a name's machine does not change while the
    `--workflows` modules (part of the key) do not."""
    return _cached(name, workflow_modules())
