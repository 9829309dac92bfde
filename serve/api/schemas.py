"""The API's request and response bodies (pydantic v2): what OpenAPI shows and /docs renders."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jr2ray.harness.admission import BudgetStats
from jr2ray.menu import MenuItem
from jr2ray.menu.walk import Seat
from jr2ray.run.models import GateView, RunStatus, SendResult, TurnView, Waiting

from ..graph import Graph


class Strict(BaseModel):
    """Request bodies refuse unknown keys: a typo must not be silently dropped."""

    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    detail: str


class UnavailableBody(BaseModel):
    detail: str
    retry_after: int = Field(description="Seconds to wait before retrying (also the Retry-After header).")


class InputSummary(BaseModel):
    """What a listing says of a run's input: never the input itself, which may be up to the input limit."""

    bytes: int = Field(description="Size of the input as compact JSON.")
    keys: list[str] = Field(default_factory=list, description="Its top-level keys (at most 20), if an object.")

    @classmethod
    def of(cls, value: Any) -> InputSummary:
        import json

        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())
        keys = [str(k)[:64] for k in list(value)[:20]] if isinstance(value, dict) else []
        return cls(bytes=size, keys=keys)


class ConflictBody(BaseModel):
    detail: str
    accepts_now: list[str]


class Health(BaseModel):
    ok: bool
    version: str


class WorkflowSummary(BaseModel):
    name: str
    id: str
    digest: str
    agents: list[str]
    seats: list[Seat]
    warnings: list[str]


class WorkflowDetail(WorkflowSummary):
    seats_text: str
    door_schema: dict[str, Any] | None = Field(description="The run input's JSON schema (the door).")
    menus: dict[str, list[MenuItem]] = Field(description="The fixed Menu of each Agent slot.")
    graph: Graph


class StartRun(Strict):
    input: dict[str, Any] = Field(description="The run's input; it must pass the workflow's door schema.")


class RunView(RunStatus):
    """A run's status plus the state paths its value holds (what the Console lights)."""

    active: list[str] = Field(default_factory=list)
    live: bool = Field(default=True, description="False when read from the journal (no Run actor is up).")


class RunSummary(BaseModel):
    id: str
    workflow: str
    digest: str
    status: str
    created_at: float
    updated_at: float
    input: InputSummary = Field(description="The input's size and top-level keys; GET /runs/{id} has the run.")
    value: Any = None
    active: list[str] = Field(default_factory=list)
    gates: list[GateView] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)
    presence: str | None = Field(default=None, description="Where an unfinished run is: `live` (hosted by an "
                                 "actor now), `parked` (only in its journal; anything sent to it wakes it) or "
                                 "`queued` (waiting for a slot). None for a finished, lost or damaged run.")
    error: str | None = Field(default=None, description="Why a `lost` or `corrupt` run cannot be read.")
    waiting: Waiting | None = Field(default=None, description="Where a parked run waits: its open Gates, its open "
                                    "Turns (seat -> Allowed picks) and its next timer, as it stood when it parked. "
                                    "None for a live run (its `gates` and `turns` say) and for any other.")
    place: int | None = Field(default=None, ge=1, description="A queued run's place in the line for a slot (1 is "
                              "next), when known.")


class OpenGate(BaseModel):
    """One open Gate of one run: what `GET /gates` lists, so a person sees everything waiting for them."""

    run_id: str
    workflow: str
    gate: str = Field(description="The Gate's id: POST /runs/{run_id}/gates/{gate}/events answers it.")
    presence: str | None = Field(description="`live` or `parked` (a parked run wakes when the Gate is answered).")
    accepts_now: list[str] | None = Field(default=None, description="The events it accepts now (a live run's); "
                                          "None when read from a parked run's index line (GET /runs/{id} says).")
    created_at: float
    updated_at: float


class GateEvent(Strict):
    event: str = Field(description="The event to send through the Gate, e.g. 'reply'.")
    input: dict[str, Any] = Field(default_factory=dict, description="The event's payload (its JSON schema).")
    delivery_id: str | None = Field(default=None, description="Idempotency key: a repeat returns the first result.")


class GateEventResult(SendResult):
    active: list[str] = Field(default_factory=list)


class HarnessToken(BaseModel):
    """A scoped token good for one Turn's surface and picks only."""

    iid: str
    token: str


class Pick(Strict):
    name: str = Field(description="The Menu event the Agent picks (its tool name).")
    args: dict[str, Any] = Field(default_factory=dict)
    delivery_id: str | None = None


class TurnCache(BaseModel):
    """Cache reuse of one Turn: the Console's cache chart plots cached against prefilled tokens."""

    iid: str
    slot: str
    state: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    prefilled_tokens: int


class Telemetry(BaseModel):
    rows: list[dict[str, Any]]
    turns: list[TurnCache]


class AdmissionView(BaseModel):
    """Turn admission as this API sees it: whether the runs it starts wait for room in the KV cache, and the budget
    they would share (an operator checks it after `up`; `jr2ray status` shows it)."""

    on: bool = Field(description="Turn admission is on for the runs this API starts.")
    app: str = Field(description="The LLM app (Serve application name) whose KV budget the runs' Harnesses share.")
    budget: BudgetStats | None = Field(description="That budget actor's figures (capacity, held, waiting, ...); None "
                                                   "when no budget actor exists for the app.")


# OpenAPI `responses=` fragments the routers share.
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}}
BAD: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}}
TOO_LARGE: dict[int | str, dict[str, Any]] = {413: {"model": ErrorBody,
                                                    "description": "Body over 1 MiB, or a run input over the limit"}}
COMMON: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Not standard JSON, or a Host this API does not answer to"},
    401: {"model": ErrorBody, "description": "No or bad token"},
    403: {"model": ErrorBody, "description": "Token not scoped for this"},
    413: {"model": ErrorBody, "description": "Body over 1 MiB"},
    500: {"model": ErrorBody, "description": "A bug, answered as JSON"},
    503: {"model": UnavailableBody, "description": "The Run actor (or Ray) is not answering: retry after "
                                                   "Retry-After seconds"}}
