"""Plain-data boundary models of the Menu layer.

These cross every boundary (Run actor, Harness actor, HTTP), so they are pydantic v2 models with no behaviour.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from jr2ray.authoring.models import MenuItem, Party, Sender, Thinking, Workspace

__all__ = ["MenuItem", "Party", "Receipt", "RefusalReason", "Sender", "Surface", "Thinking", "Workspace"]


class Surface(BaseModel):
    """What a Harness reads for its Turn: the fixed Menu and the Allowed picks now."""

    menu: list[MenuItem]
    allowed: list[str]
    turn_over: bool = Field(default=False, description="The Turn at this address has ended.")
    notices: list[str] = Field(default_factory=list)


RefusalReason = Literal[
    "not_at_rest",  # D1
    "off_menu",  # D2
    "other_state",  # D3
    "bad_args",  # D4
    "other_party",  # D5
    "turn_over",  # the Turn ended before this pick arrived
    "unfinished",  # the pick's work was cut off because something else left the Agent's state
    "reused_id",  # this delivery_id was already used by this Turn for another pick or other arguments
]


class Receipt(BaseModel):
    """The Run's answer to every pick (D10)."""

    delivered: bool
    moved: bool
    turn_complete: bool
    allowed: list[str]
    answer: str | None = None
    refused: RefusalReason | None = None
    detail: str | None = Field(default=None, description="A validation message, for bad_args.")
    delivery_id: str | None = None
    pick: str = ""
