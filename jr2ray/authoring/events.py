"""`define_event`: one workflow event, with the pydantic model that is its tool's parameters."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from .errors import EventDefinitionError

NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
Audience = Literal["agent", "gate", "any"]


ArgsProblem = Literal["not_object", "sender", "unknown", "invalid"]


class BadArguments(ValueError):
    """Arguments an event refuses. It carries the facts, not a sentence: `jr2ray.menu.texts.bad_arguments` words
    it for the model, so what an Agent reads is written in one place.

    `items`: the JSON type sent (not_object), the unknown names (unknown), or `path: message` pairs (invalid).
    """

    def __init__(self, event: str, problem: ArgsProblem, items: Sequence[str] = ()) -> None:
        self.event = event
        self.problem: ArgsProblem = problem
        self.items: tuple[str, ...] = tuple(items)
        super().__init__(f"{event}: {problem}" + (f" ({'; '.join(self.items)})" if self.items else ""))


def is_mechanism(name: str) -> bool:
    """Dotted names (agent.fault, xstate.*) and wildcards are the mechanism's, never a party's."""
    return "." in name or "*" in name


@dataclass(frozen=True)
class EventDef:
    """A listed event. Its description is its tool's description at every state that takes it."""

    name: str
    description: str
    input: type[BaseModel]
    audience: Audience | None = None
    _schema: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    def validate(self, args: Any) -> dict[str, Any]:
        """The payload as plain JSON data; raises `BadArguments` otherwise."""
        if not isinstance(args, dict):
            raise BadArguments(self.name, "not_object", [type(args).__name__])
        if "sender" in args:
            raise BadArguments(self.name, "sender")
        extra = sorted(set(args) - set(self.input.model_fields))
        if extra:
            raise BadArguments(self.name, "unknown", extra)
        try:
            return self.input.model_validate(args).model_dump(mode="json")
        except ValidationError as exc:
            raise BadArguments(self.name, "invalid", [
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()]) from None


def _is_flat(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False
    for arg in getattr(annotation, "__args__", ()) or ():
        if not _is_flat(arg):
            return False
    return True


def define_event(name: str, description: str, input: type[BaseModel] | None = None,
                 audience: Audience | None = None) -> EventDef:
    """Define one event. Refuses dotted names, a `sender` field and nested models (A2)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise EventDefinitionError(f"event name {name!r} must match {NAME_RE.pattern} (dotted names are reserved)")
    if not description or not isinstance(description, str):
        raise EventDefinitionError(f"event {name!r} needs a description: it is its tool's description")
    if input is None:
        input = type(f"{name}_input", (BaseModel,), {"__annotations__": {}})
    if not (isinstance(input, type) and issubclass(input, BaseModel)):
        raise EventDefinitionError(f"event {name!r}: input must be a pydantic model class")
    if "sender" in input.model_fields:
        raise EventDefinitionError(f"event {name!r}: a field named 'sender' is refused; jr2ray writes the Sender")
    for fname, f in input.model_fields.items():
        if not _is_flat(f.annotation):
            raise EventDefinitionError(f"event {name!r}: field {fname!r} is a nested model; inputs must be flat")
    if audience not in (None, "agent", "gate", "any"):
        raise EventDefinitionError(f"event {name!r}: audience must be 'agent', 'gate' or 'any'")
    return EventDef(name, description, input, audience, input.model_json_schema())
