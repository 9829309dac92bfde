"""The Harness against the real Run engine (LocalRun), not a scripted port: the notes workflow end to end.

The writer is played by the recording fake model; the editor answers the Gate from the test.
"""

from __future__ import annotations

import asyncio
import json
from itertools import pairwise

import jr2ray
from conformance_fakes import FakeModelServer, calls, text
from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.menu import texts
from jr2ray.run.models import RunStatus
from workflows.notes import machine as notes


def _launcher(llm: FakeModelServer, limits: Limits) -> LocalTurnLauncher:
    """The in-process Harness against the recording fake model, with no retries, so each request is one answer."""
    return LocalTurnLauncher(ProviderConfig(local_base_url=llm.url, local_api_key="t", max_retries=0, timeout_s=10),
                             limits)


async def _answer_gate_when_open(run: jr2ray.LocalRun, reply: str) -> None:
    for _ in range(400):
        gates = run.gates()
        if gates:
            run.send(gates[0].id, "reply", {"text": reply})
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the Gate never opened")


async def _notes_with_editor(llm: FakeModelServer, changes: str, reply: str) -> tuple[RunStatus, LocalTurnLauncher]:
    """Run notes to its end with the fake model as the writer and `reply` as the editor's answer to its Gate: the
    run's final status, and the launcher once every Harness it started has settled."""
    launcher = _launcher(llm, Limits())
    run = jr2ray.LocalRun(notes, {"changes": changes}, launcher=launcher)
    editor = asyncio.create_task(_answer_gate_when_open(run, reply))
    status = await run.wait(20)
    await editor
    await launcher.settle()
    return status, launcher


async def test_notes_end_to_end_on_the_real_engine(llm: FakeModelServer) -> None:
    llm.push(
        calls(("done", {"notes": "too early"})),  # not allowed yet: the guard on done is false
        calls(("ask", {"question": "Which change matters most?"})),
        calls(("done", {"notes": "# Notes\n- the crash fix"})),
    )
    status, _ = await _notes_with_editor(llm, "fix: crash\nfeat: dark mode", "The crash fix.")

    assert status.status == "done" and status.output == {"notes": "# Notes\n- the crash fix"}
    reqs = llm.requests
    assert len(reqs) == 3
    # One tools block, byte-identical on every request, and it is the Menu.
    tools = [json.dumps(r.tools, separators=(",", ":")) for r in reqs]
    assert len(set(tools)) == 1
    assert [t["function"]["name"] for t in reqs[0].tools] == ["ask", "done"]
    # Each request's messages are a prefix of the next's.
    for a, b in pairwise(reqs):
        assert b.messages[: len(a.messages)] == a.messages
    # The Turn part: the prompt, then "Allowed now" last.
    first_user = reqs[0].messages[1]["content"]
    assert first_user.startswith("Write the release notes")
    assert first_user.rstrip().endswith(texts.allowed_line(["ask"]).strip()) or "Allowed now: ask." in first_user
    # The early done got the correction, not a silent success.
    tool_results = [m for m in reqs[2].messages if m["role"] == "tool"]
    assert "not allowed" in tool_results[0]["content"] and "Do not repeat this call" in tool_results[0]["content"]
    assert "The editor replied: The crash fix." in tool_results[1]["content"]
    assert "done" in tool_results[1]["content"]


async def test_a_turn_without_picks_is_nudged_then_faults_into_failed(llm: FakeModelServer) -> None:
    llm.push(text("I will think about it."), text("Still thinking."), text("Done thinking."))
    launcher = _launcher(llm, Limits(rerolls=0))
    run = jr2ray.LocalRun(notes, {"changes": "x"}, launcher=launcher)
    status = await run.wait(20)
    await launcher.settle()
    # agent.fault routes to `failed`, whose fail() ends the run in error with its reason (A4), the fault's cause kept.
    assert status.status == "error"
    assert status.error == {"reason": "the Agent's Turn could not go on: no_signal: the model answered without a "
                                      "pick 3 times"}
    assert len(llm.requests) == 3  # the first answer plus exactly 2 nudges


