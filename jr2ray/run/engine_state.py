"""What the parts of RunEngine share: its state and the few journal and lifecycle calls each part makes.

Turns, Gates and Effects are mixins over this base, so each part reads like a small class of its own and the type
checker sees every name it uses. RunEngine (engine.py) implements the calls.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from jr2ray.authoring import Jr2Machine
from jr2ray.chart import Event, Interpreter, Snapshot
from jr2ray.menu import Receipt
from jr2ray.settings import Settings

from .models import RunStatusName
from .replay import Pending
from .store import LedgerKind

if TYPE_CHECKING:
    from .turns import Turn, TurnLauncher


class EngineState:
    machine: Jr2Machine
    run_id: str
    interp: Interpreter | None
    launcher: TurnLauncher | None
    settings: Settings  # the settings of the process that hosts the run, read where it started (never here)
    turns: dict[str, Turn]
    run_status: RunStatusName
    broken: str | None
    _receipts: dict[str, tuple[str, Receipt]]
    _gate_receipts: dict[str, str]
    _replayed_pending: dict[str, Pending]
    _pending_notices: dict[str, list[str]]
    _effects_started: set[str]
    _effects_finished: dict[str, dict[str, Any]]
    _tasks: set[asyncio.Task[Any]]
    _delivering: Event | None
    _holding: bool  # a pick is being delivered: a quiet macrostep is written with its receipt (engine._on_commit)

    @property
    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    def status_name(self) -> RunStatusName:
        raise NotImplementedError

    def _usable(self) -> None:
        raise NotImplementedError

    def _stage(self, kind: LedgerKind | str, key: str | None, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def _flush(self, snapshot: dict[str, Any] | None = None) -> None:
        raise NotImplementedError

    def _emit(self, kind: str, data: dict[str, Any], durable: bool = True) -> None:
        raise NotImplementedError

    def _find_turn(self, address: str) -> Turn:
        raise NotImplementedError
