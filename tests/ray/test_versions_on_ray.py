"""Workflow versions on a real local Ray: a run finishes on the code it started with.

A copy of `notes` (module `vnotes`, loaded through JR2RAY_WORKFLOWS) is edited under runs parked at its Gate, while
the pool's hosts stay warm. Old runs keep their version's texts, Menu bytes and states; new runs get the new code;
no host mixes them and no start is left `queued` or `drifted`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import stats as _stats
from ray_helpers import until as _until
from ray_helpers import virtual_client, workflow_package

pytestmark = pytest.mark.ray
GATE = "notes.writing.asking"
IDLE_S = 0.5
NOTES = Path(__file__).resolve().parents[2] / "workflows" / "notes.py"
OLD_ASK = "Ask the editor one question. The editor's reply is the answer to this call."
NEW_ASK = "Ask the editor exactly one short question; the editor's reply is what this call returns."


@pytest.fixture(scope="module")
def flows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A package of workflows the test edits: `vflows.vnotes`, a copy of notes."""
    with workflow_package(tmp_path_factory.mktemp("vflows_root"), "vflows", "vnotes", NOTES.read_text()) as path:
        yield path


@pytest.fixture(scope="module")
def vclient(ray_home: Path, flows: Path) -> Iterator[Any]:
    with virtual_client(ray_home, "versions", idle_deactivate_s=IDLE_S) as c:
        c.warm_pool(2)  # hosts stay warm across the edits: they must load by version, never by name
        yield c


def _answer_text(path: Path, prefix: str) -> None:
    """Set what the Gate's reply reads as (the `answer` text of the notes copy) to `<prefix>: <reply>`."""
    path.write_text(re.sub(r'answer\(lambda event: f"[^"]*"\)', f'answer(lambda event: f"{prefix}: {{event.text}}")',
                           path.read_text()))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _menu_bytes(run: Any) -> bytes:
    return json.dumps([m.model_dump(mode="json") for m in run.surface("writer").menu], sort_keys=True).encode()


def _parked(client: Any, run_id: str) -> bool:
    return run_id not in _stats(client)["live"]


def _start_entry(client: Any, run_id: str) -> dict[str, Any]:
    j = client.store.open(run_id)
    try:
        return j.ledger("start")[0].data
    finally:
        j.close()


def _ask_and_park(client: Any, run: Any, qid: str) -> Any:
    pending = run.pick_async("writer", "ask", {"question": "Which?"}, qid)
    _until("the Gate to open", lambda: run.gates())
    _until("the run to park at its Gate", lambda: _parked(client, run.id))
    return pending


def test_a_text_edit_reaches_only_new_runs(vclient: Any, flows: Path) -> None:
    old_runs = [vclient.start("vnotes", {"changes": f"fix {i}"}) for i in range(2)]
    old_menu = _menu_bytes(old_runs[0])
    assert OLD_ASK.encode() in old_menu
    pending = [_ask_and_park(vclient, r, f"ask-{r.id}") for r in old_runs]
    v_old = _start_entry(vclient, old_runs[0].id)["version"]

    _edit(flows, OLD_ASK, NEW_ASK)  # a text edit: the digest stays, the version does not
    _edit(flows, 'f"The editor replied: {event.text}"', 'f"Editor: {event.text}"')
    new = vclient.start("vnotes", {"changes": "fix new"})
    v_new = _start_entry(vclient, new.id)["version"]
    assert v_new != v_old and new.status().digest == old_runs[0].status().digest
    assert vclient.store.indexed(new.id).version == v_new and vclient.store.indexed(old_runs[0].id).version == v_old
    new_menu = _menu_bytes(new)
    assert NEW_ASK.encode() in new_menu and new_menu != old_menu

    for r, p in zip(old_runs, pending, strict=True):  # each old run wakes on a warm host, on its own version
        assert _menu_bytes(r) == old_menu
        r.send(GATE, "reply", {"text": "The crash fix."})
        assert p.result(60).answer == "The editor replied: The crash fix."
        assert _menu_bytes(r) == old_menu
        assert r.status().version == v_old
    np = _ask_and_park(vclient, new, "ask-new")
    new.send(GATE, "reply", {"text": "The crash fix."})
    assert np.result(60).answer == "Editor: The crash fix."
    for r in [*old_runs, new]:
        assert r.pick("writer", "done", {"notes": "# N"}).turn_complete
        assert r.wait(30).status == "done"


def test_a_structural_edit_leaves_old_runs_on_their_states(vclient: Any, flows: Path) -> None:
    old = vclient.start("vnotes", {"changes": "fix old"})
    pending = _ask_and_park(vclient, old, "ask-s-old")
    digest_before = old.status().digest
    # A state renamed and an unreachable final state added: the digest changes.
    _edit(flows, '"published": {"type": "final"},',
          '"shipped": {"type": "final"},\n        "never": {"type": "final"},')
    _edit(flows, '"target": "published"', '"target": "shipped"')
    new = vclient.start("vnotes", {"changes": "fix new"})
    assert new.status().digest != digest_before
    old.send(GATE, "reply", {"text": "ok"})
    pending.result(60)
    assert old.pick("writer", "done", {"notes": "# old"}).turn_complete
    assert old.wait(30).value == "published"  # its own version's state
    assert old.status().status == "done"
    np = _ask_and_park(vclient, new, "ask-s-new")
    new.send(GATE, "reply", {"text": "ok"})
    np.result(60)
    assert new.pick("writer", "done", {"notes": "# new"}).turn_complete
    assert new.wait(30).value == "shipped"


