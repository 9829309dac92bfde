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

import pytest

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


async def test_a_migrated_parked_run_says_where_it_waits_on_the_new_version_and_logs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run parked at its Gate, moved by `jr2ray migrate --map` to a version that renamed the Gate's state: its index
    line (what `jr2ray runs` WHERE and `GET /gates` read, without waking it) names the Gate it waits at now, with the
    new version's Allowed picks, and the migration is one `run.migrated` line in the instance's logs."""
    import asyncio
    import logging

    from jr2ray.cli.runlist import where_text
    from jr2ray.run import telemetry
    from jr2ray.run.engine import RunEngine
    from jr2ray.run.models import Standing, Waiting
    from jr2ray.settings import load_settings

    code = tmp_path / "code" / "mflows"
    code.mkdir(parents=True)
    (code / "__init__.py").write_text("")
    flow = code / "mnotes.py"
    flow.write_text((Path(__file__).resolve().parents[2] / "workflows" / "notes.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.setenv("JR2RAY_NOTES_DRIVER", "external")
    store = Store(tmp_path / "runs")
    old, machine = versions.current(store, "mnotes", ["mflows.mnotes"])

    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append  # type: ignore[method-assign]
    events = logging.getLogger(telemetry.LOGGER)
    events.addHandler(catch)
    try:
        run = RunEngine.from_store(machine, "mig-1", {"changes": "fix"}, store, create=True, workflow_name="mnotes",
                                   settings=load_settings())
        run.start()
        asking = asyncio.ensure_future(run.pick("writer", "ask", {"question": "Which?"}, "q-1"))
        for _ in range(200):
            if run.gates():
                break
            await asyncio.sleep(0.01)
        status = run.status()
        asking.cancel()
        telemetry.flush()  # the events' lines go through the logger on its writer thread, in batches
    finally:
        events.removeHandler(catch)
    opened = [r for r in seen if r.getMessage() == "gate.opened"]
    assert [r.fields["gate"] for r in opened] == ["notes.writing.asking"]  # type: ignore[attr-defined]
    assert [g.id for g in status.gates] == ["notes.writing.asking"]
    store.set_run_version("mig-1", old)
    standing = Standing(status=status, waiting=Waiting.of(status), parked=True)
    store.set_parked("mig-1", True, standing.model_dump(mode="json"))

    def waiting() -> dict[str, object] | None:  # the run's line as `GET /runs` (and so `jr2ray runs`) lists it
        return next(r.waiting for r in store.list_runs() if r.id == "mig-1")

    assert where_text({"presence": "parked", "waiting": waiting()}) == "gate notes.writing.asking"

    flow.write_text(flow.read_text().replace('"asking": {', '"waiting_editor": {')
                    .replace('"target": "asking"', '"target": "waiting_editor"'))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "JR2RAY_HOME": str(tmp_path), "PYTHONPATH": f"{tmp_path / 'code'}{os.pathsep}{root}",
           "JR2RAY_STORE": str(tmp_path / "runs"), "JR2RAY_WORKFLOWS": "mflows.mnotes"}
    res = subprocess.run([sys.executable, "-m", "jr2ray.cli", "migrate", "mnotes", "--map",
                          "writing.asking=writing.waiting_editor"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    line = store.indexed("mig-1")
    assert line is not None and line.version != old
    now = waiting()
    assert now is not None and now["gates"] == ["notes.writing.waiting_editor"]
    assert where_text({"presence": "parked", "waiting": now}) == "gate notes.writing.waiting_editor"
    moved = store.standing("mig-1")
    assert moved is not None and [g["id"] for g in moved["status"]["gates"]] == ["notes.writing.waiting_editor"]
    assert moved["status"]["value"] == {"writing": "waiting_editor"} and moved["status"]["version"] == line.version
    logs = [json.loads(x) for p in (tmp_path / "logs").glob("migrate-*.jsonl") for x in p.read_text().splitlines()]
    assert [(e["event"], e["run"], e["from_version"], e["version"]) for e in logs] == [
        ("run.migrated", "mig-1", old, line.version)]
