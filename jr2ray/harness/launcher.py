"""TurnLaunchers: how a Run starts and aborts the Harness of each Turn, without the Run importing the Harness.

`RayTurnLauncher` runs one HarnessActor per conversation (a fresh Turn gets a fresh actor; `continue` reuses the
conversation's actor across states); a HarnessActor that dies mid-Turn is replaced, and the new one continues the
conversation from the Run's journal. `LocalTurnLauncher` runs Conversations as asyncio tasks beside a LocalRun.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from pydantic import BaseModel, Field

from jr2ray.harness.admission import Admission, budget_from_settings
from jr2ray.harness.errors import TurnOver
from jr2ray.harness.providers import ProviderConfig, ProviderRegistry
from jr2ray.harness.spec import Limits, TurnSpec
from jr2ray.harness.telemetry import RequestTelemetry
from jr2ray.harness.turn import Conversation, ToolsPolicy
from jr2ray.menu.models import Receipt, Surface
from jr2ray.run import RunEngine, Transcript, TranscriptEntry, UnknownTurn, placement
from jr2ray.run import telemetry as events
from jr2ray.run.loops import running_loop
from jr2ray.settings import Settings, load_settings

log = logging.getLogger(__name__)

MAX_RELAUNCHES = 3  # fresh Harnesses one Turn may get after its Harness died


def telemetry_row(entry: RequestTelemetry | dict[str, Any]) -> dict[str, Any]:
    return entry.model_dump(mode="json") if hasattr(entry, "model_dump") else dict(entry)


class AdmissionPlan(BaseModel):
    """Turn admission for the Harness actors of one Run: which app's budget actor they share, and its knobs."""

    app: str
    growth: int = Field(default=512, ge=0)
    release_s: float = Field(default=1.0, ge=0)


