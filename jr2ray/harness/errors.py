"""The Harness's error hierarchy, httpx style: one base, a few leaves a caller can tell apart."""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the Harness raises on purpose."""


class ProviderError(HarnessError):
    """A model provider failed to answer (after its own client's retries)."""

    def __init__(self, message: str, *, status_code: int | None = None, provider: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.provider = provider


class TurnOver(HarnessError):
    """The Turn's address is gone (like a 404): its state exited. The Harness stops at once and says nothing."""


class Aborted(HarnessError):
    """The Turn was aborted from outside (state exit, run cancel). Nothing more is read or said."""


def is_turn_over(exc: BaseException) -> bool:
    """Whether `exc` means the Turn is over.

    The Run layer may raise its own `TurnOver` (packages do not import each other upward), and a Ray actor call wraps
    the original in a `RayTaskError` that keeps it as `cause`. So match by class name along the cause chain.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if any(cls.__name__ == "TurnOver" for cls in type(cur).__mro__):
            return True
        cur = getattr(cur, "cause", None) or cur.__cause__
    return False
