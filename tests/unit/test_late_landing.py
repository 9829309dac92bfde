"""A write whose caller stopped waiting (`jr2ray.run.watching.answer_of`): the host noted the standing it carried
as told to the handle's named watch, so that standing must still reach the handle when the answer comes, or the
watch would wait past news the driver never had. An answer without one, or an error, is simply dropped."""

from __future__ import annotations

import asyncio
from typing import Any

from jr2ray.run.models import Carried, FirstAnswer, RunStatus, Standing, Waiting
from jr2ray.run.watching import answer_of


class _Handle:
    def __init__(self) -> None:
        self.landed_with: list[Any] = []

    def landed(self, got: Any) -> Any:
        self.landed_with.append(got)
        return got


def _standing() -> Standing:
    return Standing(status=RunStatus(id="run-1", workflow="notes", digest="d", status="active"),
                    waiting=Waiting(gates=[]), version=3)


def _late(answer: Any) -> list[Any]:
    """Cancel the caller of `answer_of` while the answer is on its way, then let the answer come."""
    async def go() -> list[Any]:
        handle = _Handle()
        loop = asyncio.get_running_loop()
        ref = loop.create_future()  # stands for a Ray ObjectRef (awaitable)
        caller = asyncio.ensure_future(answer_of(handle, ref))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        if isinstance(answer, BaseException):
            ref.set_exception(answer)
        else:
            ref.set_result(answer)
        for _ in range(3):
            await asyncio.sleep(0)
        return handle.landed_with

    return asyncio.run(go())


def test_a_carried_standing_is_landed_though_its_caller_stopped_waiting() -> None:
    carried = Carried(value="sent", standing=_standing())
    assert _late(carried) == [carried]


def test_an_activations_answer_lands_the_standing_its_write_carried() -> None:
    carried = Carried(value="sent", standing=_standing())
    assert _late(["host", FirstAnswer(value=carried)]) == [carried]


def test_a_plain_answer_or_an_error_lands_nothing() -> None:
    assert _late("sent") == [] and _late(RuntimeError("gone")) == []


def test_an_answer_awaited_to_the_end_is_handed_back_and_not_landed_twice() -> None:
    async def go() -> tuple[Any, list[Any]]:
        handle = _Handle()
        ref = asyncio.get_running_loop().create_future()
        ref.set_result(Carried(value="sent", standing=_standing()))
        return await answer_of(handle, ref), handle.landed_with

    got, landed = asyncio.run(go())
    assert isinstance(got, Carried) and landed == []  # the caller lands it itself
