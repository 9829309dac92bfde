"""The driver-side client (R1): `jr2ray.connect()`, then start, list and drive runs that are Ray actors.

`connect()` with no arguments joins the instance `jr2ray up` started (it reads <home>/instance.json through the
settings and applies its Ray address and auth itself); with none running it starts a private local Ray.
Every run handle's call has an awaitable `*_async` form, so one asyncio driver can hold many runs at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import logging
import os
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import ray

from jr2ray.authoring import Jr2Machine
from jr2ray.code_digest import code_digest
from jr2ray.instance_record import driver_env
from jr2ray.settings import Settings, instance_launcher, load_settings

from . import gcfreeze, versions
from .actor import DEFAULT_LAUNCHER, NAMESPACE, RunActor, actor_name
from .catalog import load_workflow
from .errors import InstanceDown, RunEnded, UnknownRun
from .fanout import FinishedBar, Finishing, merged_events, progress_bar, until_all, until_each_loop
from .handles import WAIT_POLL_S, ActorRunHandle, DriverHandle, journal_status
from .handover import Inbox
from .loopback import is_loopback_address, keep_loopback
from .many import GateSend, create_tasks, send_many, send_many_blocking
from .models import RunEvent, Standing, lifecycle, listed_presence
from .placement import mode_for, options
from .ray_start import instance_ray_env
from .store import JournalStore, open_store
from .virtual import FINISHED, VirtualRunHandle, gate_open, turn_at_rest

_log = logging.getLogger(__name__)

__all__ = ["WAIT_POLL_S", "ActorRunHandle", "Client", "DriverHandle", "GateSend", "InstanceDown", "OtherCodeWarning",
           "RunEnded", "RunEvent", "RunHandle", "VirtualRunHandle", "connect", "journal_status", "resolve_launcher"]
RunHandle = ActorRunHandle | VirtualRunHandle  # what the client's calls hand out: one run, either kind
START_BATCH = 500  # starts journaled per registry call (one store transaction each on PostgreSQL)
T = TypeVar("T")

if TYPE_CHECKING:
    from ray.actor import ActorClass


def resolve_launcher(spec: str | None) -> str | None:
    """The TurnLauncher of new runs. None (or "none"/"external"): no Harness at all, every Agent seat is played by
    the caller over surface/pick. "auto": the Ray Harness when it imports. Anything else: a `module:attr` path."""
    if spec is None or spec.lower() in ("", "none", "external"):
        return None
    if spec == "auto":
        try:
            importlib.import_module(DEFAULT_LAUNCHER.partition(":")[0])
        except ImportError:
            return None
        return DEFAULT_LAUNCHER
    return spec


class OtherCodeWarning(UserWarning):
    """This driver's jr2ray code is not the code its instance was started with."""


def warn_if_other_code(recorded: str | None, home: Path) -> None:
    """Warn once at `connect()` when the instance's hosts run other jr2ray code than this driver (see
    `jr2ray.code_digest`); an instance recorded before digests were kept is not checked."""
    here = code_digest()
    if recorded and recorded != here:
        warnings.warn(OtherCodeWarning(
            f"this script runs jr2ray code {here}, but the instance at {home} was started with code {recorded}: its "
            "hosts may not take this script's calls. Run `jr2ray down` and `jr2ray up` to run this code there"),
            stacklevel=5)  # the script's line that called connect()


def _join_instance(settings: Settings) -> str | None:
    """The Ray address of the instance recorded in <home>/instance.json, with its auth env applied to this process
    (Ray reads it at init). None only when no instance is recorded: one that is recorded but does not answer (or
    whose head lost its GCS or raylet) raises InstanceDown, never falling back to a private Ray beside it."""
    from .head import head_state

    inst = settings.instance()
    if inst is None or not inst.ray_address:
        return None
    state = head_state(inst)
    if state.state != "up":
        raise InstanceDown(settings.home_dir(create=False), inst.ray_address, state.reason)
    warn_if_other_code(inst.code, settings.home_dir(create=False))
    env = driver_env(inst)
    env.pop("RAY_ADDRESS", None)
    os.environ.update(env)
    if inst.ray_auth_token_path:
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the instance's token file
    if env:
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")  # re-read RAY_AUTH_MODE in case Ray read its config before the env was set
    return inst.ray_address


