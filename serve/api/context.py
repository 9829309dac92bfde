"""Per-app state and the way to a run: the instance token, the Ray client, loaded workflows, Run actors.

Runs are reached through `jr2ray.run.client.Client`: a virtual run (the default) through the run registry, which
wakes a parked one; with JR2RAY_VIRTUAL_RUNS=0, its own Ray actor by name. Every call is awaited, so a pick that
waits for Rest holds one request, never the event loop. Everything is lazy: an app that only serves /docs never
touches Ray.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from jr2ray.authoring import Jr2Machine
from jr2ray.run import list_workflows, load_workflow
from jr2ray.run.actor import actor_name
from jr2ray.run.client import resolve_launcher
from jr2ray.run.errors import RunError, raise_refusal
from jr2ray.run.handles import StaleHost
from jr2ray.run.models import RunStatus, lifecycle
from jr2ray.settings import run_env

from ..auth import read_token
from ..graph import active_paths
from . import refusals
from .config import ApiConfig
from .refusals import NotLive
from .schemas import RunView

T = TypeVar("T")

_WORKFLOW = re.compile(r"^[A-Za-z0-9_]+$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HOSTS_KEPT = 20000  # run ids whose host an API replica remembers (about 100 bytes each)


def is_ray_unavailable(exc: BaseException) -> bool:
    """Ray could not reach the actor (it died and is restarting, or the cluster is away): worth a retry."""
    try:
        from ray.exceptions import (
            ActorUnavailableError,
            GetTimeoutError,
            RayActorError,
            RaySystemError,
        )
    except ImportError:
        return False
    return isinstance(exc, (RayActorError, ActorUnavailableError, GetTimeoutError, RaySystemError))


class ApiContext:
    """One app's config, token, Ray client and workflows (all lazy)."""

    def __init__(self, config: ApiConfig) -> None:
        self.config = config
        self._client: Any = None
        self._machines: dict[str, Jr2Machine] = {}
        self._ended: set[str] = set()  # Turn iids known to be over: their Harness tokens no longer work
        self.launcher = resolve_launcher(config.launcher)
        self._hosts: dict[str, Any] = {}  # run id -> the host that last held it (fenced by the host's NotHere)

    @property
    def home(self) -> Path:
        return self.config.home_dir()

    def token(self) -> str | None:
        """Read on every request, so a token `jr2ray up` creates after the app started is picked up."""
        return self.config.token or read_token(self.home)

    def run_env(self) -> dict[str, str]:
        env = dict(self.config.run_env) if self.config.run_env is not None else run_env()
        if self.config.workflows:  # a Run actor loads its workflow by name from the same catalog
            env["JR2RAY_WORKFLOWS"] = ",".join(self.config.workflows)
        return env

    def client(self) -> Any:
        if self._client is None:
            import ray

            from jr2ray.run.client import Client, _init_ray

            store = self.config.store or str(self.home / "runs")
            client = Client(self.config.namespace, store, self.launcher, virtual=self.config.virtual)
            if not ray.is_initialized():  # joined with the settings the client read
                _init_ray(self.config.ray_address, self.config.namespace, client.settings)
            self._client = client
        return self._client

    def machine(self, name: str) -> Jr2Machine:
        """Only names `list_workflows()` offers: a request must never import an arbitrary module."""
        if name not in self._machines:
            if not _WORKFLOW.match(name) or name not in list_workflows(self.config.workflows):
                raise refusals.unknown_workflow(name)
            self._machines[name] = load_workflow(name, self.config.workflows)
        return self._machines[name]

    def run_machine(self, run_id: str) -> tuple[str, Jr2Machine]:
        """A run's workflow name and the machine of its own version (`jr2ray.run.versions`), not the file's now: a
        run started before an edit, or moved by `migrate`, is drawn as it runs. A run from before versions gets the
        catalog's."""
        from jr2ray.run import versions

        if not _RUN_ID.match(run_id):
            raise refusals.unknown_run(run_id)
        store = self.client().store
        line = store.indexed(run_id) if store.exists(run_id) else None
        if line is None:
            raise refusals.unknown_run(run_id)
        if not line.version:
            return line.workflow, self.machine(line.workflow)
        if line.workflow not in list_workflows(self.config.workflows):
            raise refusals.unknown_workflow(line.workflow)  # only names the catalog offers are ever loaded
        try:
            return line.workflow, versions.load(store, line.workflow, line.version)
        except versions.VersionMissing as exc:
            raise refusals.version_gone(run_id, str(exc)) from None

    def workflows(self) -> list[tuple[str, Jr2Machine]]:
        return [(n, self.machine(n)) for n in list_workflows(self.config.workflows)]

    async def actor(self, run_id: str, hot: bool = False) -> Any:
        """The live Run actor of exactly this id; UnknownRun when there is none, NotLive for a journal only.
        `hot` (a pick): a virtual run whose host this replica remembers is reached with no store read, and a call
        that finds the host has let the run go raises StaleHost, so the caller asks again with `hot=False`."""
        if not _RUN_ID.match(run_id):
            raise refusals.unknown_run(run_id)
        client = self.client()
        if client.virtual:
            return await self._virtual(client, run_id, hot)
        import ray

        try:
            return await asyncio.to_thread(ray.get_actor, actor_name(run_id), namespace=self.config.namespace)
        except ValueError:
            if await asyncio.to_thread(client.store.exists, run_id):
                raise NotLive(run_id) from None
            raise refusals.unknown_run(run_id) from None

    async def _virtual(self, client: Any, run_id: str, hot: bool = False) -> Any:
        """A virtual run's actor-like face (calls on it wake a parked run); NotLive when its journal answers alone:
        it is finished, lost or damaged, or still `queued` for a slot."""
        from jr2ray.run.handles import VirtualActorRef

        if hot and run_id in self._hosts:  # live when last seen: one Ray call, no store read
            return VirtualActorRef(run_id, client.registry(), self._hosts, remembered=True)
        if len(self._hosts) > HOSTS_KEPT:
            self._hosts.clear()
        line = await asyncio.to_thread(self._journal_line, client, run_id)
        if line is None:
            raise refusals.unknown_run(run_id)
        if line.lifecycle not in ("active",):
            raise NotLive(run_id)
        return VirtualActorRef(run_id, client.registry(), self._hosts)

    @staticmethod
    def _journal_line(client: Any, run_id: str) -> Any:
        if not client.store.exists(run_id):
            return None
        return client.store.listing(run_id)

    async def writable(self, run_id: str) -> Any:
        """The run's actor for a call that changes it (a Gate event, cancel): a `queued` virtual run is reached too
        (its calls wait for its slot; cancel needs none), and a finished one (it answers from its journal: a Gate
        it had is closed, a cancel returns it unchanged)."""
        try:
            return await self.actor(run_id)
        except NotLive:
            client = self.client()
            line = await asyncio.to_thread(self._journal_line, client, run_id) if client.virtual else None
            if line is not None and (line.status == "queued" or line.lifecycle == "finished"):
                from jr2ray.run.handles import VirtualActorRef

                return VirtualActorRef(run_id, client.registry(), self._hosts)
            raise

    async def call(self, ref: Any) -> Any:
        """Await an actor call; a RunError raised inside the actor comes back as itself."""
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return await ref
        except RayTaskError as exc:
            raise_refusal(exc)
        except RayActorError as exc:
            raise refusals.run_unavailable(type(exc).__name__) from None
        except Exception as exc:
            if is_ray_unavailable(exc):
                raise refusals.run_unavailable(type(exc).__name__) from None
            raise

    async def turn_over(self, iid: str) -> refusals.Refusal | None:
        """None while Turn `iid` is live; else the 401 its Harness token now gets.

        A Harness token is stateless (an HMAC of its iid), so it is its Turn's liveness that scopes it in time. An
        ended Turn never comes back, so that answer is remembered; a run with no live actor is not (it may restart).
        """
        run_id = iid.rpartition(".t")[0]
        if iid in self._ended:
            return refusals.turn_ended(iid, run_id, run_live=True)
        try:
            status = await self._turn_status(run_id)
        except RunError:
            return refusals.turn_ended(iid, run_id, run_live=False)
        if status is None:  # no live actor: ended for good if its finished journal names the Turn
            if await asyncio.to_thread(self.ended_turn, run_id, iid) is not None:  # a finished virtual run's
                self._ended.add(iid)
                return refusals.turn_ended(iid, run_id, run_live=True)
            return refusals.turn_ended(iid, run_id, run_live=False)
        turn = next((t for t in status.turns if t.iid == iid), None)
        if turn is not None and turn.active:
            return None
        if turn is not None:
            self._ended.add(iid)
        return refusals.turn_ended(iid, run_id, run_live=True)

    def known_ended(self, iid: str) -> bool:
        """Is Turn `iid` known to be over (its Harness token refused without asking the run)?"""
        return iid in self._ended

    def token_over(self, iid: str, run_live: bool) -> refusals.TokenOver:
        """The 401 an ended Turn's Harness token gets, found by a pick on the live run; remembered (an ended Turn
        never comes back), not when the run is not live (it may come back)."""
        if run_live:
            self._ended.add(iid)
        return refusals.token_over(iid, iid.rpartition(".t")[0], run_live)

    async def _turn_status(self, run_id: str) -> RunStatus | None:
        """The run's status for a Harness token's check (`read_run`: read-only, surface() would consume notices).
        None: it has no live actor."""
        try:
            return await self.read_run(run_id, self.status, lambda: self.parked_status(run_id))
        except NotLive:
            return None

    async def read_run(self, run_id: str, read: Callable[[Any], Awaitable[T]],
                       parked: Callable[[], Awaitable[T | None]],
                       find: Callable[[bool], Awaitable[Any]] | None = None) -> T:
        """One read of a run that wakes nothing it need not: `read` on the host this replica remembers (one Ray
        call, no store read); once that host says it let the run go (`StaleHost`), or when none is remembered, how
        the run parked (`parked`, from the store; None when it is not parked); else `read` on its actor, found by
        `find(hot)` (default `actor`; NotLive when only its journal answers)."""
        find = find or (lambda hot: self.actor(run_id, hot=hot))
        for hot in (True, False):
            if hot and not self.remembers(run_id):
                continue
            if not hot and (got := await parked()) is not None:
                return got
            try:
                return await read(await find(hot))
            except StaleHost:
                continue
        raise AssertionError("a fresh actor never answers StaleHost")

    async def status(self, actor: Any) -> RunStatus:
        """The Run's status; a Run that does not answer within `status_timeout_s` (restarting) is a 503, not a
        request that hangs."""
        try:
            status: RunStatus = await asyncio.wait_for(self.call(actor.status.remote()),
                                                       timeout=self.config.status_timeout_s)
        except TimeoutError:
            raise refusals.run_unavailable(f"no status within {self.config.status_timeout_s:g} s") from None
        return status

    def remembers(self, run_id: str) -> bool:
        """Does this replica remember the host that held the run when last called (a pick or surface there is one
        Ray call, and a host that let it go says so: `StaleHost`)?"""
        return run_id in self._hosts

    async def parked_surface(self, run_id: str, address: str) -> Any:
        """A parked virtual run's Turn surface, from the store (None when the run is not parked, or the Turn's
        next read carries notices that only its host can hand over)."""
        client = self.client()
        if not client.virtual or run_id in self._hosts or not _RUN_ID.match(run_id):
            return None
        handle = client.handle(run_id)
        return await asyncio.to_thread(handle.parked_surface, address)

    async def parked_status(self, run_id: str) -> RunStatus | None:
        """A parked virtual run's status as it stood when it parked, from the store (None when it is not parked):
        reading it wakes nothing. The store is asked even when this replica remembers a host for the run: that
        host may have let it go since, and asking it would wake the run."""
        client = self.client()
        if not client.virtual or not _RUN_ID.match(run_id):
            return None
        parked = await asyncio.to_thread(client.store.standing, run_id)
        return None if parked is None else RunStatus.model_validate(parked["status"])

    async def live_or_journal(self, run_id: str) -> RunView:
        """The run from its actor, or from its journal when no actor is up (or it is restarting). A parked virtual
        run is read as it stood when it parked, from the store: reading it wakes nothing (`read_run`)."""
        async def parked() -> RunView | None:
            st = await self.parked_status(run_id)
            return None if st is None else RunView(**st.model_dump(), live=False,
                                                   active=active_paths(self.machine_id(st.workflow), st.value))

        async def live(actor: Any) -> RunView:
            return self.view(await self.status(actor))
        try:
            return await self.read_run(run_id, live, parked)
        except (NotLive, refusals.RunUnavailable):
            return await asyncio.to_thread(self.journal_view, run_id)

    def journal_view(self, run_id: str) -> RunView:
        """A run with no live actor, read from its journal."""
        store = self.client().store
        j = store.open(run_id)
        try:
            row = j.run()
            latest = j.latest_snapshot()
        finally:
            j.close()
        if row is None:
            raise refusals.unknown_run(run_id)
        line = store.indexed(run_id)  # the version it is pinned to (jr2ray.run.versions)
        snap = latest[1] if latest else {}
        machine_id = snap.get("machine") or self.machine_id(row.workflow)
        return RunView(id=row.id, workflow=row.workflow, digest=row.digest, status=row.status,
                       version=line.version if line else "", value=snap.get("value"),
                       context=snap.get("context") or {}, output=snap.get("output"),
                       error=snap.get("error"), active=active_paths(machine_id, snap.get("value")) if snap else [],
                       live=False)

    def ended_turn(self, run_id: str, iid: str) -> tuple[str, str] | None:
        """(workflow, slot) of Turn `iid` of a finished virtual run, from its journal: a finished run's Turns have
        all ended, and its journaled feed names each. None when the run is not finished or has no such Turn."""
        client = self.client()
        if not client.virtual:
            return None
        try:
            j = client.store.open(run_id)
        except RunError:
            return None
        try:
            row = j.run()
            if row is None or lifecycle(row.status) != "finished":
                return None
            slot = next((e["data"].get("slot") for e in j.feed(0)
                         if e["kind"] == "turn" and e["data"].get("iid") == iid), None)
        except RunError:
            return None
        finally:
            j.close()
        return None if slot is None else (row.workflow, str(slot))

    def journal_telemetry(self, run_id: str) -> list[dict[str, Any]]:
        j = self.client().store.open(run_id)
        try:
            return [e.data for e in j.ledger("telemetry")]
        finally:
            j.close()

    def view(self, status: RunStatus) -> RunView:
        return RunView(**status.model_dump(), active=active_paths(self.machine_id(status.workflow), status.value))

    def machine_id(self, workflow: str) -> str:
        try:
            return self.machine(workflow).id
        except RunError:
            return workflow


def get_ctx(request: Request) -> ApiContext:
    """The FastAPI dependency every router uses: the context `build_app` put on its app."""
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(get_ctx)]
"""How a route asks for its app's context: `ctx: Ctx`."""
