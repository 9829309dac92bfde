"""The turn loop with an in-memory provider and port: limits, aborts, failed reads and edge cases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError
from test_harness_fakes import MENU, FakeProvider, Port, conv, pick, say, spec

from jr2ray.harness import Aborted, Conversation, HarnessError, TurnOver, TurnResult, TurnSpec, is_turn_over
from jr2ray.harness.providers import ProviderConfig, ProviderRegistry
from jr2ray.menu import texts
from jr2ray.menu.models import MenuItem, Receipt, Surface

# -- limits -------------------------------------------------------------------------------------------------------


async def test_step_limit_is_exact_and_rerolls_once() -> None:
    port, provider = Port(), FakeProvider(endless=True)
    result = await conv(port, provider).run_turn(spec())
    assert result.outcome == "fault" and result.rerolled
    assert len(provider.requests) == 2 * 256 == result.steps
    assert len(port.picks) == 512
    assert port.faults == ["runaway: the Turn reached 256 steps"]
    assert len(provider.requests[256].messages) == 1  # the re-roll starts fresh


async def test_identical_calls_within_one_answer_trip_on_the_fourth() -> None:
    port = Port()
    same = ("ask", {"q": "x"})
    provider = FakeProvider(pick(same, same, same, same, ("done", {})))
    c = conv(port, provider, rerolls=0)
    result = await c.run_turn(spec())
    assert result.outcome == "fault" and not result.rerolled
    assert len(port.picks) == 3
    assert [m.content for m in c.messages[-2:]] == [texts.not_run_repeated("ask"), texts.not_run_repeated("done")]


async def test_arguments_compare_as_json_values() -> None:
    port = Port()
    provider = FakeProvider(
        pick(("ask", '{"q": "x"}'), ("ask", '{ "q":"x" }'), ("ask", '{"q":"x"}'), ("ask", '{"q": "x"}'))
    )
    result = await conv(port, provider, rerolls=0).run_turn(spec())
    assert result.outcome == "fault" and len(port.picks) == 3


# -- reads ---------------------------------------------------------------------------------------------------------


async def test_a_failed_boundary_read_says_nothing() -> None:
    port = Port()

    def fail_second(n: int) -> None:
        if n == 2:
            port.allowed = ["done"]
            raise RuntimeError("run busy")

    port.read_hook = fail_second
    provider = FakeProvider(pick(("ask", {"q": "1"})), pick(("ask", {"q": "2"})), pick(("done", {})))
    c = conv(port, provider)
    result = await c.run_turn(spec())
    assert result.outcome == "complete"
    # Read 2 failed: silence. Read 3 sees ["done"], but the second receipt already told the model so.
    assert not any(texts.STATE_CHANGED in (m.content or "") for m in c.messages)


async def test_a_slow_boundary_read_is_bounded() -> None:
    port = Port()
    original = port.surface

    async def slow(iid: str) -> Surface:
        if port.reads >= 1:
            port.reads += 1
            await asyncio.sleep(5)
        return await original(iid)

    port.surface = slow  # type: ignore[method-assign]
    provider = FakeProvider(pick(("ask", {"q": "1"})), pick(("done", {})))
    result = await asyncio.wait_for(conv(port, provider, surface_timeout_s=0.05).run_turn(spec()), 2)
    assert result.outcome == "complete"


async def test_a_turn_already_over_makes_no_request() -> None:
    port, provider = Port(), FakeProvider()
    port.over = True
    result = await conv(port, provider).run_turn(spec())
    assert result.outcome == "turn_over" and not provider.requests


async def test_a_surface_marked_turn_over_ends_at_the_boundary() -> None:
    port, provider = Port(), FakeProvider(pick(("ask", {"q": "1"})))

    def end(n: int) -> None:
        port.over = n >= 2

    port.read_hook = end
    result = await conv(port, provider).run_turn(spec())
    assert result.outcome == "turn_over" and len(provider.requests) == 1


async def test_a_model_that_stopped_with_nothing_read_is_woken_not_nudged() -> None:
    port = Port(allowed=[])

    def open_later(n: int) -> None:
        if n >= 3:
            port.allowed = ["done"]

    port.read_hook = open_later
    provider = FakeProvider(say("waiting"), pick(("done", {})))
    c = conv(port, provider, wake_poll_s=0.01)
    result = await c.run_turn(spec())
    assert result.outcome == "complete" and result.nudges == 0
    assert provider.requests[1].messages[-1].content == texts.restatement(["done"])


async def test_picks_that_opened_while_the_model_read_none_are_restated_not_nudged() -> None:
    port = Port(allowed=[])

    def open_now(n: int) -> None:
        if n >= 2:
            port.allowed = ["done"]

    port.read_hook = open_now
    provider = FakeProvider(say("nothing to do yet"), pick(("done", {})))
    result = await conv(port, provider).run_turn(spec())
    assert result.outcome == "complete" and result.nudges == 0
    assert provider.requests[1].messages[-1].content == texts.restatement(["done"])


async def test_unfinished_receipt_ends_the_turn() -> None:
    port, provider = Port(), FakeProvider(pick(("ask", {"q": "1"})))
    port.pick_receipt = Receipt(delivered=True, moved=True, turn_complete=False, allowed=[], refused="unfinished")
    result = await conv(port, provider).run_turn(spec())
    assert result.outcome == "turn_over" and result.reason == "unfinished"
    assert port.reads == 1


# -- errors and edges ----------------------------------------------------------------------------------------------


async def test_provider_error_faults_and_is_recorded() -> None:
    port, provider = Port(), FakeProvider()
    c = conv(port, provider)
    result = await c.run_turn(spec())
    assert result.outcome == "fault" and result.reason and result.reason.startswith("provider_error")
    assert len(port.faults) == 1
    assert c.telemetry[0].error == "script exhausted" and c.telemetry[0].prompt_tokens is None


async def test_bad_json_arguments_are_answered_without_a_pick() -> None:
    port = Port()
    provider = FakeProvider(pick(("ask", "{not json")), pick(("ask", "[1]")), pick(("done", "")))
    c = conv(port, provider)
    result = await c.run_turn(spec())
    assert result.outcome == "complete"
    assert port.picks == [("done", {})]
    results = [m.content or "" for m in c.messages if m.role == "tool"]
    assert results[0].startswith("The arguments of ask are not one valid JSON object")
    assert "got a JSON list" in results[1]


async def test_abort_during_a_model_request() -> None:
    port, provider = Port(), FakeProvider(pick(("done", {})))
    provider.gate = asyncio.Event()
    c = conv(port, provider)
    task = asyncio.create_task(c.run_turn(spec()))
    while not provider.requests:
        await asyncio.sleep(0.005)
    reads = port.reads
    assert c.running and c.abort()
    result = await task
    assert result.outcome == "aborted" and result.steps == 1
    assert port.reads == reads and not port.picks and not port.faults
    assert not c.running


async def test_cancelling_the_caller_propagates() -> None:
    port, provider = Port(), FakeProvider()
    provider.gate = asyncio.Event()
    c = conv(port, provider)
    task = asyncio.create_task(c.run_turn(spec()))
    while not provider.requests:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not c.running


async def test_one_turn_at_a_time_and_a_port_is_needed() -> None:
    provider = FakeProvider()
    provider.gate = asyncio.Event()
    c = conv(Port(), provider)
    task = asyncio.create_task(c.run_turn(spec()))
    while not provider.requests:
        await asyncio.sleep(0.005)
    with pytest.raises(HarnessError):
        await c.run_turn(spec())
    c.abort()
    await task
    with pytest.raises(HarnessError):
        await Conversation(providers=ProviderRegistry(ProviderConfig())).run_turn(spec())


async def test_menu_names_may_not_clash_with_working_tools(tmp_path: Any) -> None:
    class ClashPort(Port):
        async def surface(self, iid: str) -> Surface:
            return Surface(menu=[*MENU, MenuItem(name="read_file", description="x", parameters={})], allowed=["ask"])

    with pytest.raises(HarnessError, match="read_file"):
        await conv(ClashPort(), FakeProvider()).run_turn(spec(workspace="read", cwd=str(tmp_path)))


async def test_working_tools_follow_the_menu_and_join_the_mask(tmp_path: Any) -> None:
    port = Port(allowed=["done"])
    provider = FakeProvider(pick(("list_dir", {})), pick(("done", {})))
    await conv(port, provider).run_turn(spec(workspace="read", cwd=str(tmp_path), masking=True))
    first = provider.requests[0]
    assert [t.name for t in first.tools] == ["ask", "done", "read_file", "list_dir"]
    assert first.masked_tools == ["done", "list_dir", "read_file"]
    assert port.picks == [("done", {})]  # list_dir never reached the Run


async def test_telemetry_rows_carry_each_answers_usage() -> None:
    """Every usage number a provider reports reaches the request's telemetry row, under the same name."""
    usage = {"prompt_tokens": 120, "cached_tokens": 96, "completion_tokens": 7, "prompt_token_ids": [1, 2, 3],
             "completion_token_ids": [4]}
    answer = pick(("done", {})).model_copy(update=usage)
    assert answer.usage() == usage
    c = conv(Port(), FakeProvider(answer))
    assert (await c.run_turn(spec())).outcome == "complete"
    row = c.telemetry[0]
    assert {name: getattr(row, name) for name in usage} == usage
    assert (row.error, row.step, row.model) == (None, 1, "local/m")


