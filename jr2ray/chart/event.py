"""Events as objects with attribute access, plus a recording variant for payload-blind guard checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_RESERVED = ("type", "sender")


class Event:
    """A workflow event: a `type`, an optional `sender` and a payload read as attributes or items.

    Guards and actions receive this very object, so a subclass can watch what they read.
    """

    __slots__ = ("type", "sender", "_payload")

    def __init__(self, type: str, payload: Mapping[str, Any] | None = None, sender: Any = None) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "sender", sender)
        object.__setattr__(self, "_payload", dict(payload) if payload else {})

    def _read(self, key: str) -> Any:
        return object.__getattribute__(self, "_payload")[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._read(name)
        except KeyError:
            raise AttributeError(f"event {self.type!r} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("events are read-only")

    def __getitem__(self, key: str) -> Any:
        if key == "type":
            return self.type
        if key == "sender":
            return self.sender
        return self._read(key)

    def __contains__(self, key: object) -> bool:
        return key in _RESERVED or key in object.__getattribute__(self, "_payload")

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    @property
    def payload(self) -> dict[str, Any]:
        return dict(self._payload_all())

    def _payload_all(self) -> dict[str, Any]:
        payload: dict[str, Any] = object.__getattribute__(self, "_payload")
        return payload

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, **self._payload_all()}
        if self.sender is not None:
            sender = self.sender
            out["sender"] = sender.model_dump() if hasattr(sender, "model_dump") else sender
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.type, self.sender, self._payload_all()) == (other.type, other.sender, other._payload_all())

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"Event({self.type!r}, {self._payload_all()!r}, sender={self.sender!r})"

    @classmethod
    def from_any(cls, obj: Event | Mapping[str, Any] | str) -> Event:
        """Accept an Event, a `{"type": ...}` dict or a bare type string."""
        if isinstance(obj, Event):
            return obj
        if isinstance(obj, str):
            return cls(obj)
        if isinstance(obj, Mapping):
            data = dict(obj)
            try:
                etype = data.pop("type")
            except KeyError:
                raise ValueError(f"an event needs a 'type': {obj!r}") from None
            sender = data.pop("sender", None)
            return cls(str(etype), data, sender)
        raise TypeError(f"not an event: {obj!r}")


class RecordingEvent(Event):
    """An event that notes every payload read, so a guard's `False` can be trusted only if it read nothing."""

    __slots__ = ("reads",)

    def __init__(self, type: str, payload: Mapping[str, Any] | None = None, sender: Any = None) -> None:
        super().__init__(type, payload, sender)
        object.__setattr__(self, "reads", set())

    def _read(self, key: str) -> Any:
        object.__getattribute__(self, "reads").add(key)
        return super()._read(key)

    def _payload_all(self) -> dict[str, Any]:
        object.__getattribute__(self, "reads").add("*")
        return super()._payload_all()

    def __contains__(self, key: object) -> bool:
        if key not in _RESERVED:
            object.__getattribute__(self, "reads").add(str(key))
        return super().__contains__(key)

    def reset(self) -> None:
        object.__getattribute__(self, "reads").clear()
