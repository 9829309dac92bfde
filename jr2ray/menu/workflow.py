"""`Workflow`: a loaded Jr2Machine with the Menu layer's views (menu, tools, seats) as methods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from jr2ray.authoring import EventDef, Jr2Machine, Setup

from .models import MenuItem
from .render import Dialect, model_tools, render_tools
from .walk import Seat, menu_items, seats, seats_text


class Workflow(Jr2Machine):
    def menu(self, slot: str) -> list[MenuItem]:
        return menu_items(self, slot)

    def tools(self, slot: str, dialect: Dialect | None = None) -> list[dict[str, Any]]:
        """The slot's tools block: in `dialect`, else in the format of the provider its `model` names."""
        items = menu_items(self, slot)  # refuses a slot that is not an Agent
        return model_tools(items, self.actors[slot].model) if dialect is None else render_tools(items, dialect)

    def seats(self) -> list[Seat]:
        return seats(self)

    def seats_text(self) -> str:
        return seats_text(self)


def jr2_setup(events: Iterable[EventDef], actors: Mapping[str, Any], input: type[BaseModel] | None = None,
              guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
              delays: Mapping[str, Any] | None = None) -> Setup:
    """Name the events, the actor slots and the door schema of a Workflow (A2-A4, A9)."""
    return Setup(events, actors, input, guards, actions, delays, machine_class=Workflow)
