"""`answer(fn)` and `sent_by(id)`: the two pieces of the authoring surface that speak about parties."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jr2ray.chart import Action, Bound, ChartConfigError, bind
from jr2ray.chart.guards import Guard, GuardEval
from jr2ray.chart.work import Work


@dataclass(frozen=True, slots=True)
class AnswerEffect:
    """The text an outstanding pick's receipt carries, written by the route's `answer(...)`."""

    text: str
    state: str  # the path of the state whose route wrote it


class AnswerAction(Action):
    """Computes the answer inside the transition, with the context, event and Chain it sees there."""

    name = "answer"

    def __init__(self, fn: Callable[..., Any] | str) -> None:
        self.fn: Any = fn

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        return AnswerAction(bind(self.fn, where, "answer") if callable(self.fn) else self.fn)

    def resolve(self, work: Work, params: Any = None) -> None:
        value = self.fn(work.scope(params)) if isinstance(self.fn, Bound) else self.fn
        work.effects.append(AnswerEffect("" if value is None else str(value), work.owner or ""))


def answer(fn: Callable[..., Any] | str) -> AnswerAction:
    """The answer to the outstanding pick this route settles; `fn` may take `context`, `event`, `chain`."""
    if not (callable(fn) or isinstance(fn, str)):
        raise ChartConfigError(f"answer needs a callable or a string, got {fn!r}")
    return AnswerAction(fn)


def _sender_id(sender: Any) -> str | None:
    if sender is None:
        return None
    if isinstance(sender, Mapping):
        return sender.get("id")
    return getattr(sender, "id", None)


class SentBy(Guard):
    """True for an event from party `id`, or with no Sender. It only narrows; it never grants."""

    def __init__(self, party_id: str) -> None:
        self.party_id = party_id
        self.label = f"sent_by({party_id})"

    def check(self, scope: dict[str, Any], leaf: GuardEval) -> bool:
        ev = scope.get("event")
        sid = _sender_id(getattr(ev, "sender", None))
        return sid is None or sid == self.party_id


def sent_by(party_id: str) -> SentBy:
    return SentBy(party_id)
