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
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jr2ray.harness.admission import Admission, AdmissionGrant, prompt_need
from jr2ray.harness.errors import HarnessError, ProviderError, is_turn_over
from jr2ray.harness.port import RunPort, WaitPort
from jr2ray.harness.providers import ProviderRegistry
from jr2ray.harness.replicas import pinned_session
from jr2ray.harness.resume import Restored, TranscriptSync, delivery_id, unanswered
from jr2ray.harness.spec import Limits, TurnResult, TurnSpec
from jr2ray.harness.telemetry import RequestTelemetry, TelemetrySink
from jr2ray.harness.transcript import Message, ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.turn_state import Fault, Runaway, TurnState, call_key, parse_args
from jr2ray.harness.working import WorkingTools
from jr2ray.menu import texts
from jr2ray.menu.models import MenuItem, Receipt, Surface
from jr2ray.menu.render import tools_bytes
from jr2ray.run import tracing

log = logging.getLogger(__name__)

_T = TypeVar("_T")

WAIT_NOTICE_S = 0.1  # an admission not granted within this is a wait the Run hears of (its run may park meanwhile)


ToolsPolicy = Callable[[list[MenuItem], list[str], int], tuple[list[MenuItem], list[str] | None]]
"""For measurement only (jr2ray bench): given the fixed tools, the Allowed picks the model last read and
the request index, the tools to send and the names to constrain decoding to. The product never sets one: it always
sends the fixed Menu (M2)."""


