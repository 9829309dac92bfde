"""Delivery verdicts D1-D6 as a pure function of (machine, snapshot, Agent state, name, args)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from jr2ray.authoring import BadArguments, Jr2Machine
from jr2ray.chart import Event, GuardError, Snapshot, select_transitions, strict_guard

from . import texts
from .allowed import sender_of
from .models import RefusalReason
from .rest import at_rest


class Verdict(BaseModel):
    """What delivery must do with a pick: refuse it, answer it unmoved without delivering, or deliver it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kind: Literal["refuse", "unmoved", "deliver"]
    reason: RefusalReason | None = None
    detail: str | None = None
    event: Any = None  # the jr2ray.chart.Event to deliver, with its Sender


def verdict(machine: Jr2Machine, snapshot: Snapshot, state: str, name: str, args: Any) -> Verdict:
    """The checks run in rule order, D1 to D6; the first that applies decides."""
    st = machine.structure
    party = st.parties[state]
    if state not in snapshot.active_paths or snapshot.status != "active":  # a late pick from a Turn that ended
        return Verdict(kind="refuse", reason="turn_over")
    if not at_rest(snapshot, state, party.invoke_id):  # D1: refused before anything else, finish included
        return Verdict(kind="refuse", reason="not_at_rest")
    if name not in st.menu_names(party.id):  # D2
        return Verdict(kind="refuse", reason="off_menu")
    if name not in st.derived[state]:  # D3: only another state of this Agent handles it, whatever the args
        return Verdict(kind="unmoved", reason="other_state")
    try:  # D4: the schema, checked only for a pick this state could take, since only then can new args help
        payload = machine.events[name].validate(args if args is not None else {})
    except BadArguments as exc:
        return Verdict(kind="refuse", reason="bad_args", detail=texts.bad_arguments(exc))
    event = Event(name, payload, sender_of(party))
    try:
        ts = select_transitions(snapshot.config, snapshot.context, event, strict_guard)
    except GuardError:
        ts = []
    if any(not st.transition_allows(t, party) for t in ts):  # D5: another party's writing
        return Verdict(kind="unmoved", reason="other_party")
    return Verdict(kind="deliver", event=event)  # D6
