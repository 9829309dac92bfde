"""Workflow versions: a run finishes on the code it started with.

A version is the source of the module that defines a workflow, named by its sha256 and kept in the store
(`JournalStore.put_version`), so any process on any node loads the same code. A start records the version it was
validated against (in its journal's start entry and in the run index); every later activation, wake and restore
execs that stored source as a module of its own (`jr2ray_versions.<workflow>_<sha>`) and never reads the file again.
So an edit of any kind, a reworded description included, reaches only runs started after it, and a run's Menu bytes
never change mid-conversation.

How far a version reaches: the module alone. It may import the standard library, `jr2ray` and installed
distributions (code an operator changes only by an install, which is a deploy, not an edit). A module that imports
anything else (a sibling module, a relative import, a local package) cannot be captured whole, so it is refused at
load (`VersionUncapturable`) rather than pinned half.

A run whose version is not in the store (dropped from it) is `drifted` (`VersionMissing`): durable in its journal and
the index, readable, cancellable; it comes back once the version is recorded again (`revive_drifted`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jr2ray.authoring import Jr2Machine

from .errors import CatalogError, RunDrifted, RunError
from .models import RunStatus
from .store import JournalStore, LedgerKind, VersionRow

MODULE_PREFIX = "jr2ray_versions"
SHORT = 12  # hex digits shown for a version (the store keeps all 64)

_lock = threading.Lock()
_machines: dict[tuple[str, str], Jr2Machine] = {}  # (workflow, version) -> its machine, loaded once per process
_recorded: set[tuple[str, str, str]] = set()  # (store location, workflow, version) already put in that store


class VersionMissing(RunDrifted):
    """The run's version is not in the store: the run is `drifted` until the version is recorded again."""


class VersionUncapturable(CatalogError):
    """A workflow whose code is not all in its module: a version of it would pin only part of it."""


def short(version: str) -> str:
    return version[:SHORT] if version else "-"


@functools.cache
def _installed_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return [Path(r).resolve() for r in roots]


@functools.lru_cache(maxsize=1024)
def _allowed_import(top: str) -> bool:
    """Is this top-level module outside what an edit can change: stdlib, the runtime, or an installed distribution?
    (Where a top-level module comes from does not change while a process lives, so the answer is kept.)"""
    if top in sys.stdlib_module_names or top in ("jr2ray", "__future__"):
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if spec.origin in (None, "built-in", "frozen"):
        return spec.origin is not None
    origin = Path(spec.origin).resolve()
    return any(origin.is_relative_to(root) for root in _installed_roots())


def local_imports(source: str, filename: str = "<workflow>") -> list[str]:
    """The imports of a module's source that a version could not capture (relative ones, and local modules)."""
    bad: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                bad.append("." * node.level + (node.module or ""))
            elif node.module and not _allowed_import(node.module.partition(".")[0]):
                bad.append(node.module)
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if not _allowed_import(a.name.partition(".")[0])]
    return sorted(set(bad))


def capture(workflow: str, target: str) -> VersionRow:
    """The version a workflow has now: its module's source as the file says it at this moment (never the copy this
    process imported earlier), checked to hold all of the workflow's code."""
    module_name = target.partition(":")[0]
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise VersionUncapturable(f"workflow {workflow!r}: module {module_name!r} has no Python source file, so no "
                                  f"version of it can be kept")
    source = Path(spec.origin).read_text(encoding="utf-8")
    bad = local_imports(source, spec.origin)
    if bad:
        raise VersionUncapturable(
            f"workflow {workflow!r} ({spec.origin}) imports {', '.join(bad)}: local code a version cannot pin (a "
            f"version is its module alone). Move that code into the module, or install it as a distribution")
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return VersionRow(workflow=workflow, version=digest, target=target, source=source, created_at=time.time())