class RayTurnLauncher:
    """Lives inside a RunActor. Starts HarnessActors named `harness:<conversation>:<n>:<tag>` in the Run's
    namespace, and replaces one that dies mid-Turn."""

    def __init__(self, run_id: str, namespace: str = "jr2ray", config: ProviderConfig | None = None,
                 limits: Limits | None = None, admission: AdmissionPlan | None = None) -> None:
        self.run_id = run_id
        self.namespace = namespace
        # Built by the Run actor (run/actor.load_launcher) in its own process, its env applied: the Run layer cannot
        # name the Harness's config, so without one the launcher reads this process's settings, once, here.
        settings = load_settings() if config is None or admission is None else None
        self.config = config or ProviderConfig.from_settings(settings or load_settings())
        self.limits = limits
        # Turn admission: the LLM app's KV budget actor, found by name when the first Turn starts (the app's deploy
        # creates it, with the capacity it read from vLLM). Off unless the settings of this process turn it on.
        if admission is None and settings is not None and settings.turn_admission:
            admission = AdmissionPlan(app=settings.turn_admission_app, growth=settings.turn_admission_growth,
                                      release_s=settings.turn_admission_release_s)
        self.admission = admission
        self._budget: Any = None
        self._actors: dict[str, Any] = {}  # conversation -> HarnessActor handle
        self._turns: dict[str, tuple[str, bool]] = {}  # iid -> (conversation, continue)
        self._releasing: set[asyncio.Task[None]] = set()  # watchers and releases in flight
        self._relaunched: dict[str, int] = {}  # iid -> fresh Harnesses started after one died
        self._started = 0

    def _run_handle(self) -> Any:
        """The run's handle for its Harnesses: its own actor, or its pooled host with the run named."""
        from jr2ray.run.hosted_ref import run_handle

        return run_handle(self.run_id)

    def start(self, turn: TurnSpec) -> None:
        from jr2ray.harness.actor import HarnessActor

        run = self._run_handle()
        key = turn.conversation or turn.iid
        # Any: Ray types `handle.method.remote` only for methods wrapped in `@ray.method`, which these are not.
        actor: Any = self._actors.get(key)
        budget = self._find_budget()
        if self.admission is not None and budget is None:
            # Never a guessed capacity: without the app's budget the Turn cannot be admitted, and the Run says why.
            run.fault.remote(turn.iid, f"turn_admission: no KV budget actor for the LLM app {self.admission.app!r} "
                                       f"in namespace {self.namespace!r} (is the app deployed with admission on?)")
            return
        if actor is None:
            # Named, so an operator (and the kill tests) can find a Turn's Harness: harness:<conversation>:<n>.
            # Placed like its run (placement.here): beside it on the head with SQLite, on any node with PostgreSQL.
            self._started += 1
            actor = HarnessActor.options(namespace=self.namespace, **placement.here(),
                                         name=f"harness:{key}:{self._started}:{uuid.uuid4().hex[:6]}").remote(
                config=self.config.model_dump(), limits=self.limits.model_dump() if self.limits else None,
                telemetry_sink=run, telemetry_method="record_telemetry", events_on=events.enabled(),
                admission=budget, admission_growth=self.admission.growth if self.admission else 512,
                admission_release_s=self.admission.release_s if self.admission else 1.0)
            self._actors[key] = actor
        self._turns[turn.iid] = (key, turn.continue_)
        self._watch(turn, actor, actor.start_turn.remote(turn.model_dump(by_alias=True), run))

    def _find_budget(self) -> Any:
        if self.admission is None:
            return None
        if self._budget is None:
            from jr2ray.harness.budget_actor import find_budget

            self._budget = find_budget(self.admission.app, self.namespace)
        return self._budget

    def _watch(self, turn: TurnSpec, actor: Any, ended: Any) -> None:
        """If the Harness dies mid-Turn (its process killed, its node gone), start a fresh one for the same Turn:
        it takes the conversation back from the Run's journal and goes on (a bounded number of times)."""
        import ray

        loop = running_loop()
        if loop is None:
            return

        async def watch() -> None:
            try:
                await asyncio.wrap_future(ended.future())
                return
            except ray.exceptions.RayActorError as exc:
                died = exc
            except Exception as exc:  # noqa: BLE001 - the Turn's own failure; its fault was reported
                log.debug("turn %s ended with an error: %s", turn.iid, exc)
                return
            key = turn.conversation or turn.iid
            if self._actors.get(key) is actor:
                self._actors.pop(key)
            if turn.iid not in self._turns:  # the Run ended the Turn meanwhile
                return
            self._relaunched[turn.iid] = n = self._relaunched.get(turn.iid, 0) + 1
            if n > MAX_RELAUNCHES:  # the Turn cannot go on: the Run routes agent.fault, as for any Harness failure
                log.error("turn %s: its Harness died %d times; not starting another", turn.iid, n)
                self._run_handle().fault.remote(turn.iid, f"harness_died: {n} times in one Turn ({died})")
                return
            log.warning("turn %s: its Harness died (%s); starting a fresh one", turn.iid, died)
            self.start(turn)

        task = loop.create_task(watch())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    def park(self, iid: str, key: str, registry: Any) -> None:
        """The run parks while Turn `iid` waits for Turn admission under `key` (`ParkingLauncher`). The budget keeps
        the ask, and once it is granted wakes the run through `registry` (its run registry's handle); the Turn's
        Harness ends now, with nothing journaled (the run's restore starts another, which finds the share held)."""
        import ray

        conversation, _ = self._turns.pop(iid, ("", False))  # gone from here: its watcher starts no other Harness
        actor = self._actors.pop(conversation, None) if conversation else None
        budget = self._find_budget()
        if budget is not None:
            budget.park.remote(key, self.run_id, registry)
        else:  # nothing would wake it: wake it now rather than leave it parked
            registry.activate.remote(self.run_id)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    def abort(self, iid: str) -> None:
        conversation, cont = self._turns.pop(iid, ("", False))
        actor = self._actors.get(conversation) if conversation else None
        if actor is None:
            return
        ended = actor.abort.remote()
        if not cont:  # a fresh conversation is never reused: let its actor go, once its Turn has ended
            self._actors.pop(conversation, None)
            self._release_after(actor, ended)

    def _release_after(self, actor: Any, ended: Any) -> None:
        """Kill `actor` once `ended` (its abort) resolves, or after the grace period.

        Why not at once: the Run ends a Turn while it answers that Turn's own pick or fault; killing then would stop
        the Harness before it reads its final receipt. Without an event loop (a sync caller) it is killed at once.
        """
        import ray

        grace = (self.limits or Limits()).surface_timeout_s + 5.0
        loop = running_loop()
        if loop is None:
            ray.kill(actor, no_restart=True)
            return

        async def release() -> None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(ended.future()), grace)
            except Exception as exc:  # noqa: BLE001 - the actor died or hung: it is killed either way
                log.debug("harness actor did not end its Turn cleanly: %s", exc)
            ray.kill(actor, no_restart=True)

        task = loop.create_task(release())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)


