"""A call on a hosted run packed as one `bytes` each way (`jr2ray.run.wire`): what the host's `call` is given and
what the caller gets back are what they were unpacked, and only the arguments that are not their defaults travel."""

from __future__ import annotations

import asyncio
import inspect
import sys
from pathlib import Path
from typing import Any

from ray_stand_ins import HostClass

from jr2ray.menu import Receipt
from jr2ray.run import wire
from jr2ray.run.models import Carried, NotHere


class _Recorder:
    """A host's `wire` method as Ray would carry it: the blob is all that crosses."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.wire = self

    def remote(self, blob: bytes) -> bytes:
        assert isinstance(blob, bytes)
        self.blobs.append(blob)
        return blob


def test_only_the_arguments_that_are_not_defaults_are_sent() -> None:
    host = _Recorder()
    wire.send(host, "run-1", "status", [])
    wire.send(host, "run-1", "pick", ["writer", "ask", {}, "d-1", "wake-1"], False)
    wire.send(host, "run-1", "pick", ["writer", "ask", {}, "d-2"], False, "watch-1")
    wire.send(host, "run-1", "send", ["g", "reply", {}, "d-3"], True, False, [["writer", "done", {}, "d-4"]])
    assert [wire.unpack(b) for b in host.blobs] == [
        ("run-1", "status", []),
        ("run-1", "pick", ["writer", "ask", {}, "d-1", "wake-1"], False),
        ("run-1", "pick", ["writer", "ask", {}, "d-2"], False, "watch-1"),
        ("run-1", "send", ["g", "reply", {}, "d-3"], True, False, [["writer", "done", {}, "d-4"]]),
    ]


def test_answers_come_back_as_they_were() -> None:
    receipt = Receipt(delivered=True, moved=False, turn_complete=False, allowed=["ask", "done"], detail="not at Rest",
                      delivery_id="d-1", pick="done")
    for answer in (receipt, Carried(value=receipt, standing=None, picks=[receipt, None]), NotHere(run_id="run-1"),
                   None, 7, [{"seq": 1}]):
        assert wire.unpack(wire.pack(answer)) == answer


def test_what_the_standard_pickler_refuses_goes_by_cloudpickle() -> None:
    def local(x: int) -> int:  # a function made in a function: pickle cannot name it
        return x + 1

    assert wire.unpack(wire.pack(local))(1) == 2


def test_the_host_serves_a_packed_call_as_its_call(monkeypatch: Any) -> None:
    """`RunHost.wire` is `RunHost.call` with its arguments unpacked and its answer packed."""
    seen: list[tuple[Any, ...]] = []

    async def call(self: Any, *args: Any) -> Any:
        seen.append(args)
        return NotHere(run_id=args[0])

    monkeypatch.setattr(HostClass, "call", call)
    host = HostClass.__new__(HostClass)
    blob = asyncio.run(host.wire(wire.pack(("run-1", "pick", ["writer", "ask", {}, "d-1"], False))))
    assert seen == [("run-1", "pick", ["writer", "ask", {}, "d-1"], False)]
    assert wire.unpack(blob) == NotHere(run_id="run-1")


def test_a_class_of_the_drivers_script_goes_by_value(monkeypatch: Any) -> None:
    """The standard pickler names a class of `__main__` and the host has no such module to find it in: such a value
    is sent whole (cloudpickle), as Ray sent it, and unpacks where `__main__` does not have it."""

    class Note:
        def __init__(self, text: str) -> None:
            self.text = text

    Note.__module__, Note.__qualname__ = "__main__", "Note"
    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "Note", Note, raising=False)
    blob = wire.pack({"note": Note("fix: crash")})
    monkeypatch.delattr(main, "Note")  # the host's __main__ is not the driver's
    assert wire.unpack(blob)["note"].text == "fix: crash"


def test_the_defaults_left_out_are_the_hosts() -> None:
    """What `send` leaves out must be what `RunHost.call` takes when it is left out."""
    params = inspect.signature(HostClass.call).parameters
    assert list(params)[1:7] == ["run_id", "method", "args", "forward", "standing", "carry"]
    assert tuple(params[name].default for name in ("forward", "standing", "carry")) == wire._DEFAULTS


def test_no_host_is_called_around_the_wire() -> None:
    """Every call on a hosted run from the product goes through `wire` (a plain `host.call.remote` would pay Ray's
    serializing of each argument again, and get an answer `wire.unpack` does not expect where it meets one)."""
    root = Path(__file__).resolve().parents[2]
    found = [f"{path.relative_to(root)}:{n}" for folder in ("jr2ray", "serve") for path in (root / folder).rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if ".call.remote(" in line]
    assert found == []
