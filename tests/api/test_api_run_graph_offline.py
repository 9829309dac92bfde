"""`GET /runs/{id}/graph.svg`, without Ray: a run is drawn from its own Workflow version, not the file as it is now.

A copy of notes is recorded as a version, a run is pinned to it, then the file gets a structural edit (the Gate's
state renamed) and a second run is pinned to the new version. The old run's graph still has the old state; the new
run's has the renamed one; a drifted run (its version gone from the store) is refused and its journal unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jr2ray.run import versions
from jr2ray.run.store import NewRun, Store, journal_bytes
from serve.api import ApiConfig, build_app
from serve.auth import ensure_token

from .api_helpers import TEST_HOSTS

NOTES = Path(__file__).resolve().parents[2] / "workflows" / "notes.py"


class StoreClient:
    """The API's client, reduced to what the graph route reads: the store."""

    virtual = True

    def __init__(self, store: Store) -> None:
        self.store = store


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, Store, Path]:
    pkg = tmp_path / "src" / "gflows"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "gnotes.py").write_text(NOTES.read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    token, _ = ensure_token(tmp_path)
    store = Store(tmp_path / "runs")
    app = build_app(ApiConfig(home=str(tmp_path), store=str(tmp_path / "runs"), launcher="none", hosts=TEST_HOSTS,
                              workflows=["gflows.gnotes"]))
    app.state.ctx._client = StoreClient(store)
    http = TestClient(app)
    http.headers["Authorization"] = f"Bearer {token}"
    return http, store, pkg / "gnotes.py"


def _start(store: Store, run_id: str, version: str, digest: str) -> None:
    store.create_runs([NewRun(id=run_id, workflow="gnotes", digest=digest, input={"changes": "x"},
                              status="active", version=version)])


def _paths(svg: str) -> set[str]:
    import re

    return set(re.findall(r'data-path="([^"]*)"', svg))


def test_a_run_is_drawn_from_its_own_version_after_a_structural_edit(world: Any) -> None:
    http, store, path = world
    old, m_old = versions.current(store, "gnotes", ["gflows.gnotes"])
    _start(store, "rold", old, m_old.digest)
    text = path.read_text()
    path.write_text(text.replace('"asking": {', '"waiting_editor": {').replace('"target": "asking"',
                                                                               '"target": "waiting_editor"'))
    new, m_new = versions.current(store, "gnotes", ["gflows.gnotes"])
    assert new != old
    _start(store, "rnew", new, m_new.digest)

    got_old = http.get("/runs/rold/graph.svg")
    got_new = http.get("/runs/rnew/graph.svg")
    assert got_old.status_code == 200 and got_old.headers["content-type"].startswith("image/svg+xml")
    assert "notes.writing.asking" in _paths(got_old.text) and "notes.writing.waiting_editor" not in _paths(got_old.text)
    assert "notes.writing.waiting_editor" in _paths(got_new.text) and "notes.writing.asking" not in _paths(got_new.text)


def test_a_drifted_or_unknown_run_gets_a_refusal_and_nothing_is_written(world: Any) -> None:
    http, store, _ = world
    _, m = versions.current(store, "gnotes", ["gflows.gnotes"])
    _start(store, "rgone", "f" * 64, m.digest)  # a version the store does not have
    before = journal_bytes(store.path("rgone"))
    got = http.get("/runs/rgone/graph.svg")
    assert got.status_code == 409 and "drifted" in got.json()["detail"]
    assert journal_bytes(store.path("rgone")) == before
    assert http.get("/runs/nosuch/graph.svg").status_code == 404
