"""Kill a RunActor at each risky point; Ray restarts it and it resumes from its journal (R5).

Each test asserts on the journal (admissions, effect records) and on the file the deploy Effect appends to:
no pick, gate event or effect is lost or applied twice.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import ray

ENV = {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_DEPLOY_DRIVER": "external"}

pytestmark = pytest.mark.ray


def _kill(run) -> None:  # noqa: ANN001
    pid_before = ray.get(run.actor.pid.remote())
    ray.kill(run.actor, no_restart=False)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if ray.get(run.actor.pid.remote(), timeout=10) != pid_before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.2)
    raise AssertionError("the RunActor did not come back")


def _ledger(client, run_id, kind):  # noqa: ANN001
    j = client.store.open(run_id)
    try:
        return j.ledger(kind)
    finally:
        j.close()


def _wait(pred, timeout=20.0):  # noqa: ANN001
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _start(client, tmp_path: Path, **door):  # noqa: ANN001
    # The deploy Effect's file is confined to the run's workspace: <home>/workspaces/<run id>/deploy.log.
    run = client.start("deploy", {"log_path": "deploy.log", **door}, env=ENV)
    return run, Path(os.environ["JR2RAY_HOME"]) / "workspaces" / run.id / "deploy.log"


def test_kill_after_a_pick(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, _ = _start(client, tmp_path)
    r = run.pick("operator", "note", {"text": "changelog reviewed"})
    assert r.moved and not r.turn_complete
    _kill(run)
    status = run.status()
    assert status.value == {"planning": "idle"}
    assert status.context["notes"] == ["changelog reviewed"]
    assert [e.data["name"] for e in _ledger(client, run.id, "admission")] == ["note"]
    # The Turn came back at the same address, and the run goes on.
    assert run.surface("operator").allowed == ["deploy", "note"]
    run.cancel()


def test_kill_while_an_effect_runs(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, log = _start(client, tmp_path, deploy_seconds=3.0)
    ref = run.pick_async("operator", "deploy", {})
    _wait(lambda: _ledger(client, run.id, "effect_started"))
    _kill(run)
    try:  # the caller sees the crash, or the dying actor's last word; picks are never retried (D12)
        late = ray.get(ref, timeout=30)
        assert late.answer is None or "deploy finished" not in late.answer
    except ray.exceptions.RayActorError:
        pass
    status = _wait(lambda: (s := run.status()).value == {"planning": "idle"} and s)
    time.sleep(3.5)  # longer than the command would have run
    assert not log.exists() or log.read_text() == "", "the interrupted effect ran anyway"
    assert len(_ledger(client, run.id, "effect_started")) == 1, "the effect was started twice"
    assert status.context["deploys"] == 0
    # A fresh deploy pick runs the command exactly once more.
    again = run.pick("operator", "deploy", {})
    assert again.answer == "deploy finished: deployed"
    assert log.read_text() == "deployed\n"
    assert len(_ledger(client, run.id, "effect_started")) == 2
    run.cancel()


def test_kill_while_a_gate_is_open(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, log = _start(client, tmp_path, deploy_seconds=0.05, cooldown_ms=100)
    assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
    assert run.pick("operator", "submit", {}).turn_complete
    assert [g.id for g in run.gates()] == ["approval"]
    _kill(run)
    gates = run.gates()
    assert [g.id for g in gates] == ["approval"] and gates[0].accepts_now == ["approve", "reject"]
    run.send("approval", "approve", {"by": "ops"})
    assert run.wait(20).status == "done"
    assert [e.data["name"] for e in _ledger(client, run.id, "admission")] == ["deploy", "submit", "approve"]
    assert log.read_text() == "deployed\n"


def test_kill_while_an_after_timer_is_pending(client, tmp_path: Path) -> None:  # noqa: ANN001
    cooldown_s = 6.0  # long enough that a loaded CI box kills and restores well before the deadline
    run, log = _start(client, tmp_path, deploy_seconds=0.05, cooldown_ms=int(cooldown_s * 1000))
    run.pick("operator", "deploy", {})
    run.pick("operator", "submit", {})
    t0 = time.time()
    run.send("approval", "approve", {"by": "ops"})
    assert run.status().value == "cooldown"
    time.sleep(0.5)
    _kill(run)
    assert run.status().value == "cooldown"
    killed_at = time.time() - t0
    final = run.wait(60)
    elapsed = time.time() - t0
    assert final.status == "done" and final.value == "released"
    # It fired at its persisted deadline: not early (skipped), and not a full cooldown after the restart (from zero).
    assert cooldown_s - 0.1 <= elapsed < killed_at + cooldown_s
    assert log.read_text() == "deployed\n"
