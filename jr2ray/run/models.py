"""Plain-data models the Run serves: status, gates, turns, and what a Harness needs to start a Turn."""

from __future__ import annotations

import json
import sys
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jr2ray.menu.models import Receipt, Thinking, Workspace

RunStatusName = Literal["queued", "active", "done", "error", "cancelled", "stopped", "drifted", "lost", "corrupt"]
# The lifecycle of a run as the journal tells it: done, error and cancelled are all `finished`.
Lifecycle = Literal["queued", "active", "finished", "stopped", "lost", "corrupt", "drifted"]
FINISHED: frozenset[str] = frozenset({"done", "error", "cancelled"})


def lifecycle(status: str) -> Lifecycle:
    return "finished" if status in FINISHED else status  # type: ignore[return-value]


def listed_presence(status: str, presence: str | None) -> str | None:
    """Where a listed run is, as lists say it: nowhere once it has finished (its host may hold it a moment longer),
    and `queued` for a start the registry does not hold yet (its activation has not taken its place in line: it
    is not parked, it has never run)."""
    if lifecycle(status) == "finished":
        return None
    return "queued" if status == "queued" and presence == "parked" else presence


_FIELD_SETS: dict[frozenset[str], set[str]] = {}  # one set of given field names per combination, for `Held`
_SHARED: set[int] = set()  # ids of the sets handed out as shared (each stays alive in _FIELD_SETS or its holders)
_BY_CONTENT: dict[str, Any] = {}  # one value for all equal ones, by their JSON (`Held._by_content`)
_BY_CONTENT_UP_TO = 4096
# Characters: a state, seat, digest, version or Allowed picks line, not a user's text. Interned texts are few (one
# a workflow version, Gate, seat and Allowed picks line), so a long-lived driver keeps them all (3.12 never frees one).
_INTERN_UP_TO = 256


class Held(BaseModel):
    """A model a driver may hold thousands of at once (how each waiting run stands). Unpickled (as every Ray answer
    is) or made and validated (as a parked run's standing read from the store is), it shares its set of
    given field names with every other one that has the same (pydantic keeps a set an instance: 3.1 KB of a 10.4 KB
    standing at a Gate, measured), its text fields named in `_interned` are interned, and the values named in
    `_by_content` are one object for all equal ones (a Gate's events and their schemas: one a workflow version). So
    10,000 standings of one workflow hold its name, digest, version, states, seats and schemas once. An instance
    that is assigned to takes a set of its own first, so the sharing never shows; a shared set someone changed in
    place (`model_fields_set.add`) is not handed out again. A value shared by content is never changed in place
    (nothing in jr2ray does; a caller that must, copies it first)."""

    _interned: ClassVar[tuple[str, ...]] = ()
    _by_content: ClassVar[tuple[str, ...]] = ()

    def __setstate__(self, state: dict[Any, Any]) -> None:
        given = state.get("__pydantic_fields_set__")
        if given:
            state["__pydantic_fields_set__"] = _shared_set(given)
        values = state.get("__dict__")
        if values:
            self._share_values(values)
        super().__setstate__(state)

    def model_post_init(self, context: Any, /) -> None:
        """The same sharing for a model made here or validated (from the store's JSON)."""
        given = self.__pydantic_fields_set__
        if given:
            object.__setattr__(self, "__pydantic_fields_set__", _shared_set(given))
        self._share_values(self.__dict__)

    @classmethod
    def _share_values(cls, values: dict[str, Any]) -> None:
        for name in cls._interned:
            v = values.get(name)
            if type(v) is str and len(v) <= _INTERN_UP_TO:
                values[name] = sys.intern(v)
        for name in cls._by_content:
            v = values.get(name)
            if v:
                values[name] = _by_content(v)

    def __setattr__(self, name: str, value: Any) -> None:
        given = self.__pydantic_fields_set__
        if id(given) in _SHARED:  # shared: this instance's own from now on
            object.__setattr__(self, "__pydantic_fields_set__", set(given))
        super().__setattr__(name, value)


def _shared_set(given: set[str]) -> set[str]:
    key = frozenset(given)
    shared = _FIELD_SETS.get(key)
    if shared is None or shared != given:  # new, or someone changed it through `model_fields_set`
        shared = _FIELD_SETS[key] = set(given)
        _SHARED.add(id(shared))
    return shared