async def _review(run: jr2ray.LocalRun, event: str, args: dict) -> None:  # noqa: ANN001
    for _ in range(600):
        gates = [g for g in run.gates() if event in g.accepts_now]
        if gates:
            run.send(gates[0].id, event, args)
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the checker's Gate never took {event!r}")


async def test_continue_spans_implement_and_fix_on_one_conversation(llm: FakeModelServer, tmp_path,  # noqa: ANN001
                                                                    monkeypatch) -> None:  # noqa: ANN001
    """The cross-state case of a fixed Menu (M2, H7): two states invoke the coder with continue; one conversation,
    one tools block."""
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    from workflows.coder import machine as coder

    llm.push(calls(("run_tests", {})), calls(("finish", {"summary": "implemented"})),
             calls(("dispute", {"reason": "the notes are wrong"})))
    launcher = _launcher(llm, Limits())
    run = jr2ray.LocalRun(coder, {"task": "add a --version flag"}, launcher=launcher)
    await _review(run, "request_changes", {"notes": "print the version to stdout"})
    await _review(run, "approve", {})
    status = await run.wait(20)
    await launcher.settle()
    assert status.status == "done" and status.value == "merged"
    reqs = llm.requests
    assert len(reqs) == 3
    assert len({json.dumps(r.tools) for r in reqs}) == 1, "one tools block across both states"
    assert len({r.messages[0]["content"] for r in reqs}) == 1, "one system prompt"
    names = [t["function"]["name"] for t in reqs[0].tools]
    assert names[:3] == ["dispute", "finish", "run_tests"]  # the Menu: the union over implement and fix
    for a, b in pairwise(reqs):
        assert b.messages[: len(a.messages)] == a.messages  # the fix Turn continues the implement Turn
    users = [m["content"] for m in reqs[2].messages if m["role"] == "user"]
    assert len(users) == 2 and users[1].startswith("The checker asked for changes")
    assert "Allowed now: dispute, finish, run_tests." in users[1]
    tool_results = [m["content"] for m in reqs[2].messages if m["role"] == "tool"]
    assert "tests ran" in tool_results[0]


# -- the end of a Turn: the final receipt and a fault are the Turn's own, not an abort -------------------------------


async def test_the_final_receipt_is_recorded_before_the_harness_stops(llm: FakeModelServer) -> None:
    """The `done` that ends the Turn gets its real receipt in the transcript; the Turn ends `complete`."""
    llm.push(calls(("ask", {"question": "Which change?"})), calls(("done", {"notes": "# Notes"})))
    status, launcher = await _notes_with_editor(llm, "fix: crash", "The crash.")
    assert status.status == "done"
    ((iid, result),) = launcher.results.items()
    assert result.outcome == "complete" and result.picks == 2
    (conv,) = launcher.conversations.values()
    last = conv.messages[-1]
    assert last.role == "tool" and last.content != texts.interrupted("done")
    assert "has no result" not in last.content
    assert [m.content for m in conv.messages if m.role == "tool"][-1] == last.content


async def test_a_runaway_faults_is_routed_as_agent_fault_and_ends_as_fault(llm: FakeModelServer) -> None:
    """Four identical refused picks trip the runaway limit: the Run sees `agent.fault`, the Turn ends `fault`."""
    llm.push(*[calls(("done", {"notes": "same"})) for _ in range(4)])
    launcher = _launcher(llm, Limits(rerolls=0))
    run = jr2ray.LocalRun(notes, {"changes": "x"}, launcher=launcher)
    status = await run.wait(20)
    await launcher.settle()
    assert status.status == "error"
    ((_, result),) = launcher.results.items()
    assert result.outcome == "fault" and result.reason is not None and result.reason.startswith("runaway")
    faults = [e for _, e in run.engine.history if e.kind == "admission" and e.data.get("name") == "agent.fault"]
    assert len(faults) == 1 and faults[0].data["reason"] == result.reason
