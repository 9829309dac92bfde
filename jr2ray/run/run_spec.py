"""What activating a run is built from: its start's spec read back from its journal (or, for a journal gone or
damaged, from the run index's line), and the pool of hosts it belongs to. Pure reads of the store: the registry and
the hosts both use them, and neither owns them."""

from __future__ import annotations

import json
from typing import Any

from .errors import RunCorrupt, RunLost, UnknownRun
from .store import Journal, JournalStore

__all__ = ["pool_key", "run_spec", "spec_and_journal"]


def pool_key(spec: dict[str, Any] | None) -> str:
    """Hosts are pooled by the env and launcher they were started with (a host's env is its process's)."""
    if spec is None:
        return ""
    return json.dumps({"env": spec.get("env") or {}, "launcher": spec.get("launcher")}, sort_keys=True)


def run_spec(store: JournalStore, run_id: str) -> dict[str, Any]:
    """What activating an existing run needs, from its journal: workflow, input and how it was started. A journal
    that is gone or damaged still activates, from the run index's line (the engine then says `lost`/`corrupt`)."""
    spec, j = spec_and_journal(store, run_id)
    if j is not None:
        j.close()
    return spec


def spec_and_journal(store: JournalStore, run_id: str) -> tuple[dict[str, Any], Journal | None]:
    """`run_spec`, and the journal it read, still open (an activation goes on with it: one open, not two)."""
    try:
        j = store.open(run_id)
    except (RunLost, RunCorrupt):
        line = store.indexed(run_id)
        if line is None:
            raise
        return {"workflow": line.workflow, "input": line.input, "env": {}, "launcher": None, "create": False,
                "version": line.version}, None
    try:
        row = j.run()
        origin = next((e.data for e in j.ledger("start")), {})
        moved = j.ledger("migration")  # a run moved on purpose runs on the version it was moved to
    except BaseException:
        j.close()
        raise
    if row is None:
        j.close()
        raise UnknownRun(f"run {run_id!r} has no journal row")
    return {"workflow": row.workflow, "input": row.input, "env": origin.get("env", {}),
            "launcher": origin.get("launcher"), "create": False,
            "version": moved[-1].data["to"] if moved else origin.get("version", "")}, j
