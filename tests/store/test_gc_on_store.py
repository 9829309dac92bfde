"""`jr2ray gc` purges finished runs past retention from whichever store JR2RAY_STORE names, with no instance.

The command runs in this process (its `main`), so a store only this process holds (`memory://`) is served too: gc
reaches it through the store seam alone, like any other."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from jr2ray.cli import main


def test_gc_purges_the_store_the_setting_names(backend: Any, store: Any, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    for rid, status, age_days in [("old-done", "done", 8), ("new-done", "done", 1), ("old-active", "active", 30)]:
        j = store.open(rid, create=True)
        j.create(rid, "notes", "d", {"changes": "x"}, status=status)
        j.commit("d", status, None, [])
        j.close()
        backend.backdate(store, rid, now - age_days * 24 * 3600)
    for name in [k for k in os.environ if k.startswith("JR2RAY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JR2RAY_STORE", backend.location())
    assert main(["gc", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["purged"] == ["old-done"]
    assert sorted(r.id for r in store.list_runs()) == ["new-done", "old-active"]
    assert not (tmp_path / "home" / "instance.json").exists()
