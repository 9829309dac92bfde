"""A run's timeline, built from its journal alone: its steps, Turns, model requests (cached against prefilled
tokens), Gate waits, Effects, parked periods and timer firings, on one time axis.

A pure function of the ledger (`timeline`), so the API, the CLI or a test can draw it from any journal, live or
finished. Where the journal says when:
- each transaction has one time (`at`), so a step is the transaction that admitted its event (a pick, a Gate event,
  or the start) or that a timer firing wrote;
- Turns, Gate waits and parking come from the run's feed events (`turn`, `gate`, `park`, `timer`, `status`);
- a model request is its telemetry row, written when the answer came, `latency_s` after it was sent;
- a parked period runs from its `park` event to the run's next journal write (the wake's first step), or to now.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from .store import LedgerEntry, LedgerKind

BarKind = Literal["run", "turn", "request", "gate", "effect", "parked"]
MarkKind = Literal["step", "pick", "gate_event", "timer", "end"]


class Bar(BaseModel):
    """Something that lasted: from `start` to `end` (epoch seconds; `end` None: it still lasts)."""

    lane: str
    kind: BarKind
    label: str
    start: float
    end: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Mark(BaseModel):
    """Something that happened at one moment."""

    lane: str
    kind: MarkKind
    label: str
    at: float
    detail: dict[str, Any] = Field(default_factory=dict)


class Timeline(BaseModel):
    run_id: str
    start: float
    end: float = Field(description="When the run ended, or now for a run still going.")
    finished: bool
    lanes: list[str] = Field(description="The rows, top to bottom: run, steps, each Turn, each Gate, each Effect.")
    bars: list[Bar] = Field(default_factory=list)
    marks: list[Mark] = Field(default_factory=list)


RUN_LANE = "run"
STEPS_LANE = "steps"
_ENDED = frozenset({"done", "error", "cancelled"})


def timeline(run_id: str, entries: list[LedgerEntry], now: float | None = None) -> Timeline:
    """The run's timeline from its ledger entries (in journal order)."""
    now = time.time() if now is None else now
    t = _Builder(entries[0].at if entries else now)
    for e in entries:
        t.entry(e)
    finished = t.end is not None
    stop = t.end if t.end is not None else max([now, *(e.at for e in entries)])
    for bar in t.bars:
        if bar.kind in ("turn", "gate") and bar.end is None and finished:
            bar.end = stop
    t.bars.insert(0, Bar(lane=RUN_LANE, kind="run", label="run", start=t.start, end=t.end))
    return Timeline(run_id=run_id, start=t.start, end=stop, finished=finished, lanes=t.lanes, bars=t.bars,
                    marks=t.marks)


