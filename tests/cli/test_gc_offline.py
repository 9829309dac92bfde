"""`jr2ray gc` purges finished runs past the retention setting straight from the journal directory (no instance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jr2ray.run.store import Store


def _journal(store: Store, run_id: str, status: str, age_days: float) -> None:
    j = store.open(run_id, create=True)
    j.create(run_id, "notes", "d", {"changes": "x"}, status=status)
    j.commit("d", status, None, [])
    at = time.time() - age_days * 24 * 3600
    j._db.execute("UPDATE run SET updated_at = ?", (at,))
    j.close()


def _gc(home: Path, *extra: str, **env: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    e = {**os.environ, "JR2RAY_HOME": str(home), "PYTHONPATH": str(root), **env}
    e.pop("JR2RAY_STORE", None)
    e.pop("JR2RAY_RETENTION_DAYS", None)
    e.update(env)
    res = subprocess.run([sys.executable, "-m", "jr2ray.cli", "gc", "--json", *extra], env=e, capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(res.stdout)


def test_gc_purges_only_finished_runs_past_retention(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    _journal(store, "old-done", "done", 8)
    _journal(store, "old-cancelled", "cancelled", 30)
    _journal(store, "new-done", "done", 6)
    _journal(store, "old-active", "active", 30)
    got = _gc(tmp_path)
    assert got["retention_days"] == 7
    assert sorted(got["purged"]) == ["old-cancelled", "old-done"]
    assert store.run_ids() == ["new-done", "old-active"]
    assert _gc(tmp_path, JR2RAY_RETENTION_DAYS="5")["purged"] == ["new-done"]
    assert _gc(tmp_path, "--days", "0")["purged"] == []  # an active run is never purged, however old
    assert store.run_ids() == ["old-active"]
