"""The one interface through which a Harness talks to its Run."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from jr2ray.menu.models import Receipt, Surface
from jr2ray.run.models import Transcript, TranscriptEntry


@runtime_checkable
class RunPort(Protocol):
    """What the Run offers an Agent's Turn, addressed by the Turn's instance id (`iid`).

    The Run layer provides adapters (in-process, Ray actor handle). Keeping the Harness behind this Protocol is what
    lets the conformance tier drive it with a scripted fake.
    """

    async def surface(self, iid: str) -> Surface:
        """The Menu and the Allowed picks now. Raises `TurnOver` when the address is gone (like a 404).

        A Surface with `turn_over=True` means the same thing.
        """
        ...

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        """Deliver one pick and return its receipt (D1-D10). An outstanding pick's receipt waits until Rest.

        The same `delivery_id` sent again (a retry after the Run restarted) gets the same receipt, or waits for it.
        """
        ...

    async def fault(self, iid: str, reason: str) -> None:
        """Report that this Turn cannot go on; the Run routes `agent.fault`."""
        ...


@runtime_checkable
class TranscriptPort(Protocol):
    """A RunPort whose Run also journals the conversation, so a Harness started again for the same Turn (the old one
    died, or the Run restarted) continues it. A port without these (a scripted fake) keeps no transcript."""

    async def record(self, iid: str, entry: TranscriptEntry) -> None:
        """Journal messages this Turn sent or received. A retry of what the journal has changes nothing."""
        ...

    async def transcript(self, iid: str) -> Transcript:
        """The Turn's conversation as journaled."""
        ...


@runtime_checkable
class WaitPort(Protocol):
    """A RunPort whose Run may park while a Turn waits for Turn admission (a virtual run on a pooled host)."""

    async def waits(self, iid: str, key: str | None) -> None:
        """This Turn waits for room in the KV budget under admission key `key`; None: it was let in, and its
        request goes out now. While it waits, its run may park: the Run ends this Harness and the budget wakes the
        run when the share is granted."""
        ...
