"""Keeping a conversation in the Run's journal, and taking it up again in a Harness started for the same Turn.

Messages are journaled as they are sent (before each model request) and received (before a pick is delivered), so a
restarted Turn has every message its model read and every pick it made. A restarted Turn sends the same tools block
and the same messages, byte for byte, then a notice: the model's cached prefix still hits after a crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jr2ray.harness.errors import is_turn_over
from jr2ray.harness.port import RunPort, TranscriptPort
from jr2ray.harness.transcript import Message, ToolCall
from jr2ray.run.models import TranscriptEntry

log = logging.getLogger(__name__)


def delivery_id(attempt: int, index: int, position: int) -> str:
    """A pick's delivery id: its attempt, its answer's place in the conversation and its place in the answer.

    The same on a restart (the journal gives back the same conversation), never the same for two calls of one Turn
    (the Run scopes it by the Turn), so a retried pick gets its first receipt and is never applied twice.
    """
    return f"h{attempt}.{index}.{position}"


@dataclass
class Restored:
    """What the journal held of a conversation when its Turn started in this Harness."""

    messages: list[Message]
    restarted: bool  # this very Turn had recorded messages: it was cut off and goes on
    attempt: int
    parked: bool = False  # its run parked while it waited for Turn admission: its request goes out as it was


class TranscriptSync:
    """How much of one conversation the Run's journal has. One per Conversation; `reset` when it starts over."""

    def __init__(self) -> None:
        self.journaled = 0  # messages of the conversation the journal has (since the last reset)
        self.recorded = 0  # messages the running Turn recorded, over all its attempts
        self.attempt = 0
        self.starts_over = True  # the next entry replaces whatever the journal holds of this conversation

    def new_turn(self) -> None:
        self.recorded = 0
        self.attempt = 0

    def reset(self) -> None:
        self.journaled = 0
        self.starts_over = True

    async def sync(self, port: RunPort, iid: str, messages: list[Message]) -> None:
        """Journal the messages the journal does not have yet. A failure is logged; the next sync sends them again."""
        if not isinstance(port, TranscriptPort):
            return
        new = messages[self.journaled:]
        if not new and not self.starts_over:
            return
        entry = TranscriptEntry(seq=self.recorded, at=self.journaled, attempt=self.attempt,
                                messages=[m.model_dump_json() for m in new])
        try:
            await port.record(iid, entry)
        except Exception as exc:
            if not is_turn_over(exc):
                log.warning("turn %s: could not journal %d message(s): %s", iid, len(new), exc)
            return
        self.journaled += len(new)
        self.recorded += len(new)
        self.starts_over = False

    async def restore(self, port: RunPort, iid: str) -> Restored | None:
        """The journaled conversation of this Turn, or None when there is none (or no journal at all)."""
        if not isinstance(port, TranscriptPort):
            return None
        try:
            t = await port.transcript(iid)
        except Exception as exc:
            if not is_turn_over(exc):
                log.warning("turn %s: could not read its journaled conversation: %s", iid, exc)
            return None
        if not t.messages and not t.recorded:
            return None
        messages = [Message.model_validate_json(m) for m in t.messages]
        self.journaled = len(messages)
        self.recorded = t.recorded
        self.attempt = t.attempt
        self.starts_over = False
        # A Turn cut off right after its conversation started over (a re-roll) has nothing to go on from: it begins
        # its attempt again, with its count and attempt kept so its delivery ids stay new.
        return Restored(messages=messages, restarted=t.recorded > 0 and bool(messages), attempt=t.attempt,
                        parked=t.parked)


def unanswered(messages: list[Message]) -> tuple[int, list[tuple[int, ToolCall]]]:
    """The last assistant message's index and its calls (with their places) that have no result yet."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant":
            continue
        answered = {m.tool_call_id for m in messages[index + 1:] if m.role == "tool"}
        return index, [(pos, c) for pos, c in enumerate(message.tool_calls) if c.id not in answered]
    return -1, []
