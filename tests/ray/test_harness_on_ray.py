"""The whole Ray shape: a RunActor starts a HarnessActor per Turn, which talks to the model and picks back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from conformance_fakes import FakeModelServer, calls

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModelServer]:
    server = FakeModelServer()
    server.start()
    yield server
    server.stop()


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
