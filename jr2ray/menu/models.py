"""Plain-data boundary models of the Menu layer.

These cross every boundary (Run actor, Harness actor, HTTP), so they are pydantic v2 models with no behaviour.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, computed_field

from jr2ray.authoring.models import MenuItem, Party, Sender, Thinking, Workspace
from jr2ray.menu.receipt import Receipt, RefusalReason
from jr2ray.menu.texts import allowed_line

__all__ = ["MenuItem", "Party", "Receipt", "RefusalReason", "Sender", "Surface", "Thinking", "Workspace"]


class Surface(BaseModel):
    """What a Harness reads for its Turn: the fixed Menu and the Allowed picks now."""

    menu: list[MenuItem]
    allowed: list[str]
    turn_over: bool = Field(default=False, description="The Turn at this address has ended.")
    notices: list[str] = Field(default_factory=list)

    @computed_field(description="The Allowed picks as the model reads them (the Console shows the same line).")  # type: ignore[prop-decorator]
    @property
    def allowed_now(self) -> str:
        return allowed_line(self.allowed)
