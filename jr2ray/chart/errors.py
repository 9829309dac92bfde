"""The chart's small error hierarchy: load-time config errors and run-time guard errors."""

from __future__ import annotations


class ChartError(Exception):
    """Base of every error the statechart interpreter raises."""


class ChartConfigError(ChartError):
    """A config that cannot be loaded; the message names the state path and the offending name."""


class GuardError(ChartError):
    """A guard raised while a transition was selected; names the guard, the event and the state."""

    def __init__(self, guard: str, event_type: str, state: str, cause: BaseException) -> None:
        self.guard = guard
        self.event_type = event_type
        self.state = state
        self.cause = cause
        super().__init__(f"guard {guard!r} raised on event {event_type!r} in state {state!r}: {cause!r}")


class ActionError(ChartError):
    """An action (assign, an input or output function) raised while a transition was computed."""


class RestoreError(ChartError):
    """A persisted snapshot does not fit the machine it is restored into."""
