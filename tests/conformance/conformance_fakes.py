"""Fakes for the conformance tier: a recording OpenAI-compatible server and a scripted RunPort.

The server is a real HTTP server (FastAPI under uvicorn, in a thread), so the Harness is driven through the real
openai SDK and every request body is kept verbatim, as bytes and parsed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from jr2ray.harness.errors import TurnOver
from jr2ray.menu.models import MenuItem, Receipt, Surface

# ---------------------------------------------------------------------------------------------------------------------
# The recording model server.

Call = tuple[str, dict[str, Any]]


@dataclass
class Answer:
    """One scripted model answer: plain text, tool calls, or both. `before` runs when the request arrives."""

    text: str | None = None
    calls: list[Call] = field(default_factory=list)
    before: Callable[[], None] | None = None


def text(content: str, before: Callable[[], None] | None = None) -> Answer:
    return Answer(text=content, before=before)


def calls(*items: Call, before: Callable[[], None] | None = None) -> Answer:
    return Answer(calls=list(items), before=before)


@dataclass
class Recorded:
    raw: bytes
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.body.get("tools", [])


def _prompt_bytes(body: dict[str, Any]) -> bytes:
    """What a prefix cache would see: the tools, then the messages, in request order."""
    return json.dumps([body.get("tools", []), body.get("messages", [])]).encode()


class FakeModelServer:
    """An OpenAI-compatible `/v1/chat/completions` that plays a queue of answers and records every request."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: deque[Answer] = deque()
        self.exhausted = False
        self._lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._complete)
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.script.clear()
            self.exhausted = False

    def push(self, *answers: Answer) -> None:
        with self._lock:
            self.script.extend(answers)

    async def _complete(self, request: Request) -> JSONResponse:
        raw = await request.body()
        body = json.loads(raw)
        with self._lock:
            previous = self.requests[-1].body if self.requests else None
            self.requests.append(Recorded(raw=raw, body=body))
            index = len(self.requests)
            answer = self.script.popleft() if self.script else None
            if answer is None:
                self.exhausted = True
        if answer is None:
            return JSONResponse({"error": {"message": "script exhausted", "type": "fake"}}, status_code=500)
        if answer.before is not None:
            answer.before()
        prompt = _prompt_bytes(body)
        cached = 0
        if previous is not None:
            before = _prompt_bytes(previous)
            while cached < min(len(prompt), len(before)) and prompt[cached] == before[cached]:
                cached += 1
        tool_calls = [
            {
                "id": f"call_{index}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(answer.calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return JSONResponse(
            {
                "id": f"chatcmpl-{index}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if tool_calls else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": 1,
                    "total_tokens": len(prompt) // 4 + 1,
                    "prompt_tokens_details": {"cached_tokens": cached // 4},
                },
            }
        )

    def start(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-openai", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake model server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeModelServer:
        """Started for a `with` block (a fixture's lifetime), stopped after it."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------------------------------
# The scripted RunPort: the notes workflow (workflows/notes.py), as a small state machine, plus one later state.

MENU = [
    MenuItem(
        name="ask",
        description="Ask the editor one question. The editor's reply is the answer to this call.",
        parameters={
            "properties": {
                "question": {"description": "One question for the editor.", "title": "Question", "type": "string"}
            },
            "required": ["question"],
            "title": "AskInput",
            "type": "object",
        },
    ),
    MenuItem(
        name="done",
        description="Call this once, with the finished release notes. Then stop.",
        parameters={
            "properties": {
                "notes": {"description": "The release notes, in Markdown.", "title": "Notes", "type": "string"}
            },
            "required": ["notes"],
            "title": "DoneInput",
            "type": "object",
        },
    ),
    MenuItem(
        name="revise",
        description="Hand in the revised notes after the review.",
        parameters={
            "properties": {"notes": {"title": "Notes", "type": "string"}},
            "required": ["notes"],
            "title": "ReviseInput",
            "type": "object",
        },
    ),
]
_FIELDS = {"ask": "question", "done": "notes", "revise": "notes"}
_HANDLED = {"drafting": ("ask", "done"), "reviewing": ("revise",)}  # each state's derived set


class NotesPort:
    """`writing.drafting` allows ask, and done once the editor replied; `done` leaves `writing` for `reviewing`
    (same address, so a continued conversation reads it), where `revise` ends the run. `asking` is a Gate that is
    still open: nothing is allowed, and every pick is refused (D1)."""

    def __init__(self, *, reviewing_after_done: bool = False) -> None:
        self.state = "drafting"
        self.replies = 0
        self.reviewing_after_done = reviewing_after_done
        self.log: list[tuple[str, Any]] = []
        self.picks: list[tuple[str, dict[str, Any]]] = []
        self.faults: list[str] = []
        self.notices: list[str] = []

    def allowed(self) -> list[str]:
        if self.state == "drafting":
            return ["ask", "done"] if self.replies > 0 else ["ask"]
        if self.state == "reviewing":
            return ["revise"]
        return []

    # An outside party moving the Machine (a Gate's event the Agent did not pick).
    def editor_replies(self) -> None:
        self.replies += 1
        self.state = "drafting"

    def open_gate(self) -> None:
        self.state = "asking"

    async def surface(self, iid: str) -> Surface:
        allowed = self.allowed()
        self.log.append(("surface", allowed))
        if self.state in ("published", "closed"):
            raise TurnOver(iid)
        return Surface(menu=MENU, allowed=allowed, notices=list(self.notices))

    def _receipt(self, name: str, **kw: Any) -> Receipt:
        base: dict[str, Any] = {"delivered": False, "moved": False, "turn_complete": False, "pick": name}
        base.update(kw)
        base.setdefault("allowed", self.allowed())
        return Receipt(**base)

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        self.log.append(("pick", name))
        self.picks.append((name, args))
        if self.state in ("published", "closed"):
            raise TurnOver(iid)
        if self.state == "asking":
            return self._receipt(name, refused="not_at_rest", allowed=[])
        if name not in _FIELDS:
            return self._receipt(name, refused="off_menu")
        if name not in _HANDLED.get(self.state, ()):  # D3 before D4: another state's pick, whatever its arguments
            return self._receipt(name, refused="other_state")
        if not isinstance(args.get(_FIELDS[name]), str):
            return self._receipt(name, refused="bad_args", detail=f"{_FIELDS[name]}: Field required")
        if name == "ask" and self.state == "drafting":
            self.replies += 1  # the editor answers at once; the Gate's route returns to drafting
            return self._receipt(
                name, delivered=True, moved=True, answer=f"The editor replied: yes ({args['question']})"
            )
        if name == "done" and self.state == "drafting":
            if self.replies == 0:
                return self._receipt(name, delivered=True)  # the guard on done reads only context
            if self.reviewing_after_done:
                self.state = "reviewing"
                self.notices = ["The notes were published."]
            else:
                self.state = "published"
            return self._receipt(
                name, delivered=True, moved=True, turn_complete=True, allowed=[], answer="The notes were published."
            )
        if name == "revise" and self.state == "reviewing":
            self.state = "closed"
            return self._receipt(name, delivered=True, moved=True, turn_complete=True, allowed=[])
        return self._receipt(name, refused="other_state")

    async def fault(self, iid: str, reason: str) -> None:
        self.log.append(("fault", reason))
        self.faults.append(reason)
