"""The turn loop (H1-H9) as a pure-asyncio `Conversation`.

The Conversation keeps one append-only transcript, so each request is a prefix of the next (H6), and runs Turns on
it: read the surface, ask the model, deliver its picks through the `RunPort`, run its Working tools, and restate the
Allowed picks at a step boundary when they changed under it (H5). It holds no workflow logic: every verdict comes
from the Run's receipts, and every text from `jr2ray.menu.texts`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from jr2ray.harness.errors import HarnessError, ProviderError, is_turn_over
from jr2ray.harness.port import RunPort
from jr2ray.harness.providers import ProviderRegistry
from jr2ray.harness.spec import Limits, TurnResult, TurnSpec
from jr2ray.harness.telemetry import RequestTelemetry, TelemetrySink
from jr2ray.harness.transcript import Message, ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.working import WorkingTools
from jr2ray.menu import texts
from jr2ray.menu.models import MenuItem, Receipt, Surface
from jr2ray.menu.render import tools_bytes

log = logging.getLogger(__name__)


class _Fault(Exception):
    """Internal: the Turn cannot go on; report `agent.fault` with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Runaway(Exception):
    """Internal: a runaway limit tripped (H9); the caller decides between a re-roll and a fault."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _TurnState:
    """Counters and knowledge of one Turn. `last_read` is the newest Allowed list the model read."""

    spec: TurnSpec
    port: RunPort
    turn: int
    steps: int = 0
    attempt_steps: int = 0
    picks: int = 0
    nudges: int = 0
    rerolled: bool = False
    rerolls_used: int = 0
    last_read: list[str] = field(default_factory=list)
    streak_key: tuple[str, str] | None = None
    streak: int = 0
    end: TurnResult | None = None
    runaway: str | None = None
    tools_sha256: str | None = None
    masked: list[str] | None = None

    def fresh_attempt(self) -> None:
        """A re-roll starts its budgets over; the Turn's totals keep counting."""
        self.attempt_steps = 0
        self.nudges = 0
        self.streak_key = None
        self.streak = 0
        self.runaway = None

    def result(self, outcome: str, reason: str | None = None) -> TurnResult:
        return TurnResult(
            outcome=outcome,  # type: ignore[arg-type]
            reason=reason,
            steps=self.steps,
            picks=self.picks,
            nudges=self.nudges,
            rerolled=self.rerolled,
        )


def _call_key(call: ToolCall) -> tuple[str, str]:
    """Name plus arguments, with the arguments compared as JSON values when they parse."""
    try:
        canon = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except json.JSONDecodeError:
        canon = call.arguments
    return call.name, canon


