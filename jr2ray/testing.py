"""Helpers for tests and driver scripts: `ScriptedAgent` plays one Agent seat of a run from a script of picks.

It drives a seat the way an external Harness would, over surface and pick, so it works with any seat whose
workflow says `driver="external"`, or with every seat of a run started with `launcher=None` (no Harness at all).
It works on a `RunHandle` (a Ray actor, from `jr2ray.connect()`) and on an in-process `LocalRun` alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jr2ray.menu import Receipt, Surface
from jr2ray.run.errors import RunError

ArgsFn = Callable[[Receipt | None], dict[str, Any]]


class Step(BaseModel):
    """One pick of a script. `args` may be a function of the previous receipt (None for the first step)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    args: dict[str, Any] | ArgsFn = Field(default_factory=dict)
    expect_refusal: str | None = Field(default=None, description="The refusal this pick should get, if any.")


StepLike = Step | str | tuple[str, dict[str, Any]] | tuple[str, ArgsFn]


class ScriptError(RuntimeError):
    """The run did not follow the script: a pick was refused, or the seat's Turn ended or never opened in time."""

    def __init__(self, message: str, receipts: list[Receipt]) -> None:
        super().__init__(message)
        self.receipts = receipts


def _step(item: StepLike) -> Step:
    if isinstance(item, Step):
        return item
    if isinstance(item, str):
        return Step(name=item)
    name, args = item
    return Step(name=name, args=args)


class ScriptedAgent:
    """Plays `seat` from `script`, one pick at a time, each once the seat's Turn is at Rest.

    A pick whose route opens a Gate waits for Rest (the receipt comes when the Gate is answered); with
    `play_async` that wait blocks nothing else, so one asyncio driver can play many runs and answer their Gates.
    A refused pick raises ScriptError, unless the step names that refusal in `expect_refusal`.
    """

    def __init__(self, seat: str, script: Sequence[StepLike], *, timeout: float = 120.0, poll_s: float = 0.05,
                 delivery_prefix: str = "script") -> None:
        self.seat = seat
        self.script = [_step(s) for s in script]
        self.timeout = timeout
        self.poll_s = poll_s
        self.delivery_prefix = delivery_prefix

    async def play_async(self, run: Any) -> list[Receipt]:
        """Play the whole script on `run`; returns one receipt per step."""
        receipts: list[Receipt] = []
        for i, step in enumerate(self.script):
            await self._await_rest(run, step, receipts)
            args = step.args(receipts[-1] if receipts else None) if callable(step.args) else step.args
            receipt = await self._pick(run, step.name, args, f"{self.delivery_prefix}-{i}")
            receipts.append(receipt)
            if receipt.refused != step.expect_refusal:
                got = receipt.refused or "delivered"
                raise ScriptError(f"step {i} ({step.name!r}) of seat {self.seat!r}: expected "
                                  f"{step.expect_refusal or 'delivery'}, got {got}"
                                  f"{': ' + receipt.detail if receipt.detail else ''}", receipts)
        return receipts

    def play(self, run: Any) -> list[Receipt]:
        """`play_async` for a synchronous driver (not inside a running event loop)."""
        return asyncio.run(self.play_async(run))

    async def _await_rest(self, run: Any, step: Step, receipts: list[Receipt]) -> None:
        """Until the seat's Turn is at Rest. A run that pushes its changes (`until_turn`: a virtual run) is waited
        on, not polled; the step's timeout counts from when the seat's Turn opens, so a run that waits long in
        line or parked does not fail the script."""
        if hasattr(run, "until_turn"):
            from jr2ray.run.errors import RunEnded

            try:
                await run.until_turn(self.seat, timeout=self.timeout, counted_from_open=True)
            except RunEnded as exc:
                raise ScriptError(f"seat {self.seat!r} will not be ready for {step.name!r}: {exc}", receipts) from None
            except TimeoutError:
                raise ScriptError(f"seat {self.seat!r} opened its Turn but was not at Rest for {step.name!r} "
                                  f"within {self.timeout:.0f}s", receipts) from None
            return
        deadline = time.monotonic() + self.timeout
        last = "the seat's Turn never opened"
        while time.monotonic() < deadline:
            try:
                surface = await self._surface(run)
            except RunError as exc:  # no Turn at this seat yet
                last = str(exc)
            else:
                if surface.turn_over and receipts:
                    raise ScriptError(f"the Turn of seat {self.seat!r} ended before step {step.name!r}", receipts)
                if surface.allowed and not surface.turn_over:
                    return
                last = "the Turn is not at Rest"
            await asyncio.sleep(self.poll_s)
        raise ScriptError(f"seat {self.seat!r} was not ready for {step.name!r} within {self.timeout:.0f}s: {last}",
                          receipts)

    async def _surface(self, run: Any) -> Surface:
        if hasattr(run, "surface_async"):
            return await run.surface_async(self.seat)
        return run.surface(self.seat)

    async def _pick(self, run: Any, name: str, args: dict[str, Any], delivery_id: str) -> Receipt:
        out = run.pick_async(self.seat, name, args, delivery_id) if hasattr(run, "pick_async") else \
            run.pick(self.seat, name, args, delivery_id)
        return await out


__all__ = ["ScriptError", "ScriptedAgent", "Step"]