def _init_ray(address: str | None, namespace: str, settings: Settings) -> None:
    """Join `address`, else RAY_ADDRESS, else the instance `jr2ray up` recorded; else start a private local Ray."""
    if ray.is_initialized():
        return
    recorded = not (address or settings.ray_address)
    address = address or settings.ray_address or _join_instance(settings)
    starts = instance_ray_env(settings.live_run_slots()) if address in (None, "local") else contextlib.nullcontext()
    if address is None:  # logical CPUs: on a 2-core box Serve's ingress would never schedule with the physical count
        with starts:  # a Ray started here is sized as `jr2ray up`'s; a join changes nothing in this process
            ray.init(namespace=namespace, num_cpus=max(4, os.cpu_count() or 1), ignore_reinit_error=True,
                     log_to_driver=False, include_dashboard=False)
    else:
        if is_loopback_address(address):  # a single-machine head listens on loopback only
            keep_loopback()
        try:
            with starts:
                ray.init(address=address, namespace=namespace, ignore_reinit_error=True, log_to_driver=False)
        except (ConnectionError, TimeoutError) as exc:
            if not recorded:
                raise
            raise InstanceDown(settings.home_dir(create=False), address,
                               f"{type(exc).__name__}: {str(exc)[:200]}") from None


class Client:
    """Runs in one namespace and one journal store. `launcher`: see `resolve_launcher` ("auto" by default)."""

    def __init__(self, namespace: str = NAMESPACE, store: str | Path | None = None,
                 launcher: str | None = "auto", settings: Settings | None = None, virtual: bool | None = None) -> None:
        self.namespace = namespace
        self.settings = settings or load_settings()
        self.virtual = self.settings.virtual_runs if virtual is None else virtual
        self._registry: Any = None
        self._session: str | None = None  # the Ray job the registry handle belongs to (a new one after down/up)
        self.store: JournalStore = open_store(store or self.settings.store_location(), self.settings)
        self.placement = mode_for(self.store.shared, self.settings.run_placement)  # where its runs' actors go
        self.launcher = resolve_launcher(launcher)
        self._menus: dict[tuple[str, str, str], Any] = {}
        self._menu_of = self.menu_of  # one bound method every handle shares (not one object per handle)
        # The `--workflows` modules: JR2RAY_WORKFLOWS, then those `up` kept in config.json (as `up` serves them).
        self.modules = self.settings.catalog_modules()

    def menu_of(self, workflow: str, seat: str, version: str = "") -> Any:
        """A seat's fixed Menu, for a parked run's surface read from the store: from the run's own version (the
        Menu never changes mid-run, whatever the file says now)."""
        key = (workflow, seat, version)
        got = self._menus.get(key)
        if got is None:
            machine = (versions.load(self.store, workflow, version) if version
                       else load_workflow(workflow, self.modules))
            got = self._menus[key] = machine.menu(seat)  # type: ignore[attr-defined]
        return got

    def stats(self) -> dict[str, Any]:
        """The registry's counts (virtual runs): `live` and `queued` run ids, `max_live`, `idle_hosts`,
        `activations`, `peak_live`, `early_parks` and the wake board's size. Reading them wakes nothing."""
        return dict(ray.get(self.registry().stats.remote()))

    def warm_pool(self, n: int | None = None, env: dict[str, str] | None = None) -> int:
        """Start up to `n` (default: the live-run slots) idle hosts now for runs this client starts with `env`, so
        a burst of wakes starts no process; `jr2ray up` does this in the background. Returns how many wait."""
        stats = self.stats()
        target = int(stats["max_live"]) if n is None else n
        want = max(0, target - int(stats["idle_hosts"]) - len(stats["live"]))
        return int(ray.get(self.registry().warm.remote(want, env or {}, self.launcher)))

    def handle(self, run_id: str) -> VirtualRunHandle:
        """A handle on the virtual run of exactly this id, without looking it up (`get` resolves a prefix)."""
        return VirtualRunHandle(run_id, self.registry(), self.store, self._menu_of)

    def _machine(self, workflow: str | Jr2Machine, env: dict[str, str] | None) -> tuple[str, Jr2Machine]:
        """The version a new run gets (recorded in the store; "" for a machine given as an object) and its machine."""
        if isinstance(workflow, str):  # the catalog the actor will see: its env's JR2RAY_WORKFLOWS wins over ours
            given = (env or {}).get("JR2RAY_WORKFLOWS")
            modules = self.modules if given is None else [m.strip() for m in given.split(",") if m.strip()]
            return versions.current(self.store, workflow, modules)
        return "", workflow

    def registry(self) -> Any:
        """The one place that finds or activates a virtual run's host (a detached actor, started on first use)."""
        from .registry import get_registry
        from .timers import get_timer_service

        ctx = ray.get_runtime_context()
        session = f"{ctx.get_node_id()}/{ctx.get_job_id()}"  # a new Ray (after down/up) has new node ids
        if self._registry is None or self._session != session:  # one handle per Ray session: Ray keeps the order
            self._session = session                                # of calls made through the same handle
            self._registry = get_registry(self.store.location, self.namespace, self.settings.idle_deactivate_s,
                                          self.settings.live_run_slots(), self.placement,
                                          queued_idle_s=self.settings.queued_idle_s,
                                          pool_idle_s=self.settings.pool_idle_s,
                                          pool_idle_keep=self.settings.pool_idle_keep,
                                          runs_per_host=self.settings.runs_per_host)
            self.timers = get_timer_service(self.store.location, self.namespace)  # parked runs' reminders
        return self._registry

    def _launch(self, workflow: str | Jr2Machine, data: Any, rid: str, env: dict[str, str] | None) -> RunHandle:
        if self.virtual:  # a workflow given as a Machine (not by name) travels in its start's activation
            spec = {"workflow": workflow, "input": data, "env": env or {}, "launcher": self.launcher, "create": True}
            self.registry().activate.remote(rid, spec, time.time())  # sent: the handle's calls follow it in order
            return self.handle(rid)
        # mypy ignores class decorators, so it sees the plain class; at run time `@ray.remote` made it an ActorClass.
        actor_class = cast("ActorClass[RunActor]", RunActor)
        actor = actor_class.options(name=actor_name(rid), namespace=self.namespace, lifetime="detached",
                                    get_if_exists=True, **options(self.placement)).remote(
            rid, workflow, data, self.store.location, self.launcher, env, placement=self.placement)
        return ActorRunHandle(rid, actor, self.store)

    def start(self, workflow: str | Jr2Machine, input: Any, run_id: str | None = None,
              env: dict[str, str] | None = None) -> RunHandle:
        """Validate the input against the door schema (raises ValueError naming the error), start the run and wait
        until it is live (a virtual run waits for its slot: see `submit` for a start that does not)."""
        handle = self.submit(workflow, input, run_id, env)
        handle.ready()
        return handle

    def submit(self, workflow: str | Jr2Machine, input: Any, run_id: str | None = None,
               env: dict[str, str] | None = None) -> RunHandle:
        """`start` without waiting for the run to go live. A virtual run by name returns once it is one journal
        write (`queued` until admission gives it a slot); any other start returns once it was sent."""
        version, machine = self._machine(workflow, env)
        machine.validate_input(input)
        data = input.model_dump(mode="json") if hasattr(input, "model_dump") else input
        rid = run_id or uuid.uuid4().hex[:12]
        if self.virtual and isinstance(workflow, str):
            spec = {"workflow": workflow, "digest": machine.digest, "version": version, "input": data,
                    "env": env or {}, "launcher": self.launcher}
            reg = self.registry()
            handle = self.handle(rid)
            handle.admitted = ray.get(reg.start.remote(rid, spec, time.time())) == "live"
            return handle
        return self._launch(workflow, data, rid, env)

    def start_many(self, workflow: str | Jr2Machine, inputs: Sequence[Any], env: dict[str, str] | None = None,
                   progress: bool | None = False) -> list[RunHandle]:
        """Start one run per input. When it returns, every start is journaled and listed (`runs()` shows them all);
        runs go live as slots free, first come first served, without this call waiting for any of them.

        Every input is validated first: one bad input raises ValueError (naming its index) and starts nothing.
        Virtual runs by name go in batches sent at once (a registry call and a store batch per `START_BATCH`); if
        the store refuses one, the others still start, and its error is raised once all have answered. A workflow
        given as a `Jr2Machine` object, not by name, has no version to pin and is not batched: each run's start is
        sent with its first activation, and journaled when the registry takes it, after this returns. `progress`:
        a bar of the starts journaled, on stderr only when it is a terminal."""
        with gcfreeze.starting(len(inputs)):
            return self._start_many(workflow, inputs, env, progress)

    def _start_many(self, workflow: str | Jr2Machine, inputs: Sequence[Any], env: dict[str, str] | None,
                    progress: bool | None) -> list[RunHandle]:
        version, machine = self._machine(workflow, env)
        datas: list[Any] = []
        for i, item in enumerate(inputs):
            try:
                machine.validate_input(item)
            except ValueError as exc:
                raise ValueError(f"input {i}: {exc}") from None
            datas.append(item.model_dump(mode="json") if hasattr(item, "model_dump") else item)
        if not (self.virtual and isinstance(workflow, str)):
            return [self._launch(workflow, d, uuid.uuid4().hex[:12], env) for d in datas]
        reg = self.registry()
        starts = [(uuid.uuid4().hex[:12], {"workflow": workflow, "digest": machine.digest, "version": version,
                                           "input": d, "env": env or {}, "launcher": self.launcher})
                  for d in datas]
        ticket = time.time()
        bar = progress_bar(len(starts), progress, "journaled")
        # All batches go at once: the registry writes them side by side, activating none while any is left (2 s max).
        sizes = {reg.start_many.remote(batch, ticket + at * 1e-6): len(batch)
                 for at in range(0, len(starts), START_BATCH) for batch in [starts[at:at + START_BATCH]]}
        done, failed = 0, None
        for ref, size in sizes.items():  # in order: the later batches are written meanwhile
            try:
                ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - raised once every batch has answered
                failed = failed or exc
                continue
            done += size
            if bar is not None:
                bar.update({"journaled": done}, done)
        if bar is not None:
            bar.close()
        if failed is not None:
            raise failed
        return [self.handle(rid) for rid, _ in starts]

    async def start_many_async(self, workflow: str | Jr2Machine, inputs: Sequence[Any],
                               env: dict[str, str] | None = None, progress: bool | None = False) -> list[RunHandle]:
        """`start_many` for asyncio drivers: the same batches, without blocking the caller's loop."""
        return await asyncio.to_thread(self.start_many, workflow, inputs, env, progress)

    # The client's other calls read the store or ask the registry once: their async twins run them off the loop.
    async def start_async(self, workflow: str | Jr2Machine, input: Any, run_id: str | None = None,
                          env: dict[str, str] | None = None) -> RunHandle:
        return await asyncio.to_thread(self.start, workflow, input, run_id, env)

    async def submit_async(self, workflow: str | Jr2Machine, input: Any, run_id: str | None = None,
                           env: dict[str, str] | None = None) -> RunHandle:
        return await asyncio.to_thread(self.submit, workflow, input, run_id, env)

    async def get_async(self, run_id: str) -> RunHandle:
        return await asyncio.to_thread(self.get, run_id)

    async def resolve_async(self, prefix: str) -> str:
        return await asyncio.to_thread(self.resolve, prefix)

    async def resume_async(self, env: dict[str, str] | None = None) -> list[str]:
        return await asyncio.to_thread(self.resume, env)

    async def runs_async(self, limit: int | None = None, after: str | None = None,
                         status: str | list[str] | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.runs, limit, after, status)

    async def stats_async(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    async def warm_pool_async(self, n: int | None = None, env: dict[str, str] | None = None) -> int:
        return await asyncio.to_thread(self.warm_pool, n, env)

    async def gc_async(self, retention_days: float | None = None) -> list[str]:
        return await asyncio.to_thread(self.gc, retention_days)

    async def as_finished_async(self, handles: Sequence[RunHandle],
                                progress: bool | None = False) -> AsyncIterator[RunHandle]:
        """Each handle as its run finishes (its `final` set), for asyncio drivers. `progress`: as `as_finished`.
        A caller that stops early closes it (`contextlib.aclosing`), and the waits still open end then."""
        async def one(h: RunHandle) -> RunHandle:
            h.final = await h.wait_async(None)
            return h
        bar = FinishedBar(len(handles), progress)
        tasks: list[asyncio.Task[RunHandle]] = []
        try:
            tasks = await create_tasks(one(h) for h in handles)
            for got in asyncio.as_completed(tasks):
                h = await got
                bar.add(h.final)
                yield h
        finally:  # a caller that stops early (or is cancelled) leaves no wait behind
            for t in tasks:
                t.cancel()
            bar.close()

    def send_many(self, sends: Iterable[GateSend | tuple[Any, ...]],
                  return_exceptions: bool = False) -> list[Any]:
        """Send many Gate events at once, each a `GateSend` (or its tuple: run, gate id, event, args, delivery id),
        and return their SendResults in order once all have answered. Every event is sent whatever the others do;
        the first error is raised after all have answered, or each is put in its place with `return_exceptions`.
        Two events for one run are not applied in a known order. Not from the driver's own loop (use the async
        form there)."""
        return send_many_blocking(sends, return_exceptions)

    async def send_many_async(self, sends: Iterable[GateSend | tuple[Any, ...]],
                              return_exceptions: bool = False) -> list[Any]:
        """`send_many` for asyncio drivers: the events go out in chunks with the caller's loop served between, and
        their answers come back to it as one. Cancelling the await does not take back what was sent."""
        return await send_many(sends, return_exceptions)

    def events(self, handles: Sequence[RunHandle]) -> AsyncIterator[RunEvent]:
        """Every run's events as they happen (a Turn at Rest, a Gate open, a new status, finished), pushed by the
        runtime, until all of them finished. Nothing is polled, and no parked run is woken by watching it."""
        return merged_events([h for h in handles if isinstance(h, VirtualRunHandle)])

    def wait(self, handles: Sequence[RunHandle], timeout: float | None = None, num_returns: int | None = None,
             progress: bool | None = False) -> tuple[list[RunHandle], list[RunHandle]]:
        """(finished, not yet), like `ray.wait`: returns once `num_returns` runs (default all) have finished, or at
        `timeout`. Each finished handle's `final` holds its last status. Virtual runs are watched as they change
        (pushed, not polled), so waiting keeps no parked run awake. `progress`: a bar of the runs finished, counted
        by final status beside those still running, drawn on stderr only when it is a terminal."""
        want = len(handles) if num_returns is None else min(num_returns, len(handles))
        done: list[RunHandle] = []
        finishing = self._finishing(handles, timeout, progress)
        try:
            for h in finishing if want else ():
                done.append(h)
                if len(done) >= want:
                    break
        finally:
            finishing.close()  # the watches of the runs not waited for end here
        ids = {id(h) for h in done}  # not `h not in done`: quadratic, seconds for 10,000 handles
        return done, [h for h in handles if id(h) not in ids]

    def as_finished(self, handles: Sequence[RunHandle], timeout: float | None = None,
                    progress: bool | None = False) -> Iterator[RunHandle]:
        """Yield each handle as its run finishes (its `final` set); stops at `timeout` (seconds, overall).
        `progress`: as `wait`."""
        yield from self._finishing(handles, timeout, progress)

    def _finishing(self, handles: Sequence[RunHandle], timeout: float | None,
                   progress: bool | None) -> Generator[RunHandle, None, None]:
        """Each handle as its run finishes, each run watched once (pushed for virtual runs), until `timeout`."""
        f = Finishing(len(handles), timeout, progress)
        try:
            yield from f.split(handles)
            if f.watched and not f.pending:  # virtual runs only: each watch's end comes once, in O(runs) overall
                try:
                    yield from f.virtual_only()
                except concurrent.futures.TimeoutError:
                    return
            while f.pending or f.watched:
                left = f.left()
                yield from f.poll_watched(left)
                yield from f.poll_pending(left)
                if left is not None and left <= 0:
                    return
        finally:
            f.close()

    async def wait_async(self, handles: Sequence[RunHandle], timeout: float | None = None,
                         progress: bool | None = False) -> tuple[list[RunHandle], list[RunHandle]]:
        """`wait` for asyncio drivers: (finished, not yet) once all have finished or at `timeout`. `progress`: as
        `wait`. Virtual runs are waited on as `until_gates` waits: no task per run on the caller's loop."""
        bar = FinishedBar(len(handles), progress)
        here = Inbox.of(asyncio.get_running_loop())

        def finished(h: VirtualRunHandle, st: Standing) -> None:  # on the driver's loop
            h.final = st.status
            if bar.bar is not None:  # the bar is drawn from the caller's loop
                here.put(functools.partial(bar.add, st.status))

        async def one(h: RunHandle) -> None:
            h.final = await h.wait_async(None)
            bar.add(h.final)

        tasks: list[asyncio.Future[Any]] = []
        try:
            for h in handles:
                if h.final is not None:
                    bar.add(h.final)
            running = [h for h in handles if h.final is None]
            virtual = [h for h in running if isinstance(h, VirtualRunHandle)]
            tasks = [asyncio.ensure_future(w) for w in until_each_loop(virtual, FINISHED, finished)]
            tasks += await create_tasks(one(h) for h in running if not isinstance(h, VirtualRunHandle))
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)
        finally:
            for t in tasks:
                t.cancel()
            bar.close()
        for t in tasks:  # a watch that failed leaves its run in "not yet", and says why here
            failed = t.exception() or t.result() if t.done() and not t.cancelled() else None
            if failed is not None:
                _log.warning("wait_async: a run's wait failed, so it is among those not finished: %r", failed)
        done: list[RunHandle] = []
        left: list[RunHandle] = []
        for h in handles:  # one pass: a run that finishes meanwhile is in one list, not neither
            (done if h.final is not None else left).append(h)
        return done, left

    async def until_gates(self, handles: Sequence[RunHandle], gate: str, timeout: float | None = None) -> None:
        """Once Gate `gate` (its id) has opened on each run of `handles`, as each run's `until_gate` would say. If a
        run finishes before its Gate opens, RunEnded once every run has answered. One wait for them all, on the
        driver's own thread: the caller's loop holds no task and no standing per run, so 10,000 finished waits are
        not let go in one step of it."""
        await until_all(handles, gate_open(gate), timeout)

    async def until_turns(self, handles: Sequence[RunHandle], seat: str, timeout: float | None = None) -> None:
        """Once the seat's Turn has been open and at Rest on each run of `handles` (as `until_gates`, for a Turn)."""
        await until_all(handles, turn_at_rest(seat), timeout)

    def resume(self, env: dict[str, str] | None = None) -> list[str]:
        """After `down` and `up`: start an actor for every active run that has none. Each rebuilds from its journal.

        The run's journaled env (no secrets) is used, with `env` (the instance's) over it. Returns the ids resumed.
        """
        if self.virtual:  # the registry wakes those that were live; parked ones wait for what wakes them
            reg = self.registry()
            woken = list(ray.get(reg.resume.remote(env or {})))
            ray.get([reg.activate.remote(rid) for rid in woken])  # back when they are live, as actors were
            return woken
        handles: list[ActorRunHandle] = []
        for r in self.store.list_runs(status="active"):
            try:
                ray.get_actor(actor_name(r.id), namespace=self.namespace)
                continue
            except ValueError:
                pass
            j = self.store.open(r.id)
            try:
                origin = next((e.data for e in j.ledger("start")), {})
            finally:
                j.close()
            run_env = {**origin.get("env", {}), **(env or {})}
            launcher = origin.get("launcher", self.launcher)
            actor_class = cast("ActorClass[RunActor]", RunActor)  # mypy ignores @ray.remote, as in start()
            actor = actor_class.options(name=actor_name(r.id), namespace=self.namespace, lifetime="detached",
                                        get_if_exists=True, **options(self.placement)).remote(
                r.id, r.workflow, r.input, self.store.location, launcher, run_env, True, placement=self.placement)
            handles.append(ActorRunHandle(r.id, actor, self.store))
        ray.get([h.actor.ready.remote() for h in handles])  # all start at once; each rebuilds from its journal
        resumed = [h.id for h in handles]
        return resumed

    def gc(self, retention_days: float | None = None) -> list[str]:
        """Purge the journals of runs finished longer ago than the retention setting (default 7 days)."""
        days = retention_days if retention_days is not None else self.settings.retention_days
        return self.store.purge_finished(days * 24 * 3600)

    def get(self, run_id: str) -> RunHandle:
        """A live run by id, or an unambiguous prefix of at least 4 characters."""
        rid = self.resolve(run_id)
        if self.virtual:  # parked or live: its calls find its host, or the store answers its reads
            return self.handle(rid)
        try:
            actor = ray.get_actor(actor_name(rid), namespace=self.namespace)
        except ValueError:
            if self._finished_in_journal(rid):  # its actor exited at the end: the journal answers reads
                return ActorRunHandle(rid, None, self.store)
            raise UnknownRun(f"no live run {rid!r}") from None
        return ActorRunHandle(rid, actor, self.store)

    def _finished_in_journal(self, run_id: str) -> bool:
        st = journal_status(self.store, run_id)
        return st is not None and lifecycle(st.status) == "finished"

    def resolve(self, prefix: str) -> str:
        ids = self.store.run_ids()
        if prefix in ids:
            return prefix
        if len(prefix) < 4:
            raise UnknownRun(f"run id prefix {prefix!r} is shorter than 4 characters")
        hits = [i for i in ids if i.startswith(prefix)]
        if len(hits) != 1:
            raise UnknownRun(f"run id prefix {prefix!r} matches {len(hits)} runs")
        return hits[0]

    def runs(self, limit: int | None = None, after: str | None = None,
             status: str | list[str] | None = None) -> list[dict[str, Any]]:
        """Runs newest first from the store's index (see `JournalStore.list_runs`); one whose journal is gone or
        damaged lists as `lost`/`corrupt` with the reason. Each says where it is (`presence`): `live` (hosted now),
        `parked` (only in its journal) or `queued` (waiting for a slot); finished runs have none. `cursor` on each
        row pages on after it."""
        lines = self.store.list_runs(limit, after, status)
        rows = [r.model_dump() | {"cursor": self.store.cursor(r), "presence": None} for r in lines]
        waiting = [r["id"] for r in rows if r["status"] in ("active", "queued")]
        if not waiting:
            return rows
        if self.virtual:  # the registry knows: a start it is adopting is live, one in line is queued
            where = ray.get(self.registry().presence.remote(waiting))
            places = ray.get(self.registry().places.remote([r for r in waiting if where.get(r) == "queued"]))
            for r in rows:
                r["place"], r["presence"] = places.get(r["id"]), listed_presence(r["status"], where.get(r["id"]))
            return rows
        for r in rows:  # one actor per run: an active run's actor is up, or it waits for `up` to resume it
            if r["id"] in waiting:
                r["presence"] = "queued" if r["status"] == "queued" else "live"
        return rows


