"""What the Ray tests share: a private Ray with a virtual-runs client, the registry's stats, a poll, and whether a
run's named actor is gone."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray

from jr2ray.settings import load_settings


@contextmanager
def virtual_client(home: Path, store: str, **settings: Any) -> Iterator[Any]:
    """A fresh private Ray for one test module, and a client whose runs are virtual, stored under home/store."""
    import jr2ray

    os.environ["JR2RAY_HOME"] = str(home)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    try:
        yield jr2ray.connect(store=home / store, launcher=None, settings=load_settings(**settings), virtual=True)
    finally:
        ray.shutdown()


def stats(client: Any) -> dict[str, Any]:
    """The registry's view: live, parked and queued runs, and its activation count."""
    return ray.get(client.registry().stats.remote())


def until(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy; on timeout, say what was awaited and what it last gave."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {_last(check)}")


def _last(check: Any) -> Any:
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - only for the failure message
        return exc


def actor_gone(run_id: str) -> bool:
    """True once the run's named actor has exited (a finished run frees its process)."""
    try:
        ray.get_actor(f"run:{run_id}", namespace="jr2ray")
    except ValueError:
        return True
    return False


def killable(run: Any) -> Any:
    """The actor to kill to kill a run's process: its own RunActor, or the pooled host that holds a virtual run."""
    if hasattr(run, "host_now"):
        run.pid()  # wakes a parked run, and caches its host on the handle
        return run.host
    return run.actor


def holds_no_actor(client: Any, run: Any) -> bool:
    """True once a finished run holds no actor: its RunActor exited, or its host went back to the pool."""
    if getattr(client, "virtual", False):
        return run.id not in ray.get(client.registry().stats.remote())["live"]
    return actor_gone(run.id)


@contextmanager
def workflow_package(root: Path, package: str, module: str, source: str) -> Iterator[Path]:
    """A package of one workflow module the test may edit, importable and named in JR2RAY_WORKFLOWS while open
    (Ray workers started meanwhile inherit both); the file's path, to edit."""
    pkg = root / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    path = pkg / f"{module}.py"
    path.write_text(source)
    sys.path.insert(0, str(root))
    old = os.environ.get("JR2RAY_WORKFLOWS")
    os.environ["JR2RAY_WORKFLOWS"] = f"{package}.{module}"
    try:
        yield path
    finally:
        sys.path.remove(str(root))
        if old is None:
            os.environ.pop("JR2RAY_WORKFLOWS", None)
        else:
            os.environ["JR2RAY_WORKFLOWS"] = old