def _by_content(value: Any) -> Any:
    """One object for all values with the same JSON, keys in the same order (a workflow version always makes them
    in one order, and a client may read the order); a value that is not JSON, or past the table's bound (the table
    should hold one entry a Gate a workflow version), is kept as it is."""
    try:
        key = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return value
    got = _BY_CONTENT.get(key)
    if got is not None:
        return got
    if len(_BY_CONTENT) < _BY_CONTENT_UP_TO:
        _BY_CONTENT[key] = value
    return value


class GateView(Held):
    """One open Gate: its id, meta, every event it may take (with schemas) and those it would take now."""

    id: str
    state: str
    meta: Any = None
    accepts: list[dict[str, Any]]
    accepts_now: list[str]

    _interned: ClassVar[tuple[str, ...]] = ("id", "state")
    _by_content: ClassVar[tuple[str, ...]] = ("accepts",)


class TurnView(Held):
    iid: str
    slot: str
    state: str
    active: bool
    conversation: str
    outstanding: str | None = None
    allowed_now: str | None = Field(default=None, description="A live Turn's Allowed picks as its model reads them.")
    allowed: list[str] | None = Field(default=None, description="A live Turn's Allowed picks, by name.")
    unread_notices: bool = Field(default=False, description="Its next surface read carries notices (a restart).")

    _interned: ClassVar[tuple[str, ...]] = ("slot", "state", "outstanding", "allowed_now")


class RunStatus(Held):
    id: str
    workflow: str
    digest: str
    status: RunStatusName
    version: str = Field(default="", description="The Workflow version the run is pinned to (sha256 of its source).")
    value: Any = None
    context: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    error: Any = None
    gates: list[GateView] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)

    _interned: ClassVar[tuple[str, ...]] = ("workflow", "digest", "status", "version")


class SendResult(BaseModel):
    ok: bool = True
    delivery_id: str
    status: RunStatusName
    value: Any = None


class TurnSpec(BaseModel):
    """One Turn of one Agent, declared once: the Run builds it and hands it to a TurnLauncher; the Harness runs it.

    Its address (run, iid, slot, state), its Frame and Dials (prompt, continue, model, thinking, cwd) and the seat's
    fixed settings (instructions, workspace, masking). Validated here, so a bad Dial is refused when the Turn starts.
    """

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    run_id: str
    iid: str = Field(description="The Turn's instance id: the address the RunPort answers for.")
    slot: str
    state: str = Field(description="The path of the state that invoked the Agent.")
    prompt: str
    model: str = Field(description="'<provider>/<model name>': a registered provider's prefix, e.g. 'local/tiny'.")
    thinking: Thinking = None
    continue_: bool = Field(default=False, alias="continue")
    instructions: str = ""
    workspace: Workspace = "none"
    cwd: str | None = None
    masking: bool = False
    conversation: str | None = Field(
        default=None, description="The conversation this Turn continues or starts; None means one of its own.")
    traceparent: str | None = Field(
        default=None, description="The W3C traceparent of the Turn's span, when tracing is on (jr2ray.run.tracing).")

    @model_validator(mode="after")
    def _cwd_for_workspace(self) -> TurnSpec:
        if self.workspace != "none" and not self.cwd:
            raise ValueError(f"workspace {self.workspace!r} needs a cwd")
        return self


class TranscriptEntry(BaseModel):
    """Messages one Turn's Harness appends to its conversation's journal (what it sent or received).

    Each message is the JSON text the Harness wrote; the Run keeps it as is and never reads inside it, so a restarted
    Turn gets the same bytes back on any backend.
    """

    seq: int = Field(ge=0, description="How many messages this Turn recorded before these (all its attempts).")
    at: int = Field(ge=0, description="The conversation index of the first message; 0 after a reset starts over.")
    attempt: int = Field(default=0, ge=0, description="The Turn's attempt (a re-roll starts the next one).")
    messages: list[str]
    parked: bool = Field(default=False, description="Written by the Run, never a Harness: the run parked while this "
                         "Turn waited for Turn admission, so its next request goes as it was, with no notice.")


class Transcript(BaseModel):
    """What the journal holds of a Turn's conversation: its messages (as written) and how far this Turn got."""

    conversation: str
    messages: list[str] = Field(default_factory=list)
    recorded: int = Field(default=0, description="Messages this Turn recorded; more than 0 means it was restarted.")
    attempt: int = 0
    parked: bool = Field(default=False, description="The run parked while this Turn waited for Turn admission, and "
                         "nothing was recorded since: the Turn goes on with the request it was about to send.")


