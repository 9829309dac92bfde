"""Plain-data models that every layer above authoring shares (the Menu layer re-exports them)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

Party = Literal["agent", "gate"]

Workspace = Literal["none", "read", "write"]
"""What an Agent's Working tools may touch: nothing, read its directory, or also write there. Declared only here."""
WORKSPACES: tuple[str, ...] = get_args(Workspace)

Thinking = bool | int | Literal["low", "medium", "high"] | None
"""The `thinking` Dial: on/off, a token budget, or a named level; None leaves it to the provider. Declared only here."""


class Sender(BaseModel):
    """Who delivered an event. jr2ray writes it; no party can."""

    model_config = ConfigDict(frozen=True)

    party: Party
    id: str


class MenuItem(BaseModel):
    """One tool on an Agent's Menu: one workflow event."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any] = Field(description="The event's pydantic JSON schema.")
