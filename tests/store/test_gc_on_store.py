"""`jr2ray gc` purges finished runs past retention from whichever store JR2RAY_STORE names, with no instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def test_gc_purges_the_store_the_setting_names(backend: Any, store: Any, tmp_path: Path) -> None:
    now = time.time()
    for rid, status, age_days in [("old-done", "done", 8), ("new-done", "done", 1), ("old-active", "active", 30)]:
        j = store.open(rid, create=True)
        j.create(rid, "notes", "d", {"changes": "x"}, status=status)
        j.commit("d", status, None, [])
        j.close()
        backend.backdate(store, rid, now - age_days * 24 * 3600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JR2RAY_")}
    env.update(JR2RAY_HOME=str(tmp_path / "home"), JR2RAY_STORE=backend.location(), PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "jr2ray.cli", "gc", "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(res.stdout)["purged"] == ["old-done"]
    assert sorted(r.id for r in store.list_runs()) == ["new-done", "old-active"]
