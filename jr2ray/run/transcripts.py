"""Open conversations in the journal: what each Turn's Harness sent and received, so a restarted Turn goes on.

A Harness records messages through its port as it sends and receives them; a Harness started for the same Turn
later (it died, or the Run restarted) reads them back and continues the same conversation byte for byte. The Run
treats each message as an opaque JSON text: the Harness owns its shape, and the text is what stays byte-exact.
"""

from __future__ import annotations

from typing import Any

from .engine_state import RunState
from .errors import BadRequest
from .journal_writer import JournalWriter
from .models import Transcript, TranscriptEntry
from .replay import ConversationLog
from .store import LedgerKind
from .turns import Turns


class Transcripts:
    """The run's open conversations: record (journal first, then memory) and read back. `logs` maps each
    conversation to its journaled messages; Turns are looked up in the run's `Turns`."""

    def __init__(self, state: RunState, writer: JournalWriter, turns: Turns) -> None:
        self.state = state
        self.writer = writer
        self.turns = turns
        self.logs: dict[str, ConversationLog] = {}

    def record(self, address: str, entry: TranscriptEntry | dict[str, Any]) -> None:
        """Journal what a Turn's Harness sent or received. A retry of what is already journaled changes nothing;
        a finished run keeps no more (nothing will continue it). An entry that would leave a gap is refused
        (BadRequest), and nothing is written."""
        self.state.usable()
        turn = self.turns.find(address)
        e = entry if isinstance(entry, TranscriptEntry) else TranscriptEntry.model_validate(entry)
        if self.state.status_name() != "active":
            return
        log = self.logs.setdefault(turn.conversation, ConversationLog())
        have = log.recorded.get(turn.iid, 0)
        if e.seq > have:
            raise BadRequest(f"transcript of {turn.iid}: the entry starts at message {e.seq}, the journal has {have}")
        skip = have - e.seq  # a retry after a lost answer: keep only what the journal has not got yet
        if (skip and skip >= len(e.messages)) or (not e.messages and e.at >= len(log.messages)):
            return  # nothing new: all of it is journaled already, or an empty entry that cuts nothing
        e = TranscriptEntry(seq=have, at=e.at + skip, attempt=e.attempt, messages=e.messages[skip:])
        if e.at > len(log.messages):
            raise BadRequest(f"transcript of {turn.iid}: an entry at {e.at} leaves a gap after {len(log.messages)}")
        self.writer.stage(LedgerKind.TRANSCRIPT, turn.conversation, {"iid": turn.iid, **e.model_dump()})
        self.writer.flush(None)
        log.fold(turn.iid, e)

    def mark_parked(self, address: str) -> None:
        """The run parks while this Turn's Harness waits for Turn admission: journaled, so the Harness its restore
        starts sends the request it was about to send, unchanged and with no restart notice (the model reads nothing
        of the wait)."""
        turn = self.turns.find(address)
        log = self.logs.setdefault(turn.conversation, ConversationLog())
        e = TranscriptEntry(seq=log.recorded.get(turn.iid, 0), at=len(log.messages),
                            attempt=log.attempt.get(turn.iid, 0), messages=[], parked=True)
        self.writer.stage(LedgerKind.TRANSCRIPT, turn.conversation, {"iid": turn.iid, **e.model_dump()})
        self.writer.flush(None)
        log.fold(turn.iid, e)

    def read(self, address: str) -> Transcript:
        """The Turn's conversation as journaled, for a Harness that starts it (again)."""
        self.state.usable()
        turn = self.turns.find(address)
        log = self.logs.get(turn.conversation)
        if log is None:
            return Transcript(conversation=turn.conversation)
        return Transcript(conversation=turn.conversation, messages=list(log.messages),
                          recorded=log.recorded.get(turn.iid, 0), attempt=log.attempt.get(turn.iid, 0),
                          parked=turn.iid in log.parked)
