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


RETRY_AFTER_S = 2


class RunUnavailable(RunError):
    """The Run actor died and Ray is restarting it (or Ray itself is not answering): try again."""

    status_code = 503


class InputTooLarge(RunError):
    status_code = 413


class VersionGone(RunError):
    """The run's own version is not in the store (it is drifted): what needs its code cannot be answered."""

    status_code = 409


class KeyReused(RunError):
    """An `Idempotency-Key` already started a run with another input."""

    status_code = 409


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
    retry_after: int | None = None  # 503: say `Retry-After` (header and body)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detail": self.detail}
        if self.accepts_now is not None:
            out["accepts_now"] = self.accepts_now
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        return out

    def headers(self) -> dict[str, str]:
        out = {"WWW-Authenticate": "Bearer"} if self.challenge else {}
        if self.retry_after is not None:
            out["Retry-After"] = str(self.retry_after)
        return out


# ---- 401 / 403 / 413, answered by the middleware before a route runs ----------------------------------------------
def no_token_yet() -> Refusal:
    return Refusal(401, "this jr2ray instance has no token yet: run `jr2ray up`", challenge=True)


def bad_token() -> Refusal:
    return Refusal(401, "missing or invalid token: send 'Authorization: Bearer <token>'", challenge=True)


def harness_out_of_scope(iid: str | None) -> Refusal:
    return Refusal(403, f"a Harness token may only read the surface of and pick for its own Turn {iid}")


class TokenOver(RunError):
    """A Harness token's Turn is over: raised by the picks route, which learns it from the pick itself."""

    status_code = 401


def turn_ended(iid: str, run_id: str, run_live: bool) -> Refusal:
    """401: a Harness token is good while its Turn lasts, and this one's Turn is over (or its run is)."""
    return Refusal(401, _token_over_text(iid, run_id, run_live), challenge=True)


def token_over(iid: str, run_id: str, run_live: bool) -> TokenOver:
    """`turn_ended` as the error a route raises."""
    return TokenOver(_token_over_text(iid, run_id, run_live))


def _token_over_text(iid: str, run_id: str, run_live: bool) -> str:
    why = "its Turn has ended" if run_live else f"run {run_id} is not live"
    return f"the Harness token of Turn {iid} no longer works: {why}"


def body_too_large(limit: int) -> Refusal:
    return Refusal(413, f"request body over {limit} bytes")


def not_strict_json(reason: str) -> Refusal:
    """400 for a body that parses but could not be stored and read back as standard UTF-8 JSON."""
    return Refusal(400, f"the body is not standard JSON: {reason}")


def unknown_host(host: str) -> Refusal:
    """The Host header names none of the API's configured names (a DNS-rebinding page would send its own)."""
    return Refusal(400, f"Host {host!r} is not a name this API answers to; add it to JR2RAY_API_HOSTS")


def no_model_here(path: str, base: str) -> Refusal:
    """404 to a model client that called this API: it names what is missing and how to provide it."""
    return Refusal(404, f"no model is served at {base}{path}: that address is the jr2ray API (`jr2ray up` ran "
                        "without --llm). Serve one with `jr2ray up --llm cpu` (its base URL ends in /llm/v1), or "
                        "set JR2RAY_LOCAL_BASE_URL to an OpenAI-compatible server")


def unexpected(exc: BaseException) -> Refusal:
    """A bug, answered as JSON rather than a bare text 500."""
    return Refusal(500, f"internal error ({type(exc).__name__}); the request may not have been applied")


# ---- 503, answered by the middleware in Serve's proxy (serve/api/proxy.py) for the proxy's own errors ------------
RETRY_SAFE = "a pick or Gate event retried with the same delivery_id is applied once"


def replica_gone() -> Refusal:
    """The API's replica stopped while it had this request (Serve restarts it): nothing says how far it got."""
    return Refusal(503, "the API's replica stopped while handling this request and is restarting; retry shortly "
                        f"({RETRY_SAFE})", retry_after=RETRY_AFTER_S)


def api_timed_out(timeout_s: float | None) -> Refusal:
    """No answer began within the proxy's request timeout: a replica restarting, or a pick still waiting for Rest."""
    within = f" within {timeout_s:g} s" if timeout_s else ""
    return Refusal(503, f"the API did not answer{within} (its replica may be restarting, or the request is still "
                        f"waiting for Rest); retry shortly ({RETRY_SAFE})", retry_after=RETRY_AFTER_S)


def api_not_answering(waited_s: float) -> Refusal:
    """No answer began, and the API's own /healthz did not answer either: its replica is dead or restarting."""
    return Refusal(503, f"the API's replica is not answering (no answer within {waited_s:g} s, and none to a health "
                        f"check; it is restarting); retry shortly ({RETRY_SAFE})", retry_after=RETRY_AFTER_S)


def api_unavailable(reason: str) -> Refusal:
    """Serve says the API deployment cannot take requests now."""
    return Refusal(503, f"the API is not available ({reason}); retry shortly", retry_after=RETRY_AFTER_S)


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


def version_gone(run_id: str, reason: str) -> VersionGone:
    """A drifted run: its own version is not in the store, so its chart cannot be drawn (the file's may differ)."""
    return VersionGone(f"run {run_id} is drifted: {reason}")


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


def key_reused(key: str, run_id: str) -> KeyReused:
    return KeyReused(f"Idempotency-Key {key!r} already started run {run_id} with another input; a retry sends the "
                     f"same input, a new start a new key")


def input_too_large(size: int, limit: int) -> InputTooLarge:
    return InputTooLarge(f"the run's input is {size} bytes as JSON, over the limit of {limit} bytes "
                         f"(setting max_run_input, JR2RAY_MAX_RUN_INPUT)")


def bad_cursor(reason: str) -> BadRequest:
    return BadRequest(f"cursor is not one this instance made ({reason}); use a page's x-next-cursor header as it is")


def bad_where(raw: str, allowed: tuple[str, ...]) -> BadRequest:
    """400 for a `where=` filter that names no place a run can be."""
    return BadRequest(f"where must be one of {', '.join(allowed)}, got {raw[:40]!r}")


def bad_prefix(raw: str) -> BadRequest:
    """400 for a `prefix=` that no run id could start with."""
    return BadRequest(f"prefix must be 1 to 64 of A-Z, a-z, 0-9, '_' or '-' (the start of a run id), got {raw[:80]!r}")


def bad_workflow_filter(raw: str) -> BadRequest:
    return BadRequest(f"workflow must be a workflow's name (letters, digits, '_', '.', '-'), got {raw[:80]!r}")


def bad_last_event_id(raw: str) -> BadRequest:
    return BadRequest(f"Last-Event-ID must be an event number (ASCII digits), got {raw!r}")


def not_live(run_id: str, at_gate: bool) -> Refusal:
    """409: the run is over or its actor is gone; a Gate's 409 always says what it accepts now (nothing)."""
    detail = f"run {run_id} has no live Run actor (its journal is readable at GET /runs/{run_id})"
    return Refusal(409, detail, [] if at_gate else None)


def run_error(exc: RunError) -> Refusal:
    """A RunError (the Run's own wording) as its status; a Conflict also says what is accepted now, a 503 when to
    retry."""
    return Refusal(exc.status_code, str(exc), list(exc.accepts_now) if isinstance(exc, Conflict) else None,
                   challenge=exc.status_code == 401, retry_after=RETRY_AFTER_S if exc.status_code == 503 else None)


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