class Conversation:
    """One model conversation of one Agent slot. With `continue`, it spans Turns (H7); without, each Turn resets it."""

    def __init__(
        self,
        port: RunPort | None = None,
        *,
        providers: ProviderRegistry,
        limits: Limits | None = None,
        on_telemetry: TelemetrySink | None = None,
        tools_policy: ToolsPolicy | None = None,
        admission: Admission | None = None,
        admission_growth: int = 512,
        admission_release_s: float = 1.0,
    ) -> None:
        self.port = port
        self.providers = providers
        self.limits = limits if limits is not None else Limits()
        self.on_telemetry = on_telemetry
        self.tools_policy = tools_policy
        self.admission = admission  # Turn admission: a KV budget shared with the other live conversations
        self.admission_growth = admission_growth  # tokens held for a request's answer, beyond its prompt
        # A pick or Working tool still unanswered after this long (a Gate, an Effect, a long command): the share goes
        # back until the next request asks again.
        self.admission_release_s = admission_release_s
        self._admitted: str | None = None  # the key this conversation holds a share of the budget under
        self._usage: tuple[int | None, int | None] = (None, None)  # the last request's prompt and answer tokens
        self._usage_bytes = 0  # the bytes the last request was counted from (tokens per byte for the next one)
        self._asked_bytes = 0  # the bytes of the request in flight: its usage's base once it answers
        self._menu_key: tuple[list[MenuItem], str] | None = None  # the Menu and its hash (the kind, with the seat)
        self.messages: list[Message] = []
        self.telemetry: list[RequestTelemetry] = []
        self.turns = 0
        self.system: str | None = None
        self.tools: list[MenuItem] | None = None
        self._working: WorkingTools | None = None
        self._task: asyncio.Task[TurnResult] | None = None
        self._aborted = False
        self._answer_due = 0  # pick/fault calls whose answer is on its way: an abort lets them land
        self._stopping = False
        self._force: asyncio.TimerHandle | None = None
        self.sync = TranscriptSync()  # how much of this conversation the Run's journal has

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
        self._usage = (None, None)
        self._usage_bytes = 0
        self.sync.reset()

    def abort(self, grace_s: float | None = None) -> bool:
        """End the running Turn. Nothing more is read or said for it (H5). False when no Turn runs.

        Why not always cancel at once: the Run ends a Turn while it answers that Turn's own pick or fault (the pick
        left the state, the fault was routed). Cancelling then would lose the final receipt the Run already wrote, and
        the transcript would say the pick has no result. So while such an answer is due, the Turn is let finish on
        it; it is cancelled only if the answer does not come within `grace_s` (default: the surface timeout).
        """
        if not self.running:
            return False
        self._aborted = True
        assert self._task is not None
        if self._answer_due:
            self._stopping = True
            if self._force is None:
                delay = self.limits.surface_timeout_s if grace_s is None else grace_s
                self._force = asyncio.get_running_loop().call_later(delay, self._task.cancel)
            return True
        self._task.cancel()
        return True

    async def stopped(self) -> None:
        """Wait until no Turn runs (an abort that let a due answer land returns once the Turn has ended)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])

    async def _answer(self, call: Any) -> Any:
        """Await a port call whose answer may end the Turn (a pick, a fault); an abort meanwhile lets it land."""
        self._answer_due += 1
        try:
            return await call
        finally:
            self._answer_due -= 1

    async def run_turn(self, spec: TurnSpec, port: RunPort | None = None) -> TurnResult:
        """Run one Turn to its end: a `turn_complete` receipt, a gone address, an abort or a fault."""
        if self.running and self._aborted:  # the last Turn was ended and is reading its final answer
            await self.stopped()
        if self.running:
            raise HarnessError("a Turn is already running on this conversation")
        if port is not None:
            self.port = port
        if self.port is None:
            raise HarnessError("no RunPort to talk to")
        self._aborted = False
        self._stopping = False
        self.turns += 1
        self.sync.new_turn()
        state = TurnState(spec=spec, port=self.port, turn=self.turns)
        self._task = asyncio.create_task(self._turn(state), name=f"jr2ray-turn:{spec.iid}")
        try:
            result = await self._task
        except asyncio.CancelledError:
            if not self._aborted or _caller_cancelled():
                raise  # this Harness is going away: like a crash, nothing more is journaled
            result = state.result("aborted")
        finally:
            if self._force is not None:
                self._force.cancel()
                self._force = None
            self._seal()
            self._task = None
            # The Turn is over: its share of the KV budget goes to the waiting conversations. A continued one's
            # next Turn may open at once (the chart moves on to a state that invokes the same seat): it lingers.
            await self._release(after_s=self.admission_release_s if spec.continue_ else 0.0)
        try:  # the Turn's last messages (its final receipt, calls sealed by an abort) for a later `continue`
            await asyncio.wait_for(self.sync.sync(state.port, spec.iid, self.messages), self.limits.surface_timeout_s)
        except TimeoutError:
            log.warning("turn %s: its last messages were not journaled in time", spec.iid)
        log.info("turn %s ended: %s%s after %d steps", spec.iid, result.outcome,
                 f" ({result.reason})" if result.reason else "", result.steps)
        return result

    # -- the loop -------------------------------------------------------------------------------------------------

    async def _turn(self, st: TurnState) -> TurnResult:
        while True:
            try:
                return await self._attempt(st)
            except Runaway as exc:
                if not st.spec.continue_ and st.rerolls_used < self.limits.rerolls:
                    log.info("turn %s: %s; re-rolling a fresh conversation", st.spec.iid, exc.reason)
                    st.rerolls_used += 1
                    st.rerolled = True
                    st.fresh_attempt()
                    self.reset()
                    self.sync.attempt = st.rerolls_used
                    continue
                return await self._fault(st, exc.reason)
            except Fault as exc:
                return await self._fault(st, exc.reason)

    async def _attempt(self, st: TurnState) -> TurnResult:
        spec = st.spec
        restored = await self._restore(st)
        if not spec.continue_ and not (restored and restored.restarted):
            self.reset()
        surface = await self._start_read(st)
        if surface is None:
            return st.result("turn_over")
        self._open(spec, surface)
        st.last_read = list(surface.allowed)
        if restored is not None and restored.restarted:
            # Parked while it waited for Turn admission: nothing was cut off, and the model reads nothing of it.
            if not restored.parked and (end := await self._go_on(st)) is not None:
                return end
        else:
            self._append(Message(role="user", content=texts.turn_part(spec.prompt, surface.allowed, surface.notices)))
        while True:
            if st.attempt_steps >= self.limits.max_steps:
                raise Runaway(f"runaway: the Turn reached {self.limits.max_steps} steps")
            answer = await self._request(st)
            self._append(answer.as_message())
            for pos, call in enumerate(answer.tool_calls):
                st.dids[call.id] = delivery_id(st.rerolls_used, len(self.messages) - 1, pos)
            if answer.tool_calls:
                await self.sync.sync(st.port, spec.iid, self.messages)  # journaled before any pick is delivered
                await self._run_calls(st, answer.tool_calls)
                if st.end is not None:
                    return st.end
                if st.runaway is not None:
                    raise Runaway(st.runaway)
                if await self._boundary(st):
                    return st.result("turn_over")
            elif not await self._after_stop(st):
                return st.result("turn_over")

    async def _restore(self, st: TurnState) -> Restored | None:
        """At a Turn's start in a Harness that holds no transcript: take the journaled conversation back, if any."""
        if st.steps or st.rerolled or self.messages:
            return None
        restored = await self.sync.restore(st.port, st.spec.iid)
        if restored is not None:
            self.messages = list(restored.messages)
            st.rerolls_used = restored.attempt
            st.rerolled = restored.attempt > 0
            if not restored.restarted:  # an earlier Turn's calls cut off unanswered: answered as an abort would
                self._seal()
        return restored

    async def _go_on(self, st: TurnState) -> TurnResult | None:
        """A restarted Turn goes on where it was cut off. The calls its last answer left without a result get one:
        a pick is sent again with its delivery id, so the Run answers with the receipt it journaled (or waits for
        it) and nothing is applied twice; a Working tool is not run twice. Then the notice that it was restarted."""
        index, calls = unanswered(self.messages)
        for pos, call in calls:
            st.dids[call.id] = delivery_id(st.rerolls_used, index, pos)
        for _, call in calls:
            if st.end is not None:
                self._tool_result(call, texts.not_run_turn_over(call.name))
            elif self._working is not None and call.name in self._working.names:
                self._tool_result(call, texts.interrupted_by_restart(call.name))
            else:
                self._tool_result(call, await self._execute(st, call))
        if st.end is not None:
            return st.end
        self._append(Message(role="user", content=texts.turn_restarted(st.last_read)))
        return None

    async def _start_read(self, st: TurnState) -> Surface | None:
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

    async def _request(self, st: TurnState) -> ModelAnswer:
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
        await self.sync.sync(st.port, spec.iid, self.messages)  # what the model is about to read is journaled first
        st.steps += 1
        st.attempt_steps += 1
        sent_tools = tools_bytes(tools)
        st.tools_sha256, st.masked = hashlib.sha256(sent_tools).hexdigest(), masked
        grant = await self._admit(st, request, len(sent_tools), request.session or spec.iid,
                                  f"{spec.slot}:{self._menu_sha()}")
        if grant is not None and grant.replica is not None:  # its share is held there: the router sends it there
            request = request.model_copy(update={"session": pinned_session(request.session or spec.iid,
                                                                           grant.replica)})
        started = time.monotonic()
        try:
            answer = await provider.complete(request)
        except ProviderError as exc:
            await self._record(st, time.monotonic() - started, None, error=str(exc), grant=grant)
            raise Fault(f"provider_error: {exc}") from exc
        await self._record(st, time.monotonic() - started, answer, grant=grant)
        usage = answer.usage()
        self._usage = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
        self._usage_bytes = self._asked_bytes  # the bytes those prompt tokens were counted from
        return answer

    def _menu_sha(self) -> str:
        """The hash of the conversation's whole Menu (fixed for its life), not of a step's filtered tools: with the
        seat, it names the conversation's kind for Turn admission."""
        tools = self.tools or []
        if self._menu_key is None or self._menu_key[0] is not tools:
            self._menu_key = (tools, hashlib.sha256(tools_bytes(tools)).hexdigest()[:16])
        return self._menu_key[1]

    async def _admit(self, st: TurnState, request: ModelRequest, tools_len: int, key: str,
                     kind: str) -> AdmissionGrant | None:
        """Turn admission: wait until this conversation's next prompt plus its answer fits in the KV budget beside
        the other live conversations. Its kind (seat and Menu) lets a fresh one reserve what its kind grew to.
        Nothing of it reaches the request: the model reads the same bytes. A wait the budget does not end at once is
        told to the Run, whose run may park meanwhile (`WaitPort`)."""
        if self.admission is None:
            return None
        fresh = tools_len + len(request.system)  # `tools_len`: the request's tools block, already serialized
        fresh += sum(len(m.content or "") + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
                     for m in request.messages)
        need = prompt_need(self._usage[0], self._usage[1], fresh, self.admission_growth, self._usage_bytes)
        self._asked_bytes = fresh
        if self._admitted is not None and self._admitted != key:
            await self._release()
        self._admitted = key
        ask = asyncio.ensure_future(self.admission.admit(key, need, kind))
        try:
            done, _ = await asyncio.wait({ask}, timeout=WAIT_NOTICE_S)
            if done:
                return ask.result()
            await self._tell_waits(st, key)
            grant = await ask
            await self._tell_waits(st, None)
            return grant
        finally:
            if not ask.done():
                ask.cancel()

    async def _tell_waits(self, st: TurnState, key: str | None) -> None:
        """Tell the Run this Turn waits for admission (or no longer). Never fails the Turn: a run that is not told
        only stays live while it waits."""
        if not isinstance(st.port, WaitPort):
            return
        try:
            await st.port.waits(st.spec.iid, key)
        except Exception as exc:  # noqa: BLE001 - see above
            if not is_turn_over(exc):
                log.warning("turn %s: could not tell its run it waits for admission: %s", st.spec.iid, exc)

    async def _release(self, after_s: float = 0.0) -> None:
        """Give this conversation's share of the KV budget back (its Turn ended or rests), now or after `after_s`
        unless it asks again. Never fails a Turn."""
        key, self._admitted = self._admitted, None
        if key is None or self.admission is None:
            return
        try:
            await self.admission.release(key, after_s)
        except Exception as exc:  # noqa: BLE001 - a lost release only delays others; it must not end this Turn
            log.warning("admission: could not release %s: %s", key, exc)

    async def _unhurried(self, call: Awaitable[_T]) -> _T:
        """Await a tool call's answer; if it takes longer than `admission_release_s` (the pick waits for Rest behind
        a Gate or an Effect, a Working tool runs a long command), give the KV share back meanwhile: the next request
        asks again, and the conversations that can use the cache now go ahead."""
        if self.admission is None or self._admitted is None:
            return await call
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.admission_release_s)
            if not done:
                await self._release()
            return await task
        finally:
            if not task.done():
                task.cancel()

    async def _run_calls(self, st: TurnState, calls: list[ToolCall]) -> None:
        """Run one answer's calls in order. After the Turn ends or a limit trips, the rest are answered, not run."""
        for call in calls:
            if st.end is not None:
                self._tool_result(call, texts.not_run_turn_over(call.name))
                continue
            if st.runaway is not None:
                self._tool_result(call, texts.not_run_repeated(call.name))
                continue
            key = call_key(call)
            if key == st.streak_key:
                st.streak += 1
            else:
                st.streak_key, st.streak = key, 1
            if st.streak >= self.limits.max_identical_calls:
                st.runaway = f"runaway: {call.name} was called {st.streak} times in a row with the same arguments"
                self._tool_result(call, texts.not_run_repeated(call.name))
                continue
            self._tool_result(call, await self._execute(st, call))
            if self._stopping and st.end is None:  # ended from outside while this answer landed
                st.end = st.result("aborted")

    def _tool_result(self, call: ToolCall, text: str) -> None:
        self._append(Message(role="tool", tool_call_id=call.id, content=text))

    async def _execute(self, st: TurnState, call: ToolCall) -> str:
        args = parse_args(call)
        if isinstance(args, str):
            return args
        if self._working is not None and call.name in self._working.names:
            return await self._unhurried(self._working.call(call.name, args))
        # Every other name is a pick, an invented one included: the Run refuses what is off the Menu (D2).
        st.picks += 1
        try:
            receipt = await self._answer(self._unhurried(self._deliver(st, call.name, args, st.dids.get(call.id))))
        except Exception as exc:
            if not is_turn_over(exc):
                raise Fault(f"pick_failed: {call.name}: {exc}") from exc
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

    async def _deliver(self, st: TurnState, name: str, args: dict[str, Any], did: str | None) -> Receipt:
        """Send a pick; when the call fails (the Run restarted under it), send it again with the same delivery id.
        The Run answers a repeated id with the receipt it journaled, or waits for it, so nothing is applied twice."""
        for retry in range(self.limits.pick_retries + 1):
            try:
                return await st.port.pick(st.spec.iid, name, args, did)
            except Exception as exc:
                if is_turn_over(exc) or did is None or retry >= self.limits.pick_retries:
                    raise
                log.info("turn %s: pick %s (%s) failed (%s); sending it again", st.spec.iid, name, did, exc)
                await asyncio.sleep(self.limits.pick_retry_s * (retry + 1))
        raise AssertionError("unreachable")

    async def _read(self, st: TurnState) -> Surface | None:
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

    async def _boundary(self, st: TurnState) -> bool:
        """Step boundary (H5): restate the Allowed picks if they changed as a set. True when the Turn is over."""
        try:
            surface = await self._read(st)
        except _Gone:
            return True
        if surface is not None and set(surface.allowed) != set(st.last_read):
            self._restate(st, surface.allowed)
        return False

    def _restate(self, st: TurnState, allowed: list[str]) -> None:
        self._append(Message(role="user", content=texts.restatement(allowed)))
        st.last_read = list(allowed)

    async def _after_stop(self, st: TurnState) -> bool:
        """The model answered without a call. Nudge (H8), or wait for a pick to open. False when the Turn is over."""
        try:
            surface = await self._read(st)
            allowed = surface.allowed if surface is not None else []
            if allowed and st.last_read:
                if st.nudges >= self.limits.max_nudges:
                    raise Fault(f"no_signal: the model answered without a pick {st.nudges + 1} times")
                st.nudges += 1
                self._append(Message(role="user", content=texts.nudge(allowed)))
                st.last_read = list(allowed)
                return True
            if not allowed:
                await self._release()  # at Rest until a pick opens (a Gate, an Effect): the share goes back
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

    async def _fault(self, st: TurnState, reason: str) -> TurnResult:
        """Report `agent.fault` through the port. A failed report is logged; the Turn is over either way."""
        log.warning("turn %s faults: %s", st.spec.iid, reason)
        try:
            await self._answer(st.port.fault(st.spec.iid, reason))
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
        self, st: TurnState, latency: float, answer: ModelAnswer | None, *, error: str | None = None,
        grant: AdmissionGrant | None = None,
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
            tools_sha256=st.tools_sha256,
            masked_tools=st.masked,
            latency_s=latency,
            error=error,
            kv_wait_s=grant.waited_s if grant is not None else None,
            kv_tokens=grant.need_tokens if grant is not None else None,
            **(answer.usage() if answer else {}),
        )
        self.telemetry.append(entry)
        tracing.model_request(spec.traceparent, spec.model, latency, answer.usage() if answer else None, error,
                              iid=spec.iid, step=st.steps)
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