def _parse_args(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments as a dict, or the tool result that says why they are not one JSON object."""
    raw = call.arguments or ""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return texts.bad_json_syntax(call.name, exc.msg, exc.pos)
    if not isinstance(value, dict):
        return texts.bad_json_type(call.name, type(value).__name__)
    return value


ToolsPolicy = Callable[[list[MenuItem], list[str], int], tuple[list[MenuItem], list[str] | None]]
"""For measurement only (benchmarks/prefix_cache): given the fixed tools, the Allowed picks the model last read and
the request index, the tools to send and the names to constrain decoding to. The product never sets one: it always
sends the fixed Menu (M2)."""


class Conversation:
    """One model conversation of one Agent slot. With `continue`, it spans Turns (H7); without, each Turn resets it."""

    def __init__(
        self,
        port: RunPort | None = None,
        *,
        providers: ProviderRegistry | None = None,
        limits: Limits | None = None,
        on_telemetry: TelemetrySink | None = None,
        tools_policy: ToolsPolicy | None = None,
    ) -> None:
        self.port = port
        self.providers = providers if providers is not None else ProviderRegistry()
        self.limits = limits if limits is not None else Limits()
        self.on_telemetry = on_telemetry
        self.tools_policy = tools_policy
        self.messages: list[Message] = []
        self.telemetry: list[RequestTelemetry] = []
        self.turns = 0
        self.system: str | None = None
        self.tools: list[MenuItem] | None = None
        self._working: WorkingTools | None = None
        self._task: asyncio.Task[TurnResult] | None = None
        self._aborted = False

    # -- public ---------------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def reset(self) -> None:
        """Forget the transcript: the next Turn starts a fresh conversation with the same system prompt and tools."""
        self.messages = []
        self.system = None
        self.tools = None
        self._working = None

    def abort(self) -> bool:
        """Cancel the running Turn. Nothing more is read or said for it (H5). False when no Turn runs."""
        if not self.running:
            return False
        self._aborted = True
        assert self._task is not None
        self._task.cancel()
        return True

    async def run_turn(self, spec: TurnSpec, port: RunPort | None = None) -> TurnResult:
        """Run one Turn to its end: a `turn_complete` receipt, a gone address, an abort or a fault."""
        if self.running:
            raise HarnessError("a Turn is already running on this conversation")
        if port is not None:
            self.port = port
        if self.port is None:
            raise HarnessError("no RunPort to talk to")
        self._aborted = False
        self.turns += 1
        state = _TurnState(spec=spec, port=self.port, turn=self.turns)
        self._task = asyncio.create_task(self._turn(state), name=f"jr2ray-turn:{spec.iid}")
        try:
            return await self._task
        except asyncio.CancelledError:
            if self._aborted and not _caller_cancelled():
                return state.result("aborted")
            raise
        finally:
            self._seal()
            self._task = None

    # -- the loop -------------------------------------------------------------------------------------------------

    async def _turn(self, st: _TurnState) -> TurnResult:
        while True:
            try:
                return await self._attempt(st)
            except _Runaway as exc:
                if not st.spec.continue_ and st.rerolls_used < self.limits.rerolls:
                    log.info("turn %s: %s; re-rolling a fresh conversation", st.spec.iid, exc.reason)
                    st.rerolls_used += 1
                    st.rerolled = True
                    st.fresh_attempt()
                    self.reset()
                    continue
                return await self._fault(st, exc.reason)
            except _Fault as exc:
                return await self._fault(st, exc.reason)

    async def _attempt(self, st: _TurnState) -> TurnResult:
        spec = st.spec
        if not spec.continue_:
            self.reset()
        surface = await self._start_read(st)
        if surface is None:
            return st.result("turn_over")
        self._open(spec, surface)
        self._append(Message(role="user", content=texts.turn_part(spec.prompt, surface.allowed, surface.notices)))
        st.last_read = list(surface.allowed)
        while True:
            if st.attempt_steps >= self.limits.max_steps:
                raise _Runaway(f"runaway: the Turn reached {self.limits.max_steps} steps")
            answer = await self._request(st)
            self._append(answer.as_message())
            if answer.tool_calls:
                await self._run_calls(st, answer.tool_calls)
                if st.end is not None:
                    return st.end
                if st.runaway is not None:
                    raise _Runaway(st.runaway)
                if await self._boundary(st):
                    return st.result("turn_over")
            elif not await self._after_stop(st):
                return st.result("turn_over")

    async def _start_read(self, st: _TurnState) -> Surface | None:
        """The Turn's first read. None when the address is already gone."""
        try:
            surface = await st.port.surface(st.spec.iid)
        except Exception as exc:
            if is_turn_over(exc):
                return None
            raise HarnessError(f"could not read the surface of {st.spec.iid}: {exc}") from exc
        return None if surface.turn_over else surface

    def _open(self, spec: TurnSpec, surface: Surface) -> None:
        """Fix the system prompt and tools block for a fresh conversation; keep them under continue (H1, H7)."""
        if spec.workspace != "none":
            assert spec.cwd is not None
            self._working = WorkingTools(spec.workspace, spec.cwd)
        if self.tools is not None and self.system is not None:
            return
        menu = list(surface.menu)
        working = self._working.items if self._working is not None else []
        clash = sorted({m.name for m in menu} & {w.name for w in working})
        if clash:
            raise HarnessError(f"Menu names {clash} clash with the Working tools of slot {spec.slot!r}")
        self.system = texts.system_prompt(spec.instructions, spec.workspace)
        self.tools = [*menu, *working]

    def _append(self, message: Message) -> None:
        """The only way the transcript grows: append, never rewrite (H6)."""
        self.messages.append(message)

    async def _request(self, st: _TurnState) -> ModelAnswer:
        spec = st.spec
        provider, served = self.providers.resolve(spec.model)
        masked: list[str] | None = None
        if spec.masking and provider.kind == "local":
            names = [*st.last_read, *(sorted(self._working.names) if self._working else [])]
            masked = names or None
        assert self.system is not None and self.tools is not None
        tools = self.tools
        if self.tools_policy is not None:
            tools, masked = self.tools_policy(self.tools, list(st.last_read), st.steps)
        request = ModelRequest(
            model=served,
            system=self.system,
            tools=tools,
            messages=list(self.messages),
            thinking=spec.thinking,
            masked_tools=masked,
            session=f"{spec.run_id}:{spec.slot}" if spec.continue_ else spec.iid,
        )
        st.steps += 1
        st.attempt_steps += 1
        st.tools_sha256, st.masked = hashlib.sha256(tools_bytes(tools)).hexdigest(), masked
        started = time.monotonic()
        try:
            answer = await provider.complete(request)
        except ProviderError as exc:
            await self._record(st, time.monotonic() - started, None, error=str(exc))
            raise _Fault(f"provider_error: {exc}") from exc
        await self._record(st, time.monotonic() - started, answer)
        return answer

    async def _run_calls(self, st: _TurnState, calls: list[ToolCall]) -> None:
        """Run one answer's calls in order. After the Turn ends or a limit trips, the rest are answered, not run."""
        for call in calls:
            if st.end is not None:
                self._tool_result(call, texts.not_run_turn_over(call.name))
                continue
            if st.runaway is not None:
                self._tool_result(call, texts.not_run_repeated(call.name))
                continue
            key = _call_key(call)
            if key == st.streak_key:
                st.streak += 1
            else:
                st.streak_key, st.streak = key, 1
            if st.streak >= self.limits.max_identical_calls:
                st.runaway = f"runaway: {call.name} was called {st.streak} times in a row with the same arguments"
                self._tool_result(call, texts.not_run_repeated(call.name))
                continue
            self._tool_result(call, await self._execute(st, call))

    def _tool_result(self, call: ToolCall, text: str) -> None:
        self._append(Message(role="tool", tool_call_id=call.id, content=text))

    async def _execute(self, st: _TurnState, call: ToolCall) -> str:
        args = _parse_args(call)
        if isinstance(args, str):
            return args
        if self._working is not None and call.name in self._working.names:
            return await self._working.call(call.name, args)
        # Every other name is a pick, an invented one included: the Run refuses what is off the Menu (D2).
        st.picks += 1
        try:
            receipt = await st.port.pick(st.spec.iid, call.name, args)
        except Exception as exc:
            if not is_turn_over(exc):
                raise _Fault(f"pick_failed: {call.name}: {exc}") from exc
            receipt = Receipt(
                delivered=False, moved=False, turn_complete=False, allowed=[], refused="turn_over", pick=call.name
            )
        kind = texts.receipt_kind(receipt, call.name)
        if kind == "complete":
            st.end = st.result("complete")
        elif kind in ("turn_over", "unfinished"):
            st.end = st.result("turn_over", reason=receipt.refused)
        else:
            st.last_read = list(receipt.allowed)
        return texts.receipt_text(receipt, call.name)

    async def _read(self, st: _TurnState) -> Surface | None:
        """One bounded surface read. Raises `_Gone` when the Turn is over; None when the read failed (silence)."""
        try:
            surface = await asyncio.wait_for(st.port.surface(st.spec.iid), self.limits.surface_timeout_s)
        except Exception as exc:
            if is_turn_over(exc):
                raise _Gone from exc
            log.debug("turn %s: surface read failed: %s", st.spec.iid, exc)
            return None
        if surface.turn_over:
            raise _Gone
        return surface

    async def _boundary(self, st: _TurnState) -> bool:
        """Step boundary (H5): restate the Allowed picks if they changed as a set. True when the Turn is over."""
        try:
            surface = await self._read(st)
        except _Gone:
            return True
        if surface is not None and set(surface.allowed) != set(st.last_read):
            self._restate(st, surface.allowed)
        return False

    def _restate(self, st: _TurnState, allowed: list[str]) -> None:
        self._append(Message(role="user", content=texts.restatement(allowed)))
        st.last_read = list(allowed)

    async def _after_stop(self, st: _TurnState) -> bool:
        """The model answered without a call. Nudge (H8), or wait for a pick to open. False when the Turn is over."""
        try:
            surface = await self._read(st)
            allowed = surface.allowed if surface is not None else []
            if allowed and st.last_read:
                if st.nudges >= self.limits.max_nudges:
                    raise _Fault(f"no_signal: the model answered without a pick {st.nudges + 1} times")
                st.nudges += 1
                self._append(Message(role="user", content=texts.nudge(allowed)))
                st.last_read = list(allowed)
                return True
            while not allowed:
                # An empty list is not restated to a model that stopped; it is woken when a pick opens.
                await asyncio.sleep(self.limits.wake_poll_s)
                surface = await self._read(st)
                allowed = surface.allowed if surface is not None else []
        except _Gone:
            return False
        self._restate(st, allowed)
        return True

    # -- endings --------------------------------------------------------------------------------------------------

    async def _fault(self, st: _TurnState, reason: str) -> TurnResult:
        """Report `agent.fault` through the port. A failed report is logged; the Turn is over either way."""
        log.warning("turn %s faults: %s", st.spec.iid, reason)
        try:
            await st.port.fault(st.spec.iid, reason)
        except Exception as exc:
            if not is_turn_over(exc):
                log.error("turn %s: could not report the fault: %s", st.spec.iid, exc)
        return st.result("fault", reason)

    def _seal(self) -> None:
        """Answer any call left without a result (abort, error), so the transcript stays valid for `continue`."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if message.role != "assistant":
                continue
            answered = {m.tool_call_id for m in self.messages[index + 1 :] if m.role == "tool"}
            for call in message.tool_calls:
                if call.id not in answered:
                    self._tool_result(call, texts.interrupted(call.name))
            return

    async def _record(
        self, st: _TurnState, latency: float, answer: ModelAnswer | None, *, error: str | None = None
    ) -> None:
        spec = st.spec
        entry = RequestTelemetry(
            run_id=spec.run_id,
            iid=spec.iid,
            slot=spec.slot,
            state=spec.state,
            turn=st.turn,
            step=st.steps,
            model=spec.model,
            prompt_tokens=answer.prompt_tokens if answer else None,
            cached_tokens=answer.cached_tokens if answer else None,
            prompt_token_ids=answer.prompt_token_ids if answer else None,
            completion_token_ids=answer.completion_token_ids if answer else None,
            tools_sha256=st.tools_sha256,
            masked_tools=st.masked,
            latency_s=latency,
            error=error,
        )
        self.telemetry.append(entry)
        if self.on_telemetry is None:
            return
        try:
            out = self.on_telemetry(entry)
            if inspect.isawaitable(out):
                await out
        except Exception as exc:  # telemetry must never end a Turn
            log.warning("telemetry sink failed: %s", exc)


class _Gone(Exception):
    """Internal: a read found the Turn over (404 or `turn_over`)."""


def _caller_cancelled() -> bool:
    """Whether the task awaiting `run_turn` was itself cancelled (then the cancel must propagate)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