class PickEvent(BaseModel):
    """One line of the pick history: what the Console and the SSE feed show."""

    kind: Literal["pick", "receipt", "admission", "status", "turn", "telemetry", "gate", "timer", "park"]
    at: float
    data: dict[str, Any]


class PickParked(BaseModel):
    """A pick's answer when its run parked before Rest and the caller asked to hear so (a driver's handle): the
    caller keeps the pick, and sends it again, with the same delivery id, once the registry says the run woke. So a
    pick waiting on a person holds no open call in any actor while its run is parked."""

    run_id: str
    epoch: int | None = None  # the activation (lease epoch) it parked from: only a later one's wake is its own


class Detached(BaseModel):
    """A host's answer to the registry's `detach`: the run is parked, and these callers (their wake ids) had a pick
    or a watch waiting on it; the registry tells each of them at the run's next activation. None for a run that
    finished: it is not woken for them."""

    watchers: list[str] = Field(default_factory=list)


class Waiting(Held):
    """Where a run waits, in short: its open Gates, its open Turns at Rest (seat -> Allowed picks) and its next
    timer. The `jr2ray runs` WHERE column, and what a driver's `until_gate`/`until_turn` wait on."""

    gates: list[str] = Field(default_factory=list)
    turns: dict[str, list[str]] = Field(default_factory=dict)
    timer_due: float | None = Field(default=None, description="Epoch seconds of the next timer, if any.")

    @classmethod
    def of(cls, status: RunStatus, timer_due: float | None = None) -> Waiting:
        return cls(gates=[g.id for g in status.gates],
                   turns={t.slot: list(t.allowed or []) for t in status.turns if t.active and t.allowed},
                   timer_due=timer_due)


class Standing(Held):
    """A run as it stands: its status (with Gates and Turns) and where it waits. A host writes it to the store when
    the run parks, so reads of a parked run (status, gates, surface) are served from the store without waking it;
    and a driver watching a run hears each new one (`version` counts them within one activation)."""

    status: RunStatus
    waiting: Waiting
    version: int = 0
    parked: bool = False
    epoch: int | None = Field(default=None, description="The activation (lease epoch) that saw it.")


class Carried(BaseModel):
    """A write's answer with how the run stood once it landed, for a caller that asked (a driver's handle): its
    waiters are answered from that standing instead of a fresh look at the host, one Ray call fewer a write. With
    the receipts of the parked picks the write carried, each None that its caller sends again alone."""

    value: Any
    standing: Standing | None = None
    picks: list[Receipt | None] = []  # receipts of the parked picks the write carried (`RunHost.call`'s `carry`)


class FirstAnswer(BaseModel):
    """The answer to a driver's write that rode with the activation it woke (`RunHost.adopt`'s `first`): its value,
    or the error it raised, or `lost` when the adoption's answer was lost (the write may have landed)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    value: Any = None
    error: BaseException | None = None
    lost: bool = False


class NotHere(BaseModel):
    """A host's answer to a call for a run it does not hold (it parked, or moved): the caller's cached host is stale,
    and it asks the registry once."""

    run_id: str


class RunEvent(BaseModel):
    """One thing a driver hears about a run, pushed as it happens: a Turn at Rest (its seat and Allowed picks), a
    Gate open, a new status, or the run finished. Derived from how the run stands before and after."""

    run_id: str
    kind: Literal["turn", "gate", "status", "finished"]
    seat: str | None = None
    allowed: list[str] = Field(default_factory=list)
    gate: str | None = None
    status: str
    standing: Standing

    @classmethod
    def between(cls, before: Standing | None, now: Standing) -> list[RunEvent]:
        """What is new in `now` since `before` (None: everything in `now` is new)."""
        out: list[RunEvent] = []
        rid, status = now.status.id, now.status.status
        if before is None or before.status.status != status:
            kind: Literal["status", "finished"] = "finished" if lifecycle(status) == "finished" else "status"
            out.append(cls(run_id=rid, kind=kind, status=status, standing=now))
        for seat, allowed in now.waiting.turns.items():
            if before is None or before.waiting.turns.get(seat) != allowed:
                out.append(cls(run_id=rid, kind="turn", seat=seat, allowed=allowed, status=status, standing=now))
        for gate in now.waiting.gates:
            if before is None or gate not in before.waiting.gates:
                out.append(cls(run_id=rid, kind="gate", gate=gate, status=status, standing=now))
        return out
