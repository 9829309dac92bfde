"""How a Turn ended (`TurnResult`) and the loop's limits. What a Turn is asked to do is the Run's `TurnSpec`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from jr2ray.harness.errors import Aborted, HarnessError
from jr2ray.run.models import TurnSpec

__all__ = ["Limits", "TurnOutcome", "TurnResult", "TurnSpec"]


TurnOutcome = Literal["complete", "turn_over", "aborted", "fault"]


class TurnResult(BaseModel):
    """How a Turn ended, for the Run's log. The Run already knows the Machine's side from the receipts."""

    outcome: TurnOutcome
    reason: str | None = None
    steps: int = Field(default=0, description="Model requests made in this Turn, re-roll included.")
    picks: int = 0
    nudges: int = 0
    rerolled: bool = False

    def raise_for_outcome(self) -> TurnResult:
        """httpx style: raise `Aborted` for an aborted Turn and `HarnessError` for a fault; else return self.

        A Turn that ended with its state (`complete`, `turn_over`) is not an error.
        """
        if self.outcome == "aborted":
            raise Aborted("the Turn was aborted")
        if self.outcome == "fault":
            raise HarnessError(f"the Turn faulted: {self.reason}")
        return self


class Limits(BaseModel):
    """The loop's budgets (H8, H9) and read timings. The defaults are the specified ones."""

    max_identical_calls: int = 4
    max_steps: int = 256
    max_nudges: int = 2
    rerolls: int = 1
    surface_timeout_s: float = 10.0
    pick_retries: int = Field(default=4, description="Times a failed pick is sent again with its delivery id.")
    pick_retry_s: float = Field(default=1.0, description="The wait before the first resend; it grows linearly.")
    wake_poll_s: float = 0.5
