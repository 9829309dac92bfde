"""Plain-data models that every layer above authoring shares (the Menu layer re-exports them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Party = Literal["agent", "gate"]


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