async def test_masking_is_not_sent_to_anthropic() -> None:
    provider = FakeProvider(pick(("done", {})), kind="anthropic")
    await conv(Port(), provider).run_turn(spec(model="anthropic/c", masking=True))
    assert provider.requests[0].masked_tools is None


async def test_telemetry_sink_may_be_async_and_may_fail() -> None:
    seen: list[int] = []

    async def sink(t: Any) -> None:
        seen.append(t.step)
        raise RuntimeError("sink down")

    provider = FakeProvider(pick(("ask", {"q": "1"})), pick(("done", {})))
    c = conv(Port(), provider)
    c.on_telemetry = sink
    result = await c.run_turn(spec())
    assert result.outcome == "complete" and seen == [1, 2]


def test_raise_for_outcome() -> None:
    assert TurnResult(outcome="complete").raise_for_outcome().outcome == "complete"
    assert TurnResult(outcome="turn_over").raise_for_outcome().outcome == "turn_over"
    with pytest.raises(Aborted):
        TurnResult(outcome="aborted").raise_for_outcome()
    with pytest.raises(HarnessError, match="no_signal"):
        TurnResult(outcome="fault", reason="no_signal: x").raise_for_outcome()


def test_turn_spec() -> None:
    s = TurnSpec.model_validate(
        {"run_id": "r", "iid": "i", "slot": "w", "state": "s", "prompt": "p", "model": "local/m", "continue": True}
    )
    assert s.continue_ is True and s.workspace == "none"
    with pytest.raises(ValidationError, match="needs a cwd"):
        spec(workspace="write")


