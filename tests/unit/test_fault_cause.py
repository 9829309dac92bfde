"""An Agent's fault keeps its cause: the example workflows' `failed` state puts the Harness's reason (carried on
`agent.fault`) into the run's error, so a run that faulted on an unreachable model says so."""

from __future__ import annotations

import asyncio

import pytest

from jr2ray.run import load_workflow
from jr2ray.run.local import LocalRun

CAUSE = "provider_error: Connection error (no model is served at http://127.0.0.1:8000/v1)"


@pytest.mark.parametrize(("workflow", "input_", "lead"), [
    ("notes", {"changes": "fix: x"}, "the Agent's Turn could not go on"),
    ("coder", {"task": "add a flag"}, "the coder's Turn could not go on"),
])
async def test_the_runs_error_names_the_faults_cause(workflow: str, input_: dict[str, str], lead: str) -> None:
    run = LocalRun(load_workflow(workflow), input_)
    (turn,) = [t for t in run.status().turns if t.active]
    run.fault(turn.iid, CAUSE)
    for _ in range(100):
        if run.status().status != "active":
            break
        await asyncio.sleep(0.02)
    status = run.status()
    assert status.status == "error"
    assert status.error == {"reason": f"{lead}: {CAUSE}"}
