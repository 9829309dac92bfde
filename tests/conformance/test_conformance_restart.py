"""A restarted Turn continues its conversation byte for byte (issue 12, case 9), on the real engine and journal.

The writer is played by the recording fake model through the real openai SDK, so the requests compared here are
the bodies a model server receives. A Harness "dies" by having its task cancelled: like a killed process, it then
journals nothing more. A fresh Harness for the same Turn takes the conversation back from the journal.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jr2ray
from conformance_fakes import FakeModelServer, Recorded, calls
from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.menu import texts
from jr2ray.run import Store
from workflows.notes import machine as notes

DOOR = {"changes": "fix: crash\nfeat: dark mode"}


def _launcher(llm: FakeModelServer) -> LocalTurnLauncher:
    return LocalTurnLauncher(ProviderConfig(local_base_url=llm.url, local_api_key="t", max_retries=0, timeout_s=10),
                             Limits(pick_retry_s=0.05))


async def _until(check, timeout: float = 20.0):  # noqa: ANN001, ANN202
    for _ in range(int(timeout / 0.02)):
        if got := check():
            return got
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def _crash(launcher: LocalTurnLauncher, iid: str) -> None:
    """The Harness of Turn `iid` goes away mid-Turn, and its Conversation with it."""
    task = launcher.tasks[iid]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    launcher.conversations.pop(launcher.turn_conversation[iid])


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _assert_continued(first: Recorded, again: Recorded, allowed: list[str]) -> None:
    """`again` sends the same tools block and the same messages as `first`, byte for byte on the wire, then the
    cut-off pick's call and its receipt, then the notice that the Turn restarted."""
    old = b'"messages":[' + b",".join(_compact(m) for m in first.messages)
    assert old + b"]" in first.raw, "the wire format is not the compact JSON this test rebuilds"
    assert old + b"," in again.raw, "the earlier messages are not a byte-identical prefix of the restarted request"
    tools = b'"tools":' + _compact(first.body["tools"])
    assert tools in first.raw and tools in again.raw, "the tools block changed"
    assert again.body["model"] == first.body["model"]
    rest = again.messages[len(first.messages):]
    assert [m["role"] for m in rest] == ["assistant", "tool", "user"]
    assert [c["function"]["name"] for c in rest[0]["tool_calls"]] == ["ask"]
    assert rest[1]["tool_call_id"] == rest[0]["tool_calls"][0]["id"]
    assert "The editor replied: The crash fix." in rest[1]["content"]
    assert rest[2]["content"] == texts.turn_restarted(allowed)


def _assert_cache_hits(rows: list[dict]) -> None:
    """The fake server counts the prompt bytes shared with the request before as cached (a prefix cache would):
    the restarted request reuses all of the first one's prompt but its closing brackets."""
    assert len(rows) == 2
    assert rows[1]["cached_tokens"] >= rows[0]["prompt_tokens"] - 1, "the restart lost the cached prefix"


def _admissions(store: Store, run_id: str) -> list[str]:
    return [e.data["name"] for e in store.open(run_id).ledger("admission")]


async def test_a_harness_that_dies_mid_turn_is_replaced_and_the_conversation_goes_on(
        llm: FakeModelServer, tmp_path: Path) -> None:
    llm.push(calls(("ask", {"question": "Which change matters most?"})),
             calls(("done", {"notes": "# Notes\n- the crash fix"})))
    store = Store(tmp_path / "runs")
    launcher = _launcher(llm)
    run = jr2ray.LocalRun(notes, DOOR, store=store, launcher=launcher)
    (gate,) = await _until(run.gates)  # the ask is outstanding: its receipt waits for the editor
    (iid,) = run.engine.turns
    await _crash(launcher, iid)
    launcher.start(run.engine.turns[iid].start)  # what RayTurnLauncher does when a HarnessActor dies
    await asyncio.sleep(0.3)  # the fresh Harness sends the ask again, with its delivery id, and waits on it
    run.send(gate.id, "reply", {"text": "The crash fix."})
    status = await run.wait(20)
    await launcher.settle()

    assert status.status == "done" and status.output == {"notes": "# Notes\n- the crash fix"}
    assert status.context["replies"] == 1
    assert _admissions(store, run.id) == ["ask", "reply", "done"], "a pick was applied twice"
    assert len(llm.requests) == 2  # the model was not asked again for what the journal already had
    _assert_continued(llm.requests[0], llm.requests[1], ["ask", "done"])
    _assert_cache_hits(run.telemetry())


async def test_a_run_restarted_mid_turn_relaunches_the_turn_on_the_same_conversation(
        llm: FakeModelServer, tmp_path: Path) -> None:
    llm.push(calls(("ask", {"question": "Which change matters most?"})),
             calls(("done", {"notes": "# Notes\n- the crash fix"})))
    store = Store(tmp_path / "runs")
    first = _launcher(llm)
    run = jr2ray.LocalRun(notes, DOOR, run_id="conv-run", store=store, launcher=first)
    await _until(run.gates)
    (iid,) = run.engine.turns
    await _crash(first, iid)  # the whole process goes: the Harness with it, the Run below it
    again_launcher = _launcher(llm)
    again = jr2ray.LocalRun(notes, DOOR, run_id="conv-run", store=store, launcher=again_launcher)
    (gate,) = await _until(again.gates)
    await asyncio.sleep(0.3)
    again.send(gate.id, "reply", {"text": "The crash fix."})
    status = await again.wait(20)
    await again_launcher.settle()

    assert status.status == "done" and status.context["replies"] == 1
    assert _admissions(store, again.id) == ["ask", "reply", "done"]
    assert len(llm.requests) == 2
    _assert_continued(llm.requests[0], llm.requests[1], ["ask", "done"])
    _assert_cache_hits(again.telemetry())  # the first request's row came back from the journal
    deliveries = [e.data["delivery_id"] for e in store.open(again.id).ledger("admission") if "iid" in e.data]
    assert len(set(deliveries)) == 2 and all(d.startswith("h0.") for d in deliveries)
