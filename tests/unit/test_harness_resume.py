"""A conversation kept in the Run's journal and taken up again (issue 12, case 9), with an in-memory provider and a
port that journals like the Run does (the Run's own ConversationLog folds the entries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_harness_fakes import FakeProvider, Port, conv, pick, spec

from jr2ray.harness import Message, ToolCall
from jr2ray.menu import texts
from jr2ray.menu.models import Receipt
from jr2ray.run.models import Transcript, TranscriptEntry
from jr2ray.run.replay import ConversationLog


class JournalPort(Port):
    """The fake port, plus a journal of the conversation and every delivery id a pick was sent with."""

    def __init__(self, fail_picks: int = 0) -> None:
        super().__init__()
        self.log = ConversationLog()
        self.entries: list[TranscriptEntry] = []
        self.dids: list[str | None] = []
        self.fail_picks = fail_picks

    async def record(self, iid: str, entry: TranscriptEntry) -> None:
        self.entries.append(entry)
        self.log.fold(iid, entry)

    async def transcript(self, iid: str) -> Transcript:
        return Transcript(conversation=iid, messages=list(self.log.messages), recorded=self.log.recorded.get(iid, 0),
                          attempt=self.log.attempt.get(iid, 0))

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        self.dids.append(delivery_id)
        if self.fail_picks:
            self.fail_picks -= 1
            raise RuntimeError("the run's actor restarted")
        return await super().pick(iid, name, args, delivery_id)

    def journaled(self) -> list[Message]:
        return [Message.model_validate_json(m) for m in self.log.messages]


async def test_a_pick_whose_call_fails_is_sent_again_with_the_same_delivery_id() -> None:
    port = JournalPort(fail_picks=2)
    result = await conv(port, FakeProvider(pick(("done", {}))), pick_retry_s=0.01).run_turn(spec())
    assert result.outcome == "complete"
    assert len(port.dids) == 3 and len(set(port.dids)) == 1 and port.dids[0]
    assert port.picks == [("done", {})]  # delivered once: the failed calls never reached the Run


async def test_every_message_is_journaled_before_the_model_or_the_run_sees_its_effect() -> None:
    port = JournalPort()
    provider = FakeProvider(pick(("ask", {"q": "why?"})), pick(("done", {})))
    c = conv(port, provider)
    await c.run_turn(spec())
    assert port.journaled() == c.messages  # the whole transcript, in order, as the Harness holds it
    # The request the model read had every message journaled before it was sent.
    assert len(port.entries[0].messages) == 1 and port.entries[0].at == 0
    assert [m.model_dump_json() for m in provider.requests[1].messages] == port.log.messages[:3]


async def test_a_restarted_turn_sends_the_same_messages_then_the_notice(tmp_path: Path) -> None:
    """The journal holds a Turn cut off after its model called a Working tool and a pick: the pick is sent again
    with its delivery id; the Working tool is not run twice; then the notice, with the Allowed picks now."""
    port = JournalPort()
    first = conv(port, FakeProvider(pick(("ask", {"q": "a"}))))
    s = spec(workspace="write", cwd=str(tmp_path))
    first.sync.new_turn()
    first.messages = [Message(role="user", content=texts.turn_part(s.prompt, ["ask", "done"])),
                      Message(role="assistant", content=None, tool_calls=(
                          ToolCall(id="w", name="write_file", arguments='{"path": "a.txt", "content": "x"}'),
                          ToolCall(id="p", name="ask", arguments='{"q": "ünïcode  spaced"}')),
                              extra={"z": 1, "a": [2]})]
    await first.sync.sync(port, s.iid, first.messages)
    journaled = list(port.log.messages)

    provider = FakeProvider(pick(("done", {})))
    again = conv(port, provider)
    result = await again.run_turn(s)
    assert result.outcome == "complete"
    sent = [m.model_dump_json() for m in provider.requests[0].messages]
    assert sent[:2] == journaled, "the restarted request does not start with the journaled messages"
    tail = provider.requests[0].messages[2:]
    assert [(m.role, m.tool_call_id) for m in tail] == [("tool", "w"), ("tool", "p"), ("user", None)]
    assert tail[0].content == texts.interrupted_by_restart("write_file")
    assert not (tmp_path / "a.txt").exists(), "a Working tool ran twice"
    assert port.picks[0] == ("ask", {"q": "ünïcode  spaced"}) and port.dids[0] == "h0.1.1"
    assert tail[2].content == texts.turn_restarted(["ask", "done"])


async def test_a_reroll_starts_the_journaled_conversation_over() -> None:
    port = JournalPort()
    same = pick(("ask", {"q": "same"}))
    provider = FakeProvider(same, same, same, same, pick(("done", {})))
    result = await conv(port, provider, max_identical_calls=4).run_turn(spec())
    assert result.outcome == "complete" and result.rerolled
    journaled = port.journaled()
    assert journaled[0].role == "user" and len(journaled) == 3  # the fresh attempt only: prompt, done, receipt
    assert port.log.attempt["r/w"] == 1
    assert port.dids[-1] is not None and port.dids[-1].startswith("h1.")
    assert len(set(port.dids)) == len(port.dids), "two picks of one Turn shared a delivery id"


async def test_a_continued_conversation_is_taken_back_from_the_journal_by_a_fresh_harness() -> None:
    """`continue`: the next Turn's Harness is new (the old one died between Turns). It sends the earlier Turn's
    messages as journaled, answers a call that Turn left without a result as an abort would, then its own part."""
    port = JournalPort()
    earlier = spec(iid="r/t1", continue_=True, conversation="r:root:w")
    first = conv(port, FakeProvider(pick(("ask", {"q": "a"}))))
    first.sync.new_turn()
    first.messages = [Message(role="user", content="turn one"),
                      Message(role="assistant", tool_calls=(ToolCall(id="x", name="ask", arguments="{}"),))]
    await first.sync.sync(port, earlier.iid, first.messages)
    journaled = list(port.log.messages)

    provider = FakeProvider(pick(("done", {})))
    later = spec(iid="r/t2", continue_=True, conversation="r:root:w", prompt="Turn two.")
    result = await conv(port, provider).run_turn(later)
    assert result.outcome == "complete"
    sent = provider.requests[0].messages
    assert [m.model_dump_json() for m in sent[:2]] == journaled
    assert sent[2].role == "tool" and sent[2].content == texts.interrupted("ask")
    assert sent[3].role == "user" and sent[3].content.startswith("Turn two.")
    assert texts.TURN_RESTARTED not in (sent[3].content or ""), "a continued Turn is not a restarted one"
