"""Every HTTP refusal the API words: status codes and reason texts, in one place.

Why one module: a refusal is the API's half of a conversation with a person or a Harness. Worded once, the same
mistake reads the same on every route, and a reviewer sees all of them together. Errors raised by the Run (its
`RunError`s) are worded in the run layer and passed through unchanged.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from fastapi.exceptions import RequestValidationError

from jr2ray.run.errors import BadRequest, Conflict, RunError, UnknownRun, UnknownTurn, UnknownWorkflow

SENDER = "'sender' is written by jr2ray; {where} may not carry it"
WHERE_BODY = "a body"
WHERE_EVENT_INPUT = "an event's input"
WHERE_PICK_ARGS = "a pick's args"


class RunUnavailable(RunError):
    """The Run actor died and Ray is restarting it: try again."""

    status_code = 503


class Forbidden(RunError):
    status_code = 403


class NotLive(Exception):
    """The run has a journal but no Run actor: readable, not drivable (answered 409)."""


class Refusal(NamedTuple):
    """A refusal answered outside a route (middleware, exception handlers): its status and its JSON body."""

    status: int
    detail: str
    accepts_now: list[str] | None = None
    challenge: bool = False  # 401: say `WWW-Authenticate: Bearer`

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail} if self.accepts_now is None else {"detail": self.detail,
                                                                          "accepts_now": self.accepts_now}


# ---- 401 / 403 / 413, answered by the middleware before a route runs ----------------------------------------------
def no_token_yet() -> Refusal:
    return Refusal(401, "this jr2ray instance has no token yet: run `jr2ray up`", challenge=True)


def bad_token() -> Refusal:
    return Refusal(401, "missing or invalid token: send 'Authorization: Bearer <token>'", challenge=True)


def harness_out_of_scope(iid: str | None) -> Refusal:
    return Refusal(403, f"a Harness token may only read the surface of and pick for its own Turn {iid}")


def body_too_large(limit: int) -> Refusal:
    return Refusal(413, f"request body over {limit} bytes")


# ---- raised by routes --------------------------------------------------------------------------------------------
def sender_refused(where: str) -> BadRequest:
    return BadRequest(SENDER.format(where=where))


def no_sender(payload: dict[str, Any], where: str) -> None:
    """400 when a caller tries to write the Sender (jr2ray alone writes who sent an event)."""
    if "sender" in payload:
        raise sender_refused(where)


def harness_acts_for_other(iid: str | None) -> Forbidden:
    return Forbidden(f"a Harness token may only act for its own Turn {iid}")


def unknown_workflow(name: str) -> UnknownWorkflow:
    return UnknownWorkflow(f"no workflow {name!r}")


def unknown_run(run_id: str) -> UnknownRun:
    return UnknownRun(f"no run {run_id!r}")


def bad_iid(iid: str) -> UnknownTurn:
    return UnknownTurn(f"no Agent {iid!r} (an Agent id looks like <run id>.t<seq>)")


def unknown_agent(iid: str) -> UnknownTurn:
    return UnknownTurn(f"no Agent {iid!r}")


def no_live_turn(iid: str, run_id: str) -> UnknownTurn:
    return UnknownTurn(f"no live Turn {iid!r} in run {run_id}")


def bad_input(reason: str) -> BadRequest:
    """The door schema refused a run's input: `reason` is the schema's own message."""
    return BadRequest(reason)


def run_unavailable(kind: str) -> RunUnavailable:
    return RunUnavailable(f"the Run actor is not answering ({kind}); retry shortly")


def not_live(run_id: str, at_gate: bool) -> Refusal:
    """409: the run is over or its actor is gone; a Gate's 409 always says what it accepts now (nothing)."""
    detail = f"run {run_id} has no live Run actor (its journal is readable at GET /runs/{run_id})"
    return Refusal(409, detail, [] if at_gate else None)


def run_error(exc: RunError) -> Refusal:
    """A RunError (the Run's own wording) as its status; a Conflict also says what is accepted now."""
    return Refusal(exc.status_code, str(exc), list(exc.accepts_now) if isinstance(exc, Conflict) else None)


# ---- 400 for a body FastAPI could not validate -------------------------------------------------------------------
def invalid_body(exc: RequestValidationError) -> Refusal:
    return Refusal(400, validation_detail(exc))


def validation_detail(exc: RequestValidationError) -> str:
    """One sentence for the first thing wrong with a body (malformed JSON, a stray `sender`, a missing field...)."""
    parts = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        kind = e.get("type")
        if kind == "json_invalid":
            ctx = e.get("ctx", {}) or {}
            where = f" (at character {loc[-1]})" if loc and loc[-1].isdigit() else ""
            return f"malformed JSON body: {ctx.get('error', e.get('msg'))}{where}"
        if kind == "extra_forbidden" and loc and loc[-1] == "sender":
            return SENDER.format(where=WHERE_BODY)
        if not loc and kind == "missing":
            return "a JSON object body is required"
        if kind == "model_attributes_type" or (not loc and kind == "dict_type"):
            return _not_an_object(e.get("input"))
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg')}")
    return "invalid request: " + "; ".join(parts)


def _not_an_object(raw: Any) -> str:
    if isinstance(raw, (bytes, str)):  # sent without a JSON content type: say what is wrong with it
        try:
            json.loads(raw)
        except ValueError as err:
            return f"malformed JSON body: {err}"
        return "send the body as JSON (Content-Type: application/json)"
    return "the body must be a JSON object"
