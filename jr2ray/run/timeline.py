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
    lanes: list[str] = [RUN_LANE, STEPS_LANE]
    bars: list[Bar] = []
    marks: list[Mark] = []
    open_turns: dict[str, Bar] = {}
    open_gates: dict[str, Bar] = {}
    effects: dict[str, Bar] = {}
    parked: Bar | None = None
    start = entries[0].at if entries else now
    end: float | None = None

    def lane(name: str) -> str:
        if name not in lanes:
            lanes.append(name)
        return name

    for e in entries:
        if parked is not None and parked.end is None and e.at > parked.start and not _is_park(e):
            parked.end = e.at  # the wake's first write
        kind, data = e.kind, e.data
        if kind == LedgerKind.START:
            start = min(start, e.at)
            marks.append(Mark(lane=STEPS_LANE, kind="step", label="start", at=e.at))
        elif kind == LedgerKind.ADMISSION:
            marks.append(Mark(lane=STEPS_LANE, kind="step", label=str(data.get("name")), at=e.at,
                              detail={"by": "gate" if "gate" in data else str(data.get("slot", ""))}))
        elif kind == LedgerKind.TELEMETRY:
            latency = float(data.get("latency_s") or 0.0)
            prompt, cached = int(data.get("prompt_tokens") or 0), int(data.get("cached_tokens") or 0)
            bars.append(Bar(lane=lane(_turn_lane(str(data.get("slot", "")), str(data.get("iid", "")))),
                            kind="request", label=f"request {data.get('step', '')}", start=e.at - latency, end=e.at,
                            detail={"model": data.get("model"), "prompt_tokens": prompt, "cached_tokens": cached,
                                    "prefilled_tokens": max(0, prompt - cached),
                                    "output_tokens": data.get("completion_tokens"), "error": data.get("error")}))
        elif kind == LedgerKind.EFFECT_STARTED:
            name = str(e.key or "").split("#")[0]
            effects[str(e.key)] = bar = Bar(lane=lane(f"effect {name}"), kind="effect", label=name, start=e.at)
            bars.append(bar)
        elif kind == LedgerKind.EFFECT_FINISHED and (done := effects.get(str(e.key))) is not None:
            done.end = e.at
            done.detail["outcome"] = "error" if "error" in data else "ok"
        elif kind == LedgerKind.FEED:
            fk, fd, at = str(data.get("kind")), data.get("data") or {}, float(data.get("at") or e.at)
            if fk == "turn":
                iid = str(fd.get("iid"))
                if fd.get("active"):
                    if iid not in open_turns:
                        open_turns[iid] = bar = Bar(lane=lane(_turn_lane(str(fd.get("slot", "")), iid)), kind="turn",
                                                    label=f"Turn {fd.get('slot', '')}", start=at,
                                                    detail={"iid": iid, "state": fd.get("state")})
                        bars.append(bar)
                elif (ended := open_turns.pop(iid, None)) is not None:
                    ended.end = at
            elif fk == "gate" and "open" in fd:
                gid = str(fd.get("id"))
                if fd["open"] and gid not in open_gates:
                    open_gates[gid] = bar = Bar(lane=lane(f"gate {gid}"), kind="gate", label="waiting", start=at)
                    bars.append(bar)
                elif not fd["open"] and (closed := open_gates.pop(gid, None)) is not None:
                    closed.end = at
            elif fk == "gate" and "event" in fd:
                marks.append(Mark(lane=lane(f"gate {fd.get('id')}"), kind="gate_event", label=str(fd["event"]),
                                  at=at))
            elif fk == "pick":
                marks.append(Mark(lane=lane(_turn_lane(str(fd.get("slot", "")), str(fd.get("iid", "")))),
                                  kind="pick", label=str(fd.get("name")), at=at))
            elif fk == "timer":
                marks.append(Mark(lane=STEPS_LANE, kind="timer", label=str(fd.get("event", "timer")), at=at))
            elif fk == "park":
                if parked is None or parked.end is not None:
                    parked = Bar(lane=RUN_LANE, kind="parked", label="parked", start=at)
                    bars.append(parked)
            elif fk == "status" and str(fd.get("status")) in _ENDED:
                end = at
                marks.append(Mark(lane=RUN_LANE, kind="end", label=str(fd["status"]), at=at))
    finished = end is not None
    stop = end if end is not None else max([now, *(e.at for e in entries)])
    for b in bars:
        if b.kind in ("turn", "gate") and b.end is None and finished:
            b.end = stop
    bars.insert(0, Bar(lane=RUN_LANE, kind="run", label="run", start=start, end=end))
    return Timeline(run_id=run_id, start=start, end=stop, finished=finished, lanes=lanes, bars=bars, marks=marks)


def _turn_lane(slot: str, iid: str) -> str:
    return f"turn {slot} {iid.rsplit('.', 1)[-1]}"


def _is_park(e: LedgerEntry) -> bool:
    return e.kind == LedgerKind.FEED and e.data.get("kind") == "park"
