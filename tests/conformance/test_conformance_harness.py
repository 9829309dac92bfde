"""The Harness against a recording OpenAI-compatible server, through the real openai SDK (H1-H12)."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance_fakes import FakeModelServer, NotesPort, Recorded, calls, text
from jr2ray.harness import Conversation, TurnSpec
from jr2ray.menu import texts

MakeConv = Callable[..., Conversation]
MakeSpec = Callable[..., TurnSpec]

CORRECTION_DONE = (
    "done is not allowed in the workflow's current state, whatever its arguments. Your turn is not over. "
    "Do not repeat this call — pick one of the allowed tools."
)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def assert_prefix_chain(requests: list[Recorded]) -> None:
    """Each request's messages are a byte prefix of the next's (H6): same entries, same bytes, only appended."""
    for before, after in zip(requests, requests[1:], strict=False):
        assert len(after.messages) > len(before.messages)
        head = dumps(before.messages)[:-1]
        assert dumps(after.messages).startswith(head)
        for a, b in zip(before.messages, after.messages[: len(before.messages)], strict=True):
            assert dumps(a) == dumps(b)


def tool_results(req: Recorded) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "tool"]


# -- H1/H2: the tools block and the system prompt ---------------------------------------------------------------------


async def test_two_turns_with_different_allowed_picks_send_identical_tools_and_system(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    first = NotesPort()
    llm.push(
        calls(("done", {"notes": "x"})), calls(("ask", {"question": "Which date?"})), calls(("done", {"notes": "n"}))
    )
    r1 = await conversation(first).run_turn(spec())
    assert r1.outcome == "complete"
    second = NotesPort()
    second.replies = 1
    llm.push(calls(("done", {"notes": "n"})))
    r2 = await conversation(second).run_turn(spec(iid="run-2/writer", run_id="run-2"))
    assert r2.outcome == "complete"

    reqs = llm.requests
    assert len(reqs) == 4
    assert reqs[0].messages[1]["content"].endswith("Allowed now: ask.\n</jr2-turn>")
    assert reqs[3].messages[1]["content"].endswith("Allowed now: ask, done.\n</jr2-turn>")
    tools = {dumps(r.tools) for r in reqs}
    system = {dumps(r.messages[0]) for r in reqs}
    assert len(tools) == 1 and len(system) == 1
    assert [t["function"]["name"] for t in reqs[0].tools] == ["ask", "done", "revise"]
    # The standing Briefing is built without the Menu: the same bytes whatever the picks.
    assert reqs[0].messages[0]["content"] == texts.system_prompt("You write short release notes.", "none")


async def test_each_request_is_a_prefix_of_the_next(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    llm.push(
        calls(("done", {"notes": "early"})),
        calls(("ask", {"question": "Ship it?"})),
        calls(("ask", {"question": "Anything else?"}), ("done", {})),
        calls(("done", {"notes": "final"})),
    )
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "complete"
    assert len(llm.requests) == 4
    assert_prefix_chain(llm.requests)
    assert len({dumps(r.tools) for r in llm.requests}) == 1


async def test_turn_part_follows_the_prompt_with_allowed_now_last(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    llm.push(calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"})))
    s = spec()
    await conversation(NotesPort()).run_turn(s)
    first = llm.requests[0].messages
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"] == f"{s.prompt}\n\n<jr2-turn>\nAllowed now: ask.\n</jr2-turn>"
    assert first[0]["content"] == texts.system_prompt(s.instructions, "none")
    assert first[0]["content"].startswith(s.instructions)


# -- H4/D11: receipts as tool results ----------------------------------------------------------------------------------


async def test_refused_pick_result_is_the_correction(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    llm.push(
        calls(("done", {"notes": "too early"})),
        calls(("publish", {})),
        calls(("ask", {"question": "q"})),
        calls(("done", {"notes": "n"})),
    )
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "complete"
    results = tool_results(llm.requests[2])
    assert results[0] == f"{CORRECTION_DONE}\nAllowed now: ask."
    assert results[1].startswith("publish is not allowed in the workflow's current state, whatever its arguments.")
    # The pick the state refused was still delivered to the Run: the Harness does not pre-check.
    assert [p[0] for p in port.picks] == ["done", "publish", "ask", "done"]


async def test_bad_arguments_say_fix_them(llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec) -> None:
    llm.push(calls(("ask", {"q": "wrong field"})), calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"})))
    await conversation(NotesPort()).run_turn(spec())
    result = tool_results(llm.requests[1])[0]
    assert "do not match its schema" in result and "question: Field required" in result
    assert "Fix the arguments" in result and result.endswith("Allowed now: ask.")


async def test_in_state_move_keeps_the_turn(llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec) -> None:
    port = NotesPort()
    llm.push(calls(("ask", {"question": "Which version?"})), calls(("done", {"notes": "n"})))
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "complete" and result.picks == 2
    assert len(llm.requests) == 2
    receipt = tool_results(llm.requests[1])[0]
    assert receipt == (
        "ask was taken. Your turn goes on.\nAnswer: The editor replied: yes (Which version?)\nAllowed now: ask, done."
    )
    # The Agent's own pick is not restated: its receipt already told the model.
    assert llm.requests[1].messages[-1]["role"] == "tool"


async def test_turn_complete_receipt_ends_the_turn_and_later_calls_are_not_run(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    port.replies = 1
    llm.push(calls(("done", {"notes": "n"}), ("ask", {"question": "after"})))
    conv = conversation(port)
    result = await conv.run_turn(spec())
    assert result.outcome == "complete"
    assert [p[0] for p in port.picks] == ["done"]
    assert len(llm.requests) == 1
    assert conv.messages[-2].content == "done was taken.\nAnswer: The notes were published.\n" + (
        "Your turn is over. Stop here: do not call another tool."
    )
    assert conv.messages[-1].content == texts.not_run_turn_over("ask")


# -- H5: restatement ---------------------------------------------------------------------------------------------------


async def test_restatement_follows_the_last_tool_result_only_when_the_set_changed(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec, tmp_path: Path
) -> None:
    (tmp_path / "CHANGES").write_text("- faster start\n")
    port = NotesPort()
    llm.push(
        # While the model works, the editor answers from outside: done opens without a pick of the Agent.
        calls(("list_dir", {"path": "."}), ("read_file", {"path": "CHANGES"}), before=port.editor_replies),
        calls(("read_file", {"path": "CHANGES"})),
        calls(("done", {"notes": "n"})),
    )
    result = await conversation(port).run_turn(spec(workspace="read", cwd=str(tmp_path)))
    assert result.outcome == "complete"
    second, third = llm.requests[1].messages, llm.requests[2].messages
    assert [m["role"] for m in second[-4:]] == ["assistant", "tool", "tool", "user"]
    assert second[-1]["content"] == (
        "<jr2-turn>\nThe workflow's state changed since you last read the Allowed picks. Allowed now: ask, done.\n"
        "</jr2-turn>"
    )
    assert second[-2]["content"] == "- faster start\n"
    # Nothing changed during the next step: no restatement.
    assert [m["role"] for m in third[-2:]] == ["assistant", "tool"]
    assert sum(texts.STATE_CHANGED in str(m.get("content")) for m in third) == 1
    assert_prefix_chain(llm.requests)


async def test_no_restatement_after_the_turn_ended_even_if_the_address_answers(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    # Under continue, the next state re-registers the same address: a read would answer for the next Turn.
    port = NotesPort(reviewing_after_done=True)
    port.replies = 1
    llm.push(calls(("done", {"notes": "n"})))
    conv = conversation(port)
    result = await conv.run_turn(spec(continue_=True))
    assert result.outcome == "complete"
    assert port.log[-1] == ("pick", "done")
    assert port.allowed() == ["revise"]
    assert not any(texts.STATE_CHANGED in (m.content or "") for m in conv.messages)


async def test_a_gone_address_ends_the_turn_silently(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()

    def leave() -> None:
        port.state = "published"  # something else left the Agent's state

    llm.push(calls(("ask", {"question": "q"}), before=leave))
    conv = conversation(port)
    result = await conv.run_turn(spec())
    assert result.outcome == "turn_over"
    assert len(llm.requests) == 1
    assert conv.messages[-1].role == "tool"
    assert "your turn had already ended" in (conv.messages[-1].content or "")
    assert port.log[-1] == ("pick", "ask")


async def test_an_empty_list_is_not_restated_to_a_model_that_stopped(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    port.open_gate()  # a Gate below the Agent's state is open: nothing is allowed yet
    llm.push(
        calls(("ask", {"question": "now?"})),
        text("I will wait."),
        calls(("done", {"notes": "n"})),
    )
    conv = conversation(port, wake_poll_s=0.02)
    task = asyncio.create_task(conv.run_turn(spec()))
    while len(llm.requests) < 2:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert len(llm.requests) == 2  # the stopped model waits; it is not nudged or told "none" again
    port.editor_replies()
    result = await asyncio.wait_for(task, 5)
    assert result.outcome == "complete" and result.nudges == 0
    first, second, third = (r.messages for r in llm.requests)
    assert first[1]["content"].endswith(f"{texts.allowed_line([])}\n</jr2-turn>")
    assert "something the workflow started is still running" in second[-1]["content"]
    assert third[-1]["content"] == texts.restatement(["ask", "done"])
    assert not any(texts.STATE_CHANGED in str(m.get("content")) and "none yet" in str(m.get("content")) for m in third)


# -- H9: runaway -------------------------------------------------------------------------------------------------------


async def test_runaway_limit_is_exact_and_rerolls_once(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    same = ("ask", {"question": "again?"})
    llm.push(*(calls(same) for _ in range(8)))
    conv = conversation(port)
    result = await conv.run_turn(spec())
    assert result.outcome == "fault" and result.rerolled
    assert len(llm.requests) == 8
    # The 4th identical call of each conversation is not run.
    assert len(port.picks) == 6
    assert len(port.faults) == 1 and port.faults[0].startswith("runaway")
    # The re-roll is a fresh conversation with the same system prompt and tools.
    fresh = llm.requests[4]
    assert [m["role"] for m in fresh.messages] == ["system", "user"]
    assert dumps(fresh.messages[0]) == dumps(llm.requests[0].messages[0])
    assert fresh.messages[1]["content"].endswith("Allowed now: ask, done.\n</jr2-turn>")  # read afresh
    assert dumps(fresh.tools) == dumps(llm.requests[0].tools)
    assert conv.messages[-1].content == texts.not_run_repeated("ask")


async def test_runaway_under_continue_faults_without_reroll(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    llm.push(calls(("ask", {"question": "a"}), ("ask", {"question": "a"})), calls(*[("ask", {"question": "a"})] * 2))
    result = await conversation(port).run_turn(spec(continue_=True))
    assert result.outcome == "fault" and not result.rerolled
    assert len(llm.requests) == 2 and len(port.picks) == 3 and len(port.faults) == 1


async def test_different_arguments_break_the_streak(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    q = ("ask", {"question": "q"})
    llm.push(
        calls(q), calls(q), calls(q), calls(("ask", {"question": "other"})), calls(q), calls(("done", {"notes": "n"}))
    )
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "complete" and not port.faults
    assert len(port.picks) == 6


# -- H8: no-signal nudge -----------------------------------------------------------------------------------------------


async def test_nudge_budget_is_exact(llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec) -> None:
    port = NotesPort()
    llm.push(text("Here are the notes."), text("Done, really."), text("I am finished."), text("never asked"))
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "fault" and result.nudges == 2
    assert len(llm.requests) == 3
    assert llm.requests[1].messages[-1]["content"] == texts.nudge(["ask"])
    assert llm.requests[2].messages[-1]["content"] == texts.nudge(["ask"])
    assert len(port.faults) == 1 and port.faults[0].startswith("no_signal")
    assert_prefix_chain(llm.requests)


async def test_a_nudged_model_that_picks_completes(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort()
    port.replies = 1
    llm.push(text("Notes: ..."), calls(("done", {"notes": "n"})))
    result = await conversation(port).run_turn(spec())
    assert result.outcome == "complete" and result.nudges == 1 and not port.faults


# -- H7: continue ------------------------------------------------------------------------------------------------------


async def test_continue_spans_two_turns_on_one_conversation(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort(reviewing_after_done=True)
    conv = conversation(port)
    llm.push(calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"})))
    r1 = await conv.run_turn(spec(continue_=True))
    llm.push(calls(("revise", {"notes": "n2"})))
    r2 = await conv.run_turn(spec(continue_=True, state="notes.reviewing", prompt="Revise the notes."))
    assert (r1.outcome, r2.outcome) == ("complete", "complete")
    reqs = llm.requests
    assert len(reqs) == 3
    assert_prefix_chain(reqs)
    assert len({dumps(r.tools) for r in reqs}) == 1
    assert sum(m["role"] == "system" for m in reqs[2].messages) == 1
    turn2 = reqs[2].messages
    assert turn2[-1] == {
        "role": "user",
        "content": (
            "Revise the notes.\n\n<jr2-turn>\nNotice: The notes were published.\nAllowed now: revise.\n</jr2-turn>"
        ),
    }
    assert [m["role"] for m in turn2[-3:]] == ["assistant", "tool", "user"]
    assert [t.turn for t in conv.telemetry] == [1, 1, 2]


async def test_without_continue_each_turn_starts_fresh(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    port = NotesPort(reviewing_after_done=True)
    port.replies = 1
    conv = conversation(port)
    llm.push(calls(("done", {"notes": "n"})), calls(("revise", {"notes": "n2"})))
    await conv.run_turn(spec())
    await conv.run_turn(spec(state="notes.reviewing", prompt="Revise the notes."))
    assert [m["role"] for m in llm.requests[1].messages] == ["system", "user"]
    assert dumps(llm.requests[0].tools) == dumps(llm.requests[1].tools)


# -- H11/H12: masking and telemetry ------------------------------------------------------------------------------------


async def test_masking_adds_only_structured_outputs(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def masking_extra_body(allowed_tools: list[dict[str, Any]], bounds: Any = None) -> dict[str, Any]:
        names = [t["function"]["name"] for t in allowed_tools]
        seen.append(names)
        return {"structured_outputs": {"regex": "|".join(names)}}

    stub = types.ModuleType("jr2ray.harness.masking")
    stub.masking_extra_body = masking_extra_body  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jr2ray.harness.masking", stub)
    monkeypatch.setattr("jr2ray.harness.masking", stub, raising=False)

    script = [calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"}))]
    llm.push(*script)
    await conversation(NotesPort()).run_turn(spec(masking=True))
    masked = list(llm.requests)
    llm.reset()
    llm.push(*script)
    await conversation(NotesPort()).run_turn(spec())
    plain = list(llm.requests)

    assert seen == [["ask"], ["ask", "done"]]
    assert [r.body["structured_outputs"] for r in masked] == [{"regex": "ask"}, {"regex": "ask|done"}]
    assert all("structured_outputs" not in r.body for r in plain)
    for m, p in zip(masked, plain, strict=True):
        assert dumps(m.messages) == dumps(p.messages)
        assert dumps(m.tools) == dumps(p.tools)


async def test_every_request_records_telemetry(llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec) -> None:
    pushed: list[Any] = []
    conv = conversation(NotesPort())
    conv.on_telemetry = pushed.append
    llm.push(calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"})))
    await conv.run_turn(spec())
    assert len(conv.telemetry) == 2 and pushed == conv.telemetry
    first, second = conv.telemetry
    assert (first.run_id, first.slot, first.state, first.turn, first.step) == ("run-1", "writer", "notes.writing", 1, 1)
    assert second.step == 2 and second.model == "local/tiny"
    assert first.prompt_tokens and first.prompt_tokens > 0 and first.cached_tokens == 0
    # The fake server counts the shared prefix with the previous request as cached.
    assert second.cached_tokens and 0 < second.cached_tokens <= second.prompt_tokens
    assert all(t.latency_s >= 0 and t.error is None for t in conv.telemetry)


async def test_abort_during_a_pick_says_nothing_more(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    gate = asyncio.Event()

    class SlowPort(NotesPort):
        async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Any:
            self.log.append(("pick", name))
            await gate.wait()
            raise AssertionError("never reached")

    port = SlowPort()
    llm.push(calls(("ask", {"question": "q"})))
    conv = conversation(port, surface_timeout_s=0.3)  # the grace an abort gives a due answer
    task = asyncio.create_task(conv.run_turn(spec(continue_=True)))
    while not port.log or port.log[-1] != ("pick", "ask"):
        await asyncio.sleep(0.01)
    assert conv.abort() is True
    result = await task
    assert result.outcome == "aborted"
    await asyncio.sleep(0.05)
    assert port.log[-1] == ("pick", "ask") and not port.faults
    assert len(llm.requests) == 1
    # The dangling call got a result, so a continued conversation stays valid.
    assert conv.messages[-1].role == "tool" and conv.messages[-1].content == texts.interrupted("ask")
    assert conv.abort() is False


async def test_masking_with_the_real_regex_builder(
    llm: FakeModelServer, conversation: MakeConv, spec: MakeSpec
) -> None:
    pytest.importorskip("outlines_core")
    from jr2ray.harness.masking import build_tool_call_regex

    llm.push(calls(("ask", {"question": "q"})), calls(("done", {"notes": "n"})))
    await conversation(NotesPort()).run_turn(spec(masking=True))
    first, second = llm.requests
    assert first.body["structured_outputs"]["regex"] == build_tool_call_regex([first.tools[0]])
    assert second.body["structured_outputs"]["regex"] == build_tool_call_regex(first.tools[:2])
