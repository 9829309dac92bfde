"""`until_turn(..., counted_from_open=True)` (what `ScriptedAgent` waits with) on a virtual run's handle: a Turn found
already at Rest when it is first seen open is answered from that one look, with no second watch of the run; a Turn
that opens before it is at Rest is waited for again, with the timeout counted from the opening."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from jr2ray.run.models import RunStatus, Standing, TurnView, Waiting
from jr2ray.run.virtual import VirtualRunHandle


def _standing(allowed: list[str] | None) -> Standing:
    turn = TurnView(iid="t1", slot="writer", state="notes.writing", active=True, conversation="c1", allowed=allowed)
    status = RunStatus(id="run-1", workflow="notes", digest="d", status="active", turns=[turn])
    return Standing(status=status, waiting=Waiting.of(status))


def _watches(monkeypatch: pytest.MonkeyPatch, seen: list[Standing]) -> list[str]:
    """Each `_until` (one watch of the run, shared by its waiters) answers with the next standing its test accepts."""
    asked: list[str] = []

    async def until(self: VirtualRunHandle, want: Callable[[Standing], bool], what: str) -> Standing:
        asked.append(what)
        return next(st for st in seen if want(st))

    async def direct(self: VirtualRunHandle, coro: Coroutine[Any, Any, Any]) -> Any:
        return await coro
    monkeypatch.setattr(VirtualRunHandle, "_until", until)
    monkeypatch.setattr(VirtualRunHandle, "_async", direct)
    return asked


def test_a_turn_at_rest_when_first_seen_open_takes_one_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _watches(monkeypatch, [_standing(["ask", "done"])])
    st = asyncio.run(VirtualRunHandle("run-1", registry=None).until_turn("writer", timeout=5, counted_from_open=True))
    assert st.waiting.turns == {"writer": ["ask", "done"]}
    assert len(asked) == 1, asked


def test_a_turn_open_but_not_at_rest_is_waited_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _watches(monkeypatch, [_standing(None), _standing(["done"])])
    st = asyncio.run(VirtualRunHandle("run-1", registry=None).until_turn("writer", timeout=5, counted_from_open=True))
    assert st.waiting.turns == {"writer": ["done"]}
    assert len(asked) == 2, asked
