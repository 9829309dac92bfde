"""The driver-side client (R1): `jr2ray.connect()`, then start, list and drive runs that are Ray actors."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import ray

from jr2ray.authoring import Jr2Machine
from jr2ray.menu import Receipt, Surface
from jr2ray.settings import Settings, load_settings

from .actor import DEFAULT_LAUNCHER, NAMESPACE, RunActor, actor_name
from .loopback import is_loopback_address, keep_loopback
from .catalog import load_workflow
from .errors import UnknownRun
from .models import GateView, RunStatus, SendResult
from .store import Store


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


class RunHandle:
    """A run seen from a driver. Mirrors LocalRun, synchronously (each call is one actor round trip)."""

    def __init__(self, run_id: str, actor: Any) -> None:
        self.id = run_id
        self.actor = actor

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
        return ray.get(self.actor.status.remote())

    def cancel(self) -> RunStatus:
        return ray.get(self.actor.cancel.remote())

    def stop(self) -> RunStatus:
        return ray.get(self.actor.stop.remote())

    def wait(self, timeout: float | None = None) -> RunStatus:
        return ray.get(self.actor.wait.remote(timeout))

    def telemetry(self) -> list[dict[str, Any]]:
        return ray.get(self.actor.telemetry.remote())


class Client:
    def __init__(self, namespace: str = NAMESPACE, store: str | Path | None = None,
                 launcher: str | None = DEFAULT_LAUNCHER, settings: Settings | None = None) -> None:
        self.namespace = namespace
        self.store = Store(store or (settings or load_settings()).store_dir())
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
        actor = RunActor.options(name=actor_name(rid), namespace=self.namespace, lifetime="detached",
                                 get_if_exists=True).remote(rid, workflow, data, str(self.store.directory),
                                                            self.launcher, env)
        handle = RunHandle(rid, actor)
        handle.ready()
        return handle

    def get(self, run_id: str) -> RunHandle:
        """A live run by id, or an unambiguous prefix of at least 4 characters."""
        rid = self.resolve(run_id)
        try:
            actor = ray.get_actor(actor_name(rid), namespace=self.namespace)
        except ValueError:
            raise UnknownRun(f"no live run {rid!r}") from None
        return RunHandle(rid, actor)

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
        out = []
        for rid in self.store.run_ids():
            j = self.store.open(rid)
            try:
                row = j.run()
            finally:
                j.close()
            if row is not None:
                out.append(row.model_dump())
        return out


def connect(address: str | None = None, namespace: str = NAMESPACE, store: str | Path | None = None,
            launcher: str | None = DEFAULT_LAUNCHER, settings: Settings | None = None) -> Client:
    """Join (or start) Ray and return a client for runs in `namespace`. `settings` default to the environment's."""
    settings = settings or load_settings()
    _init_ray(address, namespace, settings)
    return Client(namespace, store, launcher, settings)