class LocalPort:
    """A RunPort over an in-process RunEngine (for LocalRun and the conformance tier)."""

    def __init__(self, engine: RunEngine) -> None:
        self.engine = engine

    async def surface(self, iid: str) -> Surface:
        try:
            return self.engine.surface(iid)
        except UnknownTurn as exc:
            raise TurnOver(str(exc)) from None

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        try:
            return await self.engine.pick(iid, name, args, delivery_id)
        except UnknownTurn as exc:
            raise TurnOver(str(exc)) from None

    async def fault(self, iid: str, reason: str) -> None:
        self.engine.fault(iid, reason)

    async def record(self, iid: str, entry: TranscriptEntry) -> None:
        try:
            self.engine.record_transcript(iid, entry)
        except UnknownTurn as exc:
            raise TurnOver(str(exc)) from None

    async def transcript(self, iid: str) -> Transcript:
        try:
            return self.engine.transcript(iid)
        except UnknownTurn as exc:
            raise TurnOver(str(exc)) from None

    async def waits(self, iid: str, key: str | None) -> None:
        try:
            self.engine.turn_waits(iid, key)
        except UnknownTurn as exc:
            raise TurnOver(str(exc)) from None


class LocalTurnLauncher:
    """Runs each Turn's Conversation as an asyncio task; `continue` reuses the conversation's object."""

    def __init__(self, config: ProviderConfig | None = None, limits: Limits | None = None,
                 providers: ProviderRegistry | None = None, tools_policy: ToolsPolicy | None = None,
                 admission: Admission | None = None, admission_growth: int = 512,
                 admission_release_s: float = 1.0) -> None:
        if providers is None:
            if config is None:
                raise TypeError("LocalTurnLauncher needs a ProviderConfig or a ProviderRegistry: read the settings "
                                "where the process starts, e.g. ProviderConfig.from_settings(load_settings())")
            providers = ProviderRegistry(config)
        self.providers = providers
        self.limits = limits
        self.tools_policy = tools_policy
        self.admission = admission  # one KV budget for every conversation this launcher runs (Turn admission)
        self.admission_growth = admission_growth
        self.admission_release_s = admission_release_s
        self.engine: RunEngine | None = None
        self.conversations: dict[str, Conversation] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.turn_conversation: dict[str, str] = {}
        self.results: dict[str, Any] = {}

    @classmethod
    def with_admission(cls, settings: Settings, capacity_tokens: int | None, **kw: Any) -> LocalTurnLauncher:
        """A launcher whose conversations share one KV budget when the settings turn admission on (the caller read
        the settings at its entry point, and the capacity from vLLM)."""
        return cls(admission=budget_from_settings(settings, capacity_tokens),
                   admission_growth=settings.turn_admission_growth,
                   admission_release_s=settings.turn_admission_release_s, **kw)

    def bind(self, engine: RunEngine) -> None:
        self.engine = engine

    def start(self, turn: TurnSpec) -> None:
        assert self.engine is not None, "bind(engine) first (LocalRun does it)"
        engine = self.engine
        key = turn.conversation or turn.iid
        conv = self.conversations.get(key)
        if conv is None:
            conv = Conversation(providers=self.providers, limits=self.limits, tools_policy=self.tools_policy,
                                on_telemetry=lambda e: engine.record_telemetry(telemetry_row(e)),
                                admission=self.admission, admission_growth=self.admission_growth,
                                admission_release_s=self.admission_release_s)
            self.conversations[key] = conv
        port = LocalPort(engine)
        self.turn_conversation[turn.iid] = key

        async def go() -> None:
            self.results[turn.iid] = await conv.run_turn(turn, port)

        self.tasks[turn.iid] = asyncio.get_running_loop().create_task(go())

    def abort(self, iid: str) -> None:
        task = self.tasks.get(iid)
        conv = self.conversations.get(self.turn_conversation.get(iid, ""))
        if task is None or task.done() or conv is None:
            return
        conv.abort()

    async def settle(self, timeout: float = 60.0) -> None:
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
