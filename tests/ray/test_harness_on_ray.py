"""The whole Ray shape: a RunActor starts a HarnessActor per Turn, which talks to the model and picks back."""

from __future__ import annotations

import json
import time

import pytest

from conformance_fakes import FakeModelServer, calls

pytestmark = pytest.mark.ray


def test_notes_with_the_writer_as_a_harness_actor(client, model: FakeModelServer) -> None:  # noqa: ANN001
    import jr2ray

    model.reset()
    model.push(calls(("ask", {"question": "Which change matters most?"})),
               calls(("done", {"notes": "# Notes\n- crash fix"})))
    c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher")
    run = c.start("notes", {"changes": "fix: crash"},
                  env={"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url})
    deadline = time.time() + 60
    while not run.gates() and time.time() < deadline:
        time.sleep(0.1)
    (gate,) = run.gates()
    assert gate.meta == {"question": "Which change matters most?"}
    run.send(gate.id, "reply", {"text": "The crash fix."})
    status = run.wait(60)
    assert status.status == "done" and status.output == {"notes": "# Notes\n- crash fix"}
    assert len(model.requests) == 2
    assert len({json.dumps(r.tools) for r in model.requests}) == 1
    rows = run.telemetry()
    assert len(rows) == 2 and {r["slot"] for r in rows} == {"writer"}
    assert all(r["run_id"] == run.id for r in rows)


def _review(run, event: str, args: dict, deadline: float) -> None:  # noqa: ANN001
    while time.time() < deadline:
        gates = [g for g in run.gates() if event in g.accepts_now]
        if gates:
            run.send(gates[0].id, event, args)
            return
        time.sleep(0.1)
    raise AssertionError(f"the checker's Gate never took {event!r}")


def test_the_pick_that_ends_a_turn_reads_its_receipt_on_ray(client, model: FakeModelServer) -> None:  # noqa: ANN001
    """The Run stops the HarnessActor when `finish` ends the implement Turn; the model must still read finish's real
    receipt (the fix Turn continues that transcript), not "has no result: your turn ended while it ran"."""
    import jr2ray
    from jr2ray.menu import texts

    model.reset()
    model.push(calls(("run_tests", {})), calls(("finish", {"summary": "implemented"})),
               calls(("dispute", {"reason": "the notes are wrong"})))
    c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher")
    run = c.start("coder", {"task": "add a --version flag"},
                  env={"JR2RAY_CODER_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url})
    deadline = time.time() + 90
    _review(run, "request_changes", {"notes": "print the version to stdout"}, deadline)
    _review(run, "approve", {}, deadline)
    status = run.wait(60)
    assert status.status == "done" and status.value == "merged"
    assert len(model.requests) == 3
    results = [m["content"] for m in model.requests[2].messages if m["role"] == "tool"]
    assert len(results) == 2 and texts.interrupted("finish") not in results
    assert not any("has no result" in r for r in results)


def test_a_runaway_on_ray_is_routed_as_agent_fault(client, model: FakeModelServer) -> None:  # noqa: ANN001
    """Identical refused picks trip the runaway limit twice (one re-roll); the Run gets `agent.fault` and fails."""
    import jr2ray

    model.reset()
    model.push(*[calls(("done", {"notes": "same"})) for _ in range(8)])
    c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher")
    run = c.start("notes", {"changes": "x"},
                  env={"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url})
    status = run.wait(60)
    assert status.status == "error"
    assert len(model.requests) == 8
    history = run.history(0)
    faults = [e for e in history if e["kind"] == "admission" and e["data"].get("name") == "agent.fault"]
    assert len(faults) == 1 and faults[0]["data"]["reason"].startswith("runaway")
