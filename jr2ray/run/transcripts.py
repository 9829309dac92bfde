"""Open conversations in the journal: what each Turn's Harness sent and received, so a restarted Turn goes on.

A Harness records messages through its port as it sends and receives them; a Harness started for the same Turn
later (it died, or the Run restarted) reads them back and continues the same conversation byte for byte. The Run
treats each message as an opaque JSON text: the Harness owns its shape, and the text is what stays byte-exact.
"""

from __future__ import annotations

from typing import Any

from .engine_state import EngineState
from .errors import BadRequest
from .models import Transcript, TranscriptEntry
from .replay import ConversationLog
from .store import LedgerKind


class TranscriptsMixin(EngineState):
    """The transcript half of RunEngine: record (journal first, then memory) and read back."""

    transcripts: dict[str, ConversationLog]

    def record_transcript(self, address: str, entry: TranscriptEntry | dict[str, Any]) -> None:
        """Journal what a Turn's Harness sent or received. A retry of what is already journaled changes nothing;
        a finished run keeps no more (nothing will continue it). An entry that would leave a gap is refused
        (BadRequest), and nothing is written."""
        self._usable()
        turn = self._find_turn(address)
        e = entry if isinstance(entry, TranscriptEntry) else TranscriptEntry.model_validate(entry)
        if self.status_name() != "active":
            return
        log = self.transcripts.setdefault(turn.conversation, ConversationLog())
        have = log.recorded.get(turn.iid, 0)
        if e.seq > have:
            raise BadRequest(f"transcript of {turn.iid}: the entry starts at message {e.seq}, the journal has {have}")
        skip = have - e.seq  # a retry after a lost answer: keep only what the journal has not got yet
        if (skip and skip >= len(e.messages)) or (not e.messages and e.at >= len(log.messages)):
            return  # nothing new: all of it is journaled already, or an empty entry that cuts nothing
        e = TranscriptEntry(seq=have, at=e.at + skip, attempt=e.attempt, messages=e.messages[skip:])
        if e.at > len(log.messages):
            raise BadRequest(f"transcript of {turn.iid}: an entry at {e.at} leaves a gap after {len(log.messages)}")
        self._stage(LedgerKind.TRANSCRIPT, turn.conversation, {"iid": turn.iid, **e.model_dump()})
        self._flush(None)
        log.fold(turn.iid, e)

    def transcript(self, address: str) -> Transcript:
        """The Turn's conversation as journaled, for a Harness that starts it (again)."""
        self._usable()
        turn = self._find_turn(address)
        log = self.transcripts.get(turn.conversation)
        if log is None:
            return Transcript(conversation=turn.conversation)
        return Transcript(conversation=turn.conversation, messages=list(log.messages),
                          recorded=log.recorded.get(turn.iid, 0), attempt=log.attempt.get(turn.iid, 0))
