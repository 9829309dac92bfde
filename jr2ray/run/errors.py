"""The Run's small error hierarchy. Each maps to one HTTP status in serve/api/app.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .models import FirstAnswer, RunStatus


class RunError(Exception):
    """Base of every refusal a Run gives to a caller."""

    status_code = 400


class UnknownRun(RunError):
    status_code = 404


class UnknownWorkflow(RunError):
    status_code = 404


class UnknownGate(RunError):
    status_code = 404


class UnknownTurn(RunError):
    """No Turn at that address (or it ended): a Harness reads this as "turn over"."""

    status_code = 404


class BadRequest(RunError):
    """A payload that fails its schema, or a body that carries a `sender`."""

    status_code = 400


class Conflict(RunError):
    """The run would not take this event now; carries what it would take (`accepts_now`)."""

    status_code = 409

    def __init__(self, message: str, accepts_now: list[str]) -> None:
        super().__init__(message)
        self.accepts_now = accepts_now

    def __reduce__(self) -> tuple[type[Conflict], tuple[str, list[str]]]:  # keep accepts_now across Ray's pickling
        return (Conflict, (str(self), self.accepts_now))


class RunDrifted(RunError):
    """The journal was written by a Machine of another shape (digest); the run is readable, never resumed."""

    status_code = 409


class RunLost(RunError):
    """The run's journal is gone: it is reported, never re-run from its input."""

    status_code = 410


class RunCorrupt(RunError):
    """The run's journal cannot be read or was damaged: the run stops writing and says why."""

    status_code = 409


class AnswerLost(RunError):
    """A write reached its run but its answer did not come back: it may have landed. Sent again blindly it could
    be applied twice (D12), so the caller reads the run first."""

    status_code = 503


class CatalogError(ValueError):
    """The workflow catalog is misconfigured (a module that does not import, a name two sources claim): a setup
    error found when the catalog is read, not a caller's refusal."""


class RunFenced(RunError):
    """Another activation of this run took its lease (a newer epoch in the journal): this one must not write."""


class InstanceDown(RunError, ConnectionError):
    """`connect()` found an instance recorded in <home>/instance.json whose Ray does not answer. It never starts a
    private Ray then (that Ray would serve the same store beside the real one)."""

    status_code = 503

    def __init__(self, home: object, address: str, reason: str) -> None:
        self.home, self.address, self.reason = str(home), address, reason
        super().__init__(f"the jr2ray instance of {home} (Ray at {address}) does not answer ({reason}); bring it "
                         "back with `jr2ray up` (or remove its instance.json if it is gone for good)")


def inner_error(exc: BaseException) -> BaseException:
    """The error inside Ray's wrappers (one per actor a call went through: a virtual run's call may be forwarded by
    its host). A caller gets the RunError itself, with its status code and a one-line message, not a remote
    traceback around it."""
    for _ in range(8):
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            return exc
        exc = cause
    return exc


class Untaken(Exception):  # noqa: N818 - not an error of its own
    """An activation refused for the Gate event it carried (`RunHost.adopt`): the run was not taken, so nothing of
    it changed. The driver raises the refusal it wraps as the event's own."""

    def __init__(self, refusal: RunError, woke: bool = False) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal
        self.woke = woke  # the run went live meanwhile (another caller's activation): its picks go to it


def gate_refusal(exc: BaseException) -> RunError | None:
    """The Gate's refusal inside an activation's error (the event it carried was refused at rest), else None."""
    cause = inner_error(exc)
    return cause if isinstance(cause, (UnknownGate, BadRequest, Conflict)) else None


def first_outcome(answer: FirstAnswer, delivery_id: str | None = None) -> Any:
    """The value of a write that rode with the activation it woke, or its error raised as from a call of its own."""
    if answer.error is not None:
        raise answer.error
    if answer.lost:
        again = (f"; sent again with delivery_id {delivery_id!r} it is applied once" if delivery_id else
                 ", so read the run (its history) before sending it again")
        raise AnswerLost(f"the answer to a write that woke its run was lost on its way back: it may have landed{again}")
    return answer.value


def raise_refusal(exc: BaseException) -> NoReturn:
    """A run's refusal (no such Gate, a bad payload) reaches the script as itself, in one line, not inside Ray's
    remote traceback; anything else is raised as Ray gave it."""
    cause = inner_error(exc)
    if isinstance(cause, RunError):
        raise cause from None
    raise exc


class RunEnded(RunError):
    """What a driver waited for cannot come: the run finished (or its Turn at that seat ended) first."""

    status_code = 409

    def __init__(self, message: str, status: RunStatus) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type[RunEnded], tuple[str, RunStatus]]:
        return (RunEnded, (str(self), self.status))