def test_is_turn_over_matches_foreign_and_wrapped_classes() -> None:
    class TurnOverFromRun(Exception):
        pass

    TurnOverFromRun.__name__ = "TurnOver"

    class Wrapped(Exception):
        def __init__(self, cause: BaseException) -> None:
            self.cause = cause

    assert is_turn_over(TurnOver("x"))
    assert is_turn_over(TurnOverFromRun())
    assert is_turn_over(Wrapped(TurnOverFromRun()))
    assert not is_turn_over(RuntimeError("x"))


# -- the end of a Turn, while its own answer is due -------------------------------------------------------------------


async def test_an_abort_while_a_pick_is_answered_lets_the_receipt_land() -> None:
    """The Run ends the Turn inside the pick that left the state: the receipt is read, the Turn ends `complete`."""
    c: Conversation

    class EndingPort(Port):
        async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
            assert c.abort()  # what the Run's TurnLauncher does while it answers this pick
            await asyncio.sleep(0.01)  # the receipt is still on its way
            return await super().pick(iid, name, args)

    port, provider = EndingPort(), FakeProvider(pick(("done", {}), ("ask", {"q": "late"})))
    c = conv(port, provider)
    result = await c.run_turn(spec())
    assert result.outcome == "complete" and result.picks == 1
    receipt = Receipt(delivered=True, moved=True, turn_complete=True, allowed=[])
    assert [m.content for m in c.messages if m.role == "tool"] == [texts.receipt_text(receipt, "done"),
                                                                   texts.not_run_turn_over("ask")]


async def test_an_abort_while_a_pick_hangs_cancels_after_the_grace() -> None:
    gate = asyncio.Event()

    class HangingPort(Port):
        async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
            await gate.wait()
            raise AssertionError("never reached")

    c = conv(HangingPort(), FakeProvider(pick(("done", {}))), surface_timeout_s=0.2)
    task = asyncio.create_task(c.run_turn(spec()))
    while not c._answer_due:
        await asyncio.sleep(0.005)
    assert c.abort()
    result = await asyncio.wait_for(task, 5)
    assert result.outcome == "aborted"
    assert c.messages[-1].content == texts.interrupted("done")


async def test_the_next_turn_waits_for_an_ended_turn_reading_its_answer() -> None:
    """`continue` may start the next Turn while the last one still reads its final receipt: it waits, not fails."""
    release = asyncio.Event()

    class SlowReceipt(Port):
        async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
            await release.wait()
            return await super().pick(iid, name, args)

    port = SlowReceipt()
    c = conv(port, FakeProvider(pick(("done", {})), pick(("done", {}))))
    first = asyncio.create_task(c.run_turn(spec(continue_=True)))
    while not c._answer_due:
        await asyncio.sleep(0.005)
    assert c.abort()
    second = asyncio.create_task(c.run_turn(spec(continue_=True, iid="r/w2")))
    await asyncio.sleep(0.02)
    assert not second.done()
    release.set()
    assert (await first).outcome == "complete" and (await second).outcome == "complete"
