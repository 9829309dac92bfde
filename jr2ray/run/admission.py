"""Admission's journal writes: a start is one journal write (the run, `queued`, with how it was started), and a
queued run is cancelled in its journal without ever taking a slot."""

from __future__ import annotations

from typing import Any

from .actor import journaled_env
from .catalog import load_workflow_cached
from .models import RunStatus
from .store import JournalStore, LedgerKind, NewRun


def enqueue(store: JournalStore, run_id: str, spec: dict[str, Any]) -> None:
    """Create the run's journal as `queued` (once: a retried start finds it and writes nothing)."""
    workflow = spec["workflow"]
    if "digest" in spec:  # the starter loaded the workflow already (the registry may not import its module)
        name, digest = str(workflow), str(spec["digest"])
    else:
        machine = load_workflow_cached(workflow) if isinstance(workflow, str) else workflow
        name, digest = (workflow if isinstance(workflow, str) else machine.id), machine.digest
    j = store.open(run_id, create=True)
    try:
        if j.run() is not None:
            return
        j.create(run_id, name, digest, spec.get("input"), status="queued")
        origin = {"env": journaled_env(spec.get("env")), "launcher": spec.get("launcher")}
        j.commit(digest, "queued", None, [(LedgerKind.START.value, None, origin)])
    finally:
        j.close()


def new_run(run_id: str, spec: dict[str, Any]) -> NewRun:
    """A start as the store writes it: the run, `queued`, with how it was started (its env without secrets)."""
    workflow = spec["workflow"]
    if "digest" in spec:
        name, digest = str(workflow), str(spec["digest"])
    else:
        machine = load_workflow_cached(workflow) if isinstance(workflow, str) else workflow
        name, digest = (workflow if isinstance(workflow, str) else machine.id), machine.digest
    origin = {"env": journaled_env(spec.get("env")), "launcher": spec.get("launcher")}
    return NewRun(id=run_id, workflow=name, digest=digest, input=spec.get("input"), status="queued",
                  entries=[(LedgerKind.START.value, None, origin)])


def enqueue_many(store: JournalStore, starts: list[tuple[str, dict[str, Any]]]) -> None:
    """Journal a batch of starts, `queued`, in as few transactions as the store allows (see `create_runs`)."""
    store.create_runs([new_run(rid, spec) for rid, spec in starts])


def cancel_queued(store: JournalStore, run_id: str) -> RunStatus:
    j = store.open(run_id)
    try:
        row = j.run()
        assert row is not None
        j.commit(row.digest, "cancelled", None, [(LedgerKind.STATUS.value, None, {"status": "cancelled"})])
        return RunStatus(id=run_id, workflow=row.workflow, digest=row.digest, status="cancelled")
    finally:
        j.close()
