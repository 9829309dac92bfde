"""The Run's answer to a pick, as plain data.

Why its own module: `texts.py` words a receipt and `models.py` words `Surface.allowed_now` through `texts.py`, so
the receipt sits below both and neither of them imports the other back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["Receipt", "RefusalReason"]


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