_RECORDED = "recorded"  # connect's default launcher: the one `jr2ray up` recorded for its instance


def connect(address: str | None = None, namespace: str = NAMESPACE, store: str | Path | None = None,
            launcher: str | None = _RECORDED, settings: Settings | None = None, virtual: bool | None = None,
            freeze_gc: bool = True) -> Client:
    """Join Ray and return a client for runs in `namespace`. With no arguments: the local instance `jr2ray up`
    started (found through <home>/instance.json), its journal store and its launcher (`up --launcher`; "auto",
    the Harness, when no instance is recorded); with no instance, a private local Ray. `launcher=None` starts no
    Harness: the caller plays every Agent seat over surface/pick.

    `freeze_gc` (on by default): what is alive when `connect()` returns lives as long as the driver, and so does
    what survives the cyclic GC's passes while the driver waits on many runs; both are out of the
    collector's passes, which stop every thread, the caller's loop included (`jr2ray.run.gcfreeze`); and while it
    waits on many, a young pass comes about every 50 ms, so none walks a long backlog. No threshold changes.
    `freeze_gc=False` leaves the process's GC alone."""
    settings = settings or load_settings()
    if launcher == _RECORDED:
        launcher = instance_launcher(settings)
    _init_ray(address, namespace, settings)
    client = Client(namespace, store, launcher, settings, virtual)
    if freeze_gc:
        gcfreeze.enable()
    return client
