"""The driver-side client (R1): `jr2ray.connect()`, then start, list and drive runs that are Ray actors."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray

from jr2ray.authoring import Jr2Machine
from jr2ray.menu import Receipt, Surface
from jr2ray.settings import Settings, load_settings

from .actor import DEFAULT_LAUNCHER, NAMESPACE, RunActor, actor_name
from .catalog import load_workflow
from .errors import RunError, UnknownRun
from .loopback import is_loopback_address, keep_loopback
from .models import GateView, RunStatus, SendResult, lifecycle
from .store import Store

if TYPE_CHECKING:
    from ray.actor import ActorClass


def _init_ray(address: str | None, namespace: str, settings: Settings | None = None) -> None:
    """Join the cluster at `address` ("auto": the one `jr2ray up` started), else start a private local one."""
    if ray.is_initialized():
        return
    address = address or (settings or load_settings()).ray_address or None
    if address is None:
        # Logical CPUs: on a 2-core box Serve's ingress would never schedule with the physical count.
        ray.init(namespace=namespace, num_cpus=max(4, os.cpu_count() or 1), ignore_reinit_error=True,
                 log_to_driver=False, include_dashboard=False)
    else:
        if is_loopback_address(address):  # a single-machine head listens on loopback only
            keep_loopback()
        ray.init(address=address, namespace=namespace, ignore_reinit_error=True, log_to_driver=False)


def journal_status(store: Store, run_id: str) -> RunStatus | None:
    """A run's status as its journal tells it, for a run with no live actor (finished, or between lives)."""
    try:
        j = store.open(run_id)
    except RunError:
        return None
    try:
        row, latest = j.run(), j.latest_snapshot()
    except RunError:
        return None
    finally:
        j.close()
    if row is None:
        return None
    snap = latest[1] if latest else {}
    return RunStatus(id=row.id, workflow=row.workflow, digest=row.digest, status=row.status,  # type: ignore[arg-type]
                     value=snap.get("value"), context=snap.get("context") or {}, output=snap.get("output"),
                     error=snap.get("error"))


class RunHandle:
    """A run seen from a driver. Mirrors LocalRun, synchronously (each call is one actor round trip).

    A finished run's actor has exited: its reads (status, wait, telemetry) come from the journal.
    """

    def __init__(self, run_id: str, actor: Any, store: Store | None = None) -> None:
        self.id = run_id
        self.actor = actor
        self.store = store

    def _finished(self) -> RunStatus | None:
        st = journal_status(self.store, self.id) if self.store is not None else None
        return st if st is not None and lifecycle(st.status) == "finished" else None

    def _read(self, method: str, *args: Any) -> Any:
        if self.actor is None:
            if (st := self._finished()) is not None:
                return st
            raise UnknownRun(f"run {self.id!r} has no live actor")
        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayActorError:
            if (st := self._finished()) is None:
                raise
            return st

    def ready(self) -> RunStatus:
        return ray.get(self.actor.ready.remote())

    def surface(self, address: str) -> Surface:
        return ray.get(self.actor.surface.remote(address))

    def pick(self, address: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None) -> Receipt:
        return ray.get(self.actor.pick.remote(address, name, args or {}, delivery_id))

    def pick_async(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> Any:
        """The ObjectRef of a pick, for one that waits for Rest while the driver answers a Gate."""
        return self.actor.pick.remote(address, name, args or {}, delivery_id)

    def gates(self) -> list[GateView]:
        return ray.get(self.actor.gates.remote())

    def send(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None) -> SendResult:
        return ray.get(self.actor.send.remote(gate_id, name, args or {}, delivery_id))

    def status(self) -> RunStatus:
        return self._read("status")

    def cancel(self) -> RunStatus:
        return ray.get(self.actor.cancel.remote())

    def stop(self) -> RunStatus:
        return ray.get(self.actor.stop.remote())

    def wait(self, timeout: float | None = None) -> RunStatus:
        return self._read("wait", timeout)

    def telemetry(self) -> list[dict[str, Any]]:
        out = self._read("telemetry")
        if isinstance(out, RunStatus):  # finished: the rows are in the journal
            assert self.store is not None
            j = self.store.open(self.id)
            try:
                return [e.data for e in j.ledger("telemetry")]
            finally:
                j.close()
        return out


class Client:
    def __init__(self, namespace: str = NAMESPACE, store: str | Path | None = None,
                 launcher: str | None = DEFAULT_LAUNCHER, settings: Settings | None = None) -> None:
        self.namespace = namespace
        self.settings = settings or load_settings()
        self.store = Store(store or self.settings.store_dir())
        self.launcher = launcher

    def start(self, workflow: str | Jr2Machine, input: Any, run_id: str | None = None,
              env: dict[str, str] | None = None) -> RunHandle:
        """Validate the input against the door schema (raises ValueError naming the error), then start the actor."""
        if isinstance(workflow, str):  # the catalog the actor will see: its env's JR2RAY_WORKFLOWS wins over ours
            modules = load_settings(workflows=(env or {}).get("JR2RAY_WORKFLOWS")).workflows
            machine = load_workflow(workflow, modules)
        else:
            machine = workflow
        machine.validate_input(input)
        rid = run_id or uuid.uuid4().hex[:12]
        data = input.model_dump(mode="json") if hasattr(input, "model_dump") else input
        # mypy ignores class decorators, so it sees the plain class; at run time `@ray.remote` made it an ActorClass.
        actor_class = cast("ActorClass[RunActor]", RunActor)
        actor = actor_class.options(name=actor_name(rid), namespace=self.namespace, lifetime="detached",
                                    get_if_exists=True).remote(rid, workflow, data, str(self.store.directory),
                                                               self.launcher, env)
        handle = RunHandle(rid, actor, self.store)
        handle.ready()
        return handle

    def resume(self, env: dict[str, str] | None = None) -> list[str]:
        """After `down` and `up`: start an actor for every active run that has none. Each rebuilds from its journal.

        The run's journaled env (no secrets) is used, with `env` (the instance's) over it. Returns the ids resumed.
        """
        handles: list[RunHandle] = []
        for r in self.store.list_runs():
            if r.status != "active":
                continue
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
                                        get_if_exists=True).remote(r.id, r.workflow, r.input,
                                                                   str(self.store.directory), launcher, run_env, True)
            handles.append(RunHandle(r.id, actor, self.store))
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
        try:
            actor = ray.get_actor(actor_name(rid), namespace=self.namespace)
        except ValueError:
            if self._finished_in_journal(rid):  # its actor exited at the end: the journal answers reads
                return RunHandle(rid, None, self.store)
            raise UnknownRun(f"no live run {rid!r}") from None
        return RunHandle(rid, actor, self.store)

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

    def runs(self) -> list[dict[str, Any]]:
        """Every run the store knows; one whose journal is gone or damaged lists as `lost`/`corrupt` with the reason."""
        return [r.model_dump() for r in self.store.list_runs()]


def connect(address: str | None = None, namespace: str = NAMESPACE, store: str | Path | None = None,
            launcher: str | None = DEFAULT_LAUNCHER, settings: Settings | None = None) -> Client:
    """Join (or start) Ray and return a client for runs in `namespace`. `settings` default to the environment's."""
    settings = settings or load_settings()
    _init_ray(address, namespace, settings)
    return Client(namespace, store, launcher, settings)
