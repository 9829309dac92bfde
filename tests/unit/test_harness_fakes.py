"""Shared in-memory fakes for the Harness unit tests: a scripted provider and a small RunPort."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from jr2ray.harness import (
    Conversation,
    Limits,
    ModelAnswer,
    ModelRequest,
    ProviderConfig,
    ProviderError,
    ProviderRegistry,
    ToolCall,
    TurnOver,
    TurnSpec,
)
from jr2ray.menu.models import MenuItem, Receipt, Surface

MENU = [
    MenuItem(name="ask", description="Ask.", parameters={"type": "object", "properties": {"q": {"type": "string"}}}),
    MenuItem(name="done", description="Done.", parameters={"type": "object", "properties": {}}),
]

Step = ModelAnswer | Callable[[ModelRequest], ModelAnswer]


class FakeProvider:
    """Plays answers; when the script runs out it keeps asking a fresh question, so loops can run long."""

    def __init__(self, *script: Step, kind: str = "local", endless: bool = False) -> None:
        self.kind = kind
        self.script = list(script)
        self.endless = endless
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        if self.script:
            step = self.script.pop(0)
            return step(request) if callable(step) else step
        if self.endless:
            n = len(self.requests)
            return pick(("ask", {"q": f"question {n}"}), id_=f"c{n}")
        raise ProviderError("script exhausted", provider="fake")


def pick(*items: tuple[str, Any], id_: str = "c") -> ModelAnswer:
    return ModelAnswer(
        tool_calls=[
            ToolCall(id=f"{id_}-{i}", name=n, arguments=a if isinstance(a, str) else json.dumps(a))
            for i, (n, a) in enumerate(items)
        ]
    )


def say(t: str) -> ModelAnswer:
    return ModelAnswer(text=t)


class Port:
    """`ask` moves in-state; `done` completes. `allowed` can be changed by the test between reads."""

    def __init__(self, allowed: list[str] | None = None) -> None:
        self.allowed = ["ask", "done"] if allowed is None else allowed
        self.reads = 0
        self.picks: list[tuple[str, dict[str, Any]]] = []
        self.faults: list[str] = []
        self.read_hook: Callable[[int], None] | None = None
        self.over = False
        self.pick_receipt: Receipt | None = None

    async def surface(self, iid: str) -> Surface:
        self.reads += 1
        if self.read_hook is not None:
            self.read_hook(self.reads)
        if self.over:
            raise TurnOver(iid)
        return Surface(menu=MENU, allowed=list(self.allowed))

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        self.picks.append((name, args))
        if self.pick_receipt is not None:
            return self.pick_receipt
        done = name == "done"
        return Receipt(delivered=True, moved=True, turn_complete=done, allowed=[] if done else list(self.allowed))

    async def fault(self, iid: str, reason: str) -> None:
        self.faults.append(reason)


def spec(**over: Any) -> TurnSpec:
    values: dict[str, Any] = {
        "run_id": "r",
        "iid": "r/w",
        "slot": "w",
        "state": "s",
        "prompt": "Do it.",
        "model": "local/m",
    }
    values.update(over)
    return TurnSpec(**values)


def conv(port: Port, provider: FakeProvider, **limits: Any) -> Conversation:
    registry = ProviderRegistry(ProviderConfig(), providers={provider.kind: provider})
    return Conversation(port, providers=registry, limits=Limits(**limits))
