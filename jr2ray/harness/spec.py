"""What a Turn is asked to do (`TurnSpec`), how it ended (`TurnResult`), and the loop's limits."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jr2ray.harness.errors import Aborted, HarnessError
from jr2ray.harness.transcript import Thinking


class TurnSpec(BaseModel):
    """One Turn of one Agent: its address, its Frame, its Dials and the seat's fixed settings."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    run_id: str
    iid: str = Field(description="The Turn's instance id: the address the RunPort answers for.")
    slot: str
    state: str = Field(description="The path of the state that invoked the Agent.")
    prompt: str
    model: str = Field(description="'local/<served-name>' or 'anthropic/<model>'.")
    thinking: Thinking = None
    continue_: bool = Field(default=False, alias="continue")
    instructions: str = ""
    workspace: Literal["none", "read", "write"] = "none"
    cwd: str | None = None
    masking: bool = False

    @model_validator(mode="after")
    def _cwd_for_workspace(self) -> TurnSpec:
        if self.workspace != "none" and not self.cwd:
            raise ValueError(f"workspace {self.workspace!r} needs a cwd")
        return self


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
    wake_poll_s: float = 0.5