class _Builder:
    """What `timeline` has read so far: one method per kind of entry, so each reads on its own."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.end: float | None = None
        self.lanes: list[str] = [RUN_LANE, STEPS_LANE]
        self.bars: list[Bar] = []
        self.marks: list[Mark] = []
        self.open_turns: dict[str, Bar] = {}
        self.open_gates: dict[str, Bar] = {}
        self.effects: dict[str, Bar] = {}
        self.parked: Bar | None = None

    def lane(self, name: str) -> str:
        if name not in self.lanes:
            self.lanes.append(name)
        return name

    def entry(self, e: LedgerEntry) -> None:
        if self.parked is not None and self.parked.end is None and e.at > self.parked.start and not _is_park(e):
            self.parked.end = e.at  # the wake's first write
        kind, data = e.kind, e.data
        if kind == LedgerKind.START:
            self.start = min(self.start, e.at)
            self.marks.append(Mark(lane=STEPS_LANE, kind="step", label="start", at=e.at))
        elif kind == LedgerKind.ADMISSION:
            self.marks.append(Mark(lane=STEPS_LANE, kind="step", label=str(data.get("name")), at=e.at,
                                   detail={"by": "gate" if "gate" in data else str(data.get("slot", ""))}))
        elif kind == LedgerKind.TELEMETRY:
            self.request(e)
        elif kind == LedgerKind.EFFECT_STARTED:
            name = str(e.key or "").split("#")[0]
            self.effects[str(e.key)] = bar = Bar(lane=self.lane(f"effect {name}"), kind="effect", label=name,
                                                 start=e.at)
            self.bars.append(bar)
        elif kind == LedgerKind.EFFECT_FINISHED and (done := self.effects.get(str(e.key))) is not None:
            done.end = e.at
            done.detail["outcome"] = "error" if "error" in data else "ok"
        elif kind == LedgerKind.FEED:
            self.feed(str(data.get("kind")), data.get("data") or {}, float(data.get("at") or e.at))

    def request(self, e: LedgerEntry) -> None:
        data = e.data
        latency = float(data.get("latency_s") or 0.0)
        prompt, cached = int(data.get("prompt_tokens") or 0), int(data.get("cached_tokens") or 0)
        self.bars.append(Bar(lane=self.lane(_turn_lane(str(data.get("slot", "")), str(data.get("iid", "")))),
                             kind="request", label=f"request {data.get('step', '')}", start=e.at - latency, end=e.at,
                             detail={"model": data.get("model"), "prompt_tokens": prompt, "cached_tokens": cached,
                                     "prefilled_tokens": max(0, prompt - cached),
                                     "output_tokens": data.get("completion_tokens"), "error": data.get("error")}))

    def feed(self, fk: str, fd: dict[str, Any], at: float) -> None:
        if fk == "turn":
            self.turn(fd, at)
        elif fk == "gate" and "open" in fd:
            self.gate(fd, at)
        elif fk == "gate" and "event" in fd:
            self.marks.append(Mark(lane=self.lane(f"gate {fd.get('id')}"), kind="gate_event",
                                   label=str(fd["event"]), at=at))
        elif fk == "pick":
            self.marks.append(Mark(lane=self.lane(_turn_lane(str(fd.get("slot", "")), str(fd.get("iid", "")))),
                                   kind="pick", label=str(fd.get("name")), at=at))
        elif fk == "timer":
            self.marks.append(Mark(lane=STEPS_LANE, kind="timer", label=str(fd.get("event", "timer")), at=at))
        elif fk == "park":
            if self.parked is None or self.parked.end is not None:
                self.parked = Bar(lane=RUN_LANE, kind="parked", label="parked", start=at)
                self.bars.append(self.parked)
        elif fk == "status" and str(fd.get("status")) in _ENDED:
            self.end = at
            self.marks.append(Mark(lane=RUN_LANE, kind="end", label=str(fd["status"]), at=at))

    def turn(self, fd: dict[str, Any], at: float) -> None:
        iid = str(fd.get("iid"))
        if fd.get("active"):
            if iid not in self.open_turns:
                self.open_turns[iid] = bar = Bar(lane=self.lane(_turn_lane(str(fd.get("slot", "")), iid)),
                                                 kind="turn", label=f"Turn {fd.get('slot', '')}", start=at,
                                                 detail={"iid": iid, "state": fd.get("state")})
                self.bars.append(bar)
        elif (ended := self.open_turns.pop(iid, None)) is not None:
            ended.end = at

    def gate(self, fd: dict[str, Any], at: float) -> None:
        gid = str(fd.get("id"))
        if fd["open"] and gid not in self.open_gates:
            self.open_gates[gid] = bar = Bar(lane=self.lane(f"gate {gid}"), kind="gate", label="waiting", start=at)
            self.bars.append(bar)
        elif not fd["open"] and (closed := self.open_gates.pop(gid, None)) is not None:
            closed.end = at


def _turn_lane(slot: str, iid: str) -> str:
    return f"turn {slot} {iid.rsplit('.', 1)[-1]}"


def _is_park(e: LedgerEntry) -> bool:
    return e.kind == LedgerKind.FEED and e.data.get("kind") == "park"
