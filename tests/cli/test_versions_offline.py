"""`jr2ray workflows`, `reload` and the version half of `gc`, straight from the store (no instance): versions are
listed with their runs by status, `reload` records the current one and says so, and gc drops only a version no run
uses, that is not current, past retention."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jr2ray.run import versions
from jr2ray.run.admission import enqueue_many
from jr2ray.run.store import Store, VersionRow


def _cli(home: Path, *argv: str) -> str:
    root = Path(__file__).resolve().parents[2]
    e = {**os.environ, "JR2RAY_HOME": str(home), "PYTHONPATH": str(root)}
    for k in ("JR2RAY_STORE", "JR2RAY_RETENTION_DAYS", "JR2RAY_WORKFLOWS"):
        e.pop(k, None)
    res = subprocess.run([sys.executable, "-m", "jr2ray.cli", *argv], env=e, capture_output=True, text=True,
                         timeout=120, check=True)
    return res.stdout + res.stderr


def _old(workflow: str, source: str, age_days: float) -> VersionRow:
    return VersionRow(workflow=workflow, version=hashlib.sha256(source.encode()).hexdigest(), target="m",
                      source=source, created_at=time.time() - age_days * 24 * 3600)


def test_workflows_reload_and_gc_of_versions(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    said = _cli(tmp_path, "reload")
    current, _m = versions.current(store, "notes")
    assert f"workflow notes: new runs start on version {current[:12]}" in said
    used, unused, young = _old("notes", "a = 1\n", 30), _old("notes", "a = 2\n", 30), _old("notes", "a = 3\n", 1)
    for v in (used, unused, young):
        store.put_version(v)
    enqueue_many(store, [("r1", {"workflow": "notes", "digest": "d", "version": used.version, "input": {},
                                 "env": {}, "launcher": None})])
    rows = json.loads(_cli(tmp_path, "workflows", "--json"))
    by = {r["version"]: r for r in rows if r["workflow"] == "notes"}
    assert by[used.version]["runs"] == {"queued": 1} and by[unused.version]["runs"] == {}
    assert by[current]["current"] and not by[used.version]["current"]
    assert f"{used.version[:12]}" in _cli(tmp_path, "workflows")
    assert "1 queued" in _cli(tmp_path, "workflows")
    gc = json.loads(_cli(tmp_path, "gc", "--json"))
    assert gc["versions_dropped"] == [f"notes@{unused.version[:12]}"]
    left = {v.version for v in store.versions("notes")}
    assert left == {used.version, young.version, current}
    store.drop_version("notes", used.version)
    assert "not in the store" in _cli(tmp_path, "reload")  # the queued run's version is gone: a warning


def test_migrate_of_a_workflow_the_catalog_lacks_is_a_usage_error_that_changes_nothing(tmp_path: Path) -> None:
    """Bad input gets a clear error and changes nothing: no traceback, exit 2, the run's journal byte-identical."""
    from jr2ray.run.store import journal_bytes

    store = Store(tmp_path / "runs")
    enqueue_many(store, [("r-kept", {"workflow": "notes", "input": {"changes": "fix"}})])
    before = journal_bytes(store.path("r-kept"))
    root = Path(__file__).resolve().parents[2]
    e = {**os.environ, "JR2RAY_HOME": str(tmp_path), "PYTHONPATH": str(root)}
    for k in ("JR2RAY_STORE", "JR2RAY_WORKFLOWS"):
        e.pop(k, None)
    res = subprocess.run([sys.executable, "-m", "jr2ray.cli", "migrate", "nosuchflow", "--to", "current"], env=e,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no workflow 'nosuchflow'" in res.stderr and "Traceback" not in res.stderr
    assert journal_bytes(store.path("r-kept")) == before