def exec_version(row: VersionRow) -> Jr2Machine:
    """Exec a version's stored source as a module of its own name and take its machine."""
    module_name, _, attr = row.target.partition(":")
    name = f"{MODULE_PREFIX}.{row.workflow}_{row.version[:16]}"
    mod = types.ModuleType(name)
    mod.__file__ = f"<{row.workflow} version {short(row.version)} of {module_name}>"
    sys.modules.setdefault(MODULE_PREFIX, types.ModuleType(MODULE_PREFIX))
    sys.modules[name] = mod  # pydantic and dataclasses resolve names through sys.modules
    try:
        exec(compile(row.source, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - the store's own recorded code
    except BaseException:
        sys.modules.pop(name, None)
        raise
    m: Any = getattr(mod, attr or "machine", None)
    if not isinstance(m, Jr2Machine):
        raise CatalogError(f"version {short(row.version)} of {row.workflow!r} exports no workflow machine as "
                           f"{attr or 'machine'!r}")
    return m


def record(store: JournalStore, row: VersionRow) -> None:
    """Put a version in the store once per process (it is content-addressed: a second put changes nothing)."""
    key = (store.location, row.workflow, row.version)
    if key not in _recorded:
        store.put_version(row)
        _recorded.add(key)


def current(store: JournalStore, workflow: str, modules: Sequence[str] | None = None) -> tuple[str, Jr2Machine]:
    """The version a new run of `workflow` gets now (recorded in the store) and its machine."""
    from .catalog import catalog

    entry = catalog(modules).get(workflow)
    if entry is None:
        from .catalog import load_workflow

        load_workflow(workflow, modules)  # raises UnknownWorkflow with the usual wording
        raise RunError(f"no workflow {workflow!r}")
    row = capture(workflow, entry.target)
    record(store, row)
    with _lock:
        got = _machines.get((workflow, row.version))
    if got is None:
        got = exec_version(row)
        with _lock:
            got = _machines.setdefault((workflow, row.version), got)
    return row.version, got


def load(store: JournalStore, workflow: str, version: str) -> Jr2Machine:
    """The machine of a run's own version, from the store. `VersionMissing` when the store no longer has it."""
    key = (workflow, version)
    with _lock:
        got = _machines.get(key)
    if got is not None:
        return got
    row = store.get_version(workflow, version)
    if row is None:
        raise VersionMissing(f"version {short(version)} of workflow {workflow!r} is not in the store; the run is "
                             f"drifted until it is recorded again")
    machine = exec_version(row)
    with _lock:
        return _machines.setdefault(key, machine)


def machine_for(store: JournalStore, workflow: str | Jr2Machine, version: str, run_id: str) -> Jr2Machine:
    """The machine a host runs `run_id` on: its own version; a run from before versions (no version in its start
    entry) loads the catalog's, as it did then. A version the store lacks marks the run drifted, durably."""
    if not isinstance(workflow, str):
        return workflow
    if not version:
        from .catalog import load_workflow_cached

        return load_workflow_cached(workflow)
    try:
        return load(store, workflow, version)
    except VersionMissing as exc:
        mark_drifted(store, run_id, str(exc))
        raise


def forget(workflow: str, version: str) -> None:
    """Drop a loaded version from this process (after gc, or in tests that drop it from the store)."""
    with _lock:
        _machines.pop((workflow, version), None)
        for key in [k for k in _recorded if k[1:] == (workflow, version)]:
            _recorded.discard(key)
    sys.modules.pop(f"{MODULE_PREFIX}.{workflow}_{version[:16]}", None)


# ---- drift: durable in the journal and the index --------------------------------------------------------------
def mark_drifted(store: JournalStore, run_id: str, reason: str) -> None:
    """Write `drifted` (with why) to the run's journal, and so to the index. Its snapshot and timer rows stay: the
    run keeps its last value and context, and its timers fire once it can be loaded again."""
    j = store.open(run_id)
    try:
        row = j.run()
        if row is None or row.status != "active":
            return
        j.commit(row.digest, "drifted", None, [(LedgerKind.STATUS.value, None,
                                                {"status": "drifted", "error": reason})])
    finally:
        j.close()


def end_drifted(store: JournalStore, run_id: str) -> bool:
    """Cancel a drifted run in its journal (it cannot be loaded to cancel itself). False if it is not drifted."""
    j = store.open(run_id)
    try:
        row = j.run()
        if row is None or row.status != "drifted":
            return False
        j.commit(row.digest, "cancelled", None, [(LedgerKind.STATUS.value, None, {"status": "cancelled"})])
        return True
    finally:
        j.close()


def cancel_drifted(store: JournalStore, run_id: str) -> RunStatus | None:
    """Cancel a run that is drifted and still cannot be loaded; None when it is not such a run (it is cancelled
    the usual way, by its host)."""
    line = store.indexed(run_id)
    if line is None or line.status != "drifted":
        return None
    if line.version and store.get_version(line.workflow, line.version) is not None:
        return None  # its version is back: a host loads it and cancels it
    if not end_drifted(store, run_id):
        return None
    return RunStatus(id=run_id, workflow=line.workflow, digest=line.digest, status="cancelled", version=line.version)


def revive_drifted(store: JournalStore) -> list[str]:
    """Drifted runs whose version is in the store again go back to `active` (journaled): their overdue timers
    then fire once, from the timer rows they kept. Returns their ids."""
    back: list[str] = []
    for line in store.list_runs(status="drifted"):
        if not line.version or store.get_version(line.workflow, line.version) is None:
            continue
        j = store.open(line.id)
        try:
            row = j.run()
            if row is None or row.status != "drifted":
                continue
            j.commit(row.digest, "active", None, [(LedgerKind.STATUS.value, None, {"status": "active",
                                                                                   "revived": line.version})])
        finally:
            j.close()
        back.append(line.id)
    return back


def version_of_journal(origin: dict[str, Any]) -> str:
    """The version a run's start entry names ("" for a run started before versions, or from a machine object)."""
    return str(origin.get("version") or "")