def test_edits_while_hosts_are_warm_never_mix_and_leave_none_queued(vclient: Any, flows: Path) -> None:
    """Starts race an edit: every run is on exactly one version, every one finishes, none is queued or drifted."""
    runs: list[tuple[Any, str]] = []
    _answer_text(flows, "Round 0")
    for i in range(6):
        runs += [(r, f"Round {i}") for r in vclient.start_many("vnotes", [{"changes": f"fix {i}-{k}"}
                                                                           for k in range(2)])]
        _answer_text(flows, f"Round {i + 1}")  # the next round's starts get the next text
    by_version: dict[str, list[Any]] = {}
    for r, _p in runs:
        by_version.setdefault(_start_entry(vclient, r.id)["version"], []).append(r)
    assert len(by_version) == 6
    for r, said in runs:  # woken in turn on the same warm hosts: each answers with the text it started with
        # A start is journaled `queued` and returns; the registry adopts it soon after (later on a loaded box).
        _until("the start to be adopted", lambda r=r: r.status().status == "active")
        p = _ask_and_park(vclient, r, f"ask-w-{r.id}")
        r.send(GATE, "reply", {"text": "ok"})
        assert p.result(60).answer == f"{said}: ok"
        assert r.pick("writer", "done", {"notes": "# n"}).turn_complete
    finals = [r.wait(60) for r, _p in runs]
    assert {f.status for f in finals} == {"done"}
    assert {f.version for f in finals} == set(by_version)
    assert not vclient.store.list_runs(status=["queued", "drifted"])


def _journals(client: Any, ids: list[str]) -> list[bytes]:
    from jr2ray.run.store import journal_bytes

    return [journal_bytes(client.store.path(r)) for r in ids]


def _migrate(client: Any, *argv: str) -> int:
    from jr2ray.cli.main import main

    os.environ["JR2RAY_STORE"] = client.store.location
    try:
        return main(["migrate", "vnotes", *argv])
    finally:
        os.environ.pop("JR2RAY_STORE", None)


def test_migrate_refuses_runs_that_do_not_map_and_moves_them_with_a_map(vclient: Any, flows: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    runs = [vclient.start("vnotes", {"changes": f"fix m{i}"}) for i in range(2)]
    pending = [_ask_and_park(vclient, r, f"ask-m-{r.id}") for r in runs]
    ids = [r.id for r in runs]
    old = vclient.store.indexed(ids[0]).version
    _edit(flows, '"asking": {', '"waiting_editor": {')  # the Gate's state renamed
    _edit(flows, '"target": "asking"', '"target": "waiting_editor"')
    before = _journals(vclient, ids)

    assert _migrate(vclient) == 1  # no map: the runs' state is not in the new version
    said = capsys.readouterr()
    assert all(r in said.err + said.out for r in ids) and "writing.asking" in said.err + said.out
    assert _journals(vclient, ids) == before  # refused: nothing written
    assert _migrate(vclient, "--map", "writing.asking=writing.waiting_editor", "--dry-run") == 0
    assert _journals(vclient, ids) == before

    assert _migrate(vclient, "--map", "writing.asking=writing.waiting_editor") == 0
    new = vclient.store.indexed(ids[0]).version
    assert new != old and all(vclient.store.indexed(r).version == new for r in ids)
    listed = {r["id"]: r for r in vclient.runs()}  # what GET /runs and `jr2ray runs` WHERE read, waking nothing
    for r in ids:
        assert listed[r]["presence"] == "parked" and listed[r]["waiting"]["gates"] == ["notes.writing.waiting_editor"]
    for r, p in zip(runs, pending, strict=True):
        j = vclient.store.open(r.id)
        try:
            moved = [e.data for e in j.ledger("migration")]
        finally:
            j.close()
        assert moved == [{"from": old, "to": new, "map": {"writing.asking": "writing.waiting_editor"},
                          "value": {"writing": "asking"}, "mapped": {"writing": "waiting_editor"}}]
        assert r.status().version == new and r.status().value == {"writing": "waiting_editor"}
        r.send("notes.writing.waiting_editor", "reply", {"text": "moved"})
        assert p.result(60).answer.endswith("moved")
        assert r.pick("writer", "done", {"notes": "# m"}).turn_complete
        assert r.wait(30).status == "done"


def test_migrate_without_a_map_restarts_the_open_turn_on_the_new_menu_with_a_notice(vclient: Any,
                                                                                  flows: Path) -> None:
    from jr2ray.menu.texts import WORKFLOW_MOVED

    run = vclient.start("vnotes", {"changes": "fix t"})
    old_menu = _menu_bytes(run)
    _until("the run to park at Rest", lambda: _parked(vclient, run.id))
    text = flows.read_text()
    marker = re.search(r'description="(Call this once[^"]*)"', text)
    assert marker is not None
    _edit(flows, marker.group(1), "Call this once you are done, with the notes.")
    assert _migrate(vclient) == 0
    surface = run.surface("writer")
    new_menu = _menu_bytes(run)
    assert new_menu != old_menu and b"Call this once you are done, with the notes." in new_menu
    assert any(WORKFLOW_MOVED in n for n in surface.notices)
    run.cancel()
