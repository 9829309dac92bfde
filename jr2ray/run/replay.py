"""Journal replay: the ledger folded into what a restarted Run needs, one handler per ledger kind.

Nothing a request can observe lives only in memory, so everything here comes back from the journal: pick and Gate
receipts (with their scoped delivery ids and payload hashes), the outstanding picks and their progress, Effects
started and finished, notices, the caller's status, telemetry, the event feed and the conversations' transcripts.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jr2ray.menu import Receipt

from .models import TranscriptEntry
from .store import LedgerEntry, LedgerKind

FEED_REPLAYED = 1000  # the newest feed events a restarted Run holds in memory again (older ones: RunJournal.feed)


def payload_hash(name: str, args: Any) -> str:
    """What a delivery id promises: the same id always carries the same event name and arguments."""
    text = json.dumps({"name": name, "args": args}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pick_key(iid: str, delivery_id: str) -> str:
    """A pick's delivery id, scoped by the Turn that sent it."""
    return f"turn:{iid}/{delivery_id}"


def delivery_id_or_new(given: str | None) -> str:
    """The event's delivery id, or a new one when none was given. Minted once, where the event enters, so that
    every send of it after (Ray running a call again, a parked pick sent again) is applied once."""
    return given or uuid.uuid4().hex[:16]


def gate_key(gate_id: str, delivery_id: str) -> str:
    """A Gate event's delivery id, scoped by its Gate."""
    return f"gate:{gate_id}/{delivery_id}"


@dataclass
class Pending:
    """An admitted pick with no receipt yet: it was waiting for Rest when the Run stopped."""

    key: str
    iid: str
    name: str
    delivery_id: str
    hash: str
    moved: bool = True
    answers: list[str] = field(default_factory=list)
    chain: list[Any] = field(default_factory=list)


@dataclass
class ConversationLog:
    """One conversation as journaled: its messages since the last reset, and each Turn's count and attempt."""

    messages: list[str] = field(default_factory=list)
    recorded: dict[str, int] = field(default_factory=dict)  # iid -> messages that Turn recorded
    attempt: dict[str, int] = field(default_factory=dict)  # iid -> the attempt it last recorded
    parked: set[str] = field(default_factory=set)  # iids whose run parked while they waited for Turn admission

    def fold(self, iid: str, entry: TranscriptEntry) -> None:
        """Apply one entry: the messages from `at` on are replaced by the entry's (appended, or a reset)."""
        self.messages = [*self.messages[:entry.at], *entry.messages]
        self.recorded[iid] = entry.seq + len(entry.messages)
        self.attempt[iid] = entry.attempt
        if entry.parked:
            self.parked.add(iid)
        elif entry.messages or entry.at < len(self.messages):
            self.parked.discard(iid)  # it went on from there


@dataclass
class Replayed:
    receipts: dict[str, tuple[str, Receipt]] = field(default_factory=dict)  # scoped key -> (hash, receipt)
    gate_receipts: dict[str, str] = field(default_factory=dict)  # scoped key -> hash
    pending: dict[str, Pending] = field(default_factory=dict)  # scoped key -> outstanding pick
    slots: dict[str, str] = field(default_factory=dict)  # a Turn's id -> its Agent slot, for each Turn that picked
    effects_started: set[str] = field(default_factory=set)
    effects_finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    notices: dict[str, list[str]] = field(default_factory=dict)
    caller_status: str | None = None
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)
    feed: deque[tuple[int, dict[str, Any]]] = field(default_factory=lambda: deque(maxlen=FEED_REPLAYED))
    transcripts: dict[str, ConversationLog] = field(default_factory=dict)  # conversation -> its journaled messages


def _start(r: Replayed, e: LedgerEntry) -> None:
    r.origin = dict(e.data)


def _admission(r: Replayed, e: LedgerEntry) -> None:
    key, d = e.key, e.data
    if not key or "hash" not in d:  # mechanism events (agent.fault) carry no delivery id
        return
    if "gate" in d:
        r.gate_receipts[key] = d["hash"]
    elif "iid" in d:
        r.slots[d["iid"]] = d.get("slot", "")
        r.pending[key] = Pending(key=key, iid=d["iid"], name=d["name"], delivery_id=d.get("delivery_id", ""),
                                 hash=d["hash"])


def _receipt(r: Replayed, e: LedgerEntry) -> None:
    if not e.key:
        return
    d = e.data
    receipt = Receipt.model_validate(d["receipt"] if "receipt" in d else d)
    r.receipts[e.key] = (d.get("hash", ""), receipt)
    r.pending.pop(e.key, None)


def _outstanding(r: Replayed, e: LedgerEntry) -> None:
    p = r.pending.get(e.key or "")
    if p is not None:
        p.moved = bool(e.data.get("moved", True))
        p.answers = list(e.data.get("answers", []))
        p.chain = list(e.data.get("chain", []))


def _effect_started(r: Replayed, e: LedgerEntry) -> None:
    if e.key:
        r.effects_started.add(e.key)


def _effect_finished(r: Replayed, e: LedgerEntry) -> None:
    if e.key:
        r.effects_finished[e.key] = e.data


def _notice(r: Replayed, e: LedgerEntry) -> None:
    if e.key:
        r.notices.setdefault(e.key, []).append(e.data["text"])


def _notice_read(r: Replayed, e: LedgerEntry) -> None:
    if e.key:
        r.notices.pop(e.key, None)


def _status(r: Replayed, e: LedgerEntry) -> None:
    if e.data.get("status") in ("cancelled", "stopped"):
        r.caller_status = e.data["status"]


def _telemetry(r: Replayed, e: LedgerEntry) -> None:
    r.telemetry.append(e.data)


def _feed(r: Replayed, e: LedgerEntry) -> None:
    if e.key is not None:
        r.feed.append((int(e.key), e.data))


def _transcript(r: Replayed, e: LedgerEntry) -> None:
    if e.key:
        r.transcripts.setdefault(e.key, ConversationLog()).fold(e.data["iid"], TranscriptEntry.model_validate(e.data))


def _migration(r: Replayed, e: LedgerEntry) -> None:
    """A run moved to another version: the host loaded that one (`run_spec.run_spec`); nothing to fold here."""


HANDLERS: dict[LedgerKind, Callable[[Replayed, LedgerEntry], None]] = {
    LedgerKind.START: _start,
    LedgerKind.ADMISSION: _admission,
    LedgerKind.RECEIPT: _receipt,
    LedgerKind.OUTSTANDING: _outstanding,
    LedgerKind.EFFECT_STARTED: _effect_started,
    LedgerKind.EFFECT_FINISHED: _effect_finished,
    LedgerKind.NOTICE: _notice,
    LedgerKind.NOTICE_READ: _notice_read,
    LedgerKind.STATUS: _status,
    LedgerKind.TELEMETRY: _telemetry,
    LedgerKind.FEED: _feed,
    LedgerKind.TRANSCRIPT: _transcript,
    LedgerKind.MIGRATION: _migration,
}


def replay(entries: list[LedgerEntry]) -> Replayed:
    """Fold the ledger in order. A kind this version does not know is a damaged or newer journal: say so."""
    r = Replayed()
    for e in entries:
        try:
            kind = LedgerKind(e.kind)
        except ValueError:
            raise ValueError(f"ledger entry {e.seq} has unknown kind {e.kind!r}") from None
        HANDLERS[kind](r, e)
    return r
