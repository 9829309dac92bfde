"""Shared pieces of the API tests: the live server handle, run drivers, and a full picture of a run for
"a refused request changed nothing" checks."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from fastapi import FastAPI

ENV = {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_DEPLOY_DRIVER": "external", "JR2RAY_CODER_DRIVER": "external"}
# The Host names the tests' clients send: the live server's address, httpx's ASGI base URL, Starlette's TestClient.
TEST_HOSTS = ["127.0.0.1", "localhost", "jr2ray.test", "testserver"]
NOTES_INPUT = {"changes": "fix: crash on empty input\nfeat: dark mode"}
T = TypeVar("T")


@dataclass
class LiveServer:
    url: str
    token: str
    app: FastAPI

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def store_dir(self) -> Path:
        return Path(self.app.state.ctx.home) / "runs"


def wait_for(pred: Callable[[], T | None], timeout: float = 60.0, every: float = 0.05, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or pred}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers_ok(url: str) -> bool:
    """Whether `url` answers 200 now (a server that is not up yet, or is restarting, is not an error here)."""
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def deployed_api(api_home: Path, **deploy: Any) -> Iterator[str]:
    """The API on Ray Serve as `jr2ray up` deploys it (`deploy_api`, on a free local port); yields its URL once
    /healthz answers, and deletes the app and shuts Serve down after. `deploy` goes to `deploy_api`.

    Its runs are journaled under <api_home>/runs, so that store is one of the tier's `STORES` (the package's
    api_config fixture adds it too, but a Serve test run on its own may not have asked for that fixture)."""
    from ray import serve as ray_serve

    from serve.api import APP_NAME, ApiConfig, deploy_api

    if api_home / "runs" not in STORES:
        STORES.append(api_home / "runs")
    config = ApiConfig(home=str(api_home), launcher="none", run_env=dict(ENV), poll_s=0.05, keepalive_s=0.4)
    try:
        url = deploy_api(config, host="127.0.0.1", port=free_port(), **deploy)
    except BaseException:
        # A half-started Serve (a proxy that missed its start window on a loaded box) would otherwise be the one
        # the next module's deploy finds, with this module's options instead of its own.
        ray_serve.shutdown()
        raise
    try:
        wait_for(lambda: answers_ok(f"{url}/healthz"), timeout=180, every=0.5, what="the Serve app to answer")
        yield url
    finally:
        ray_serve.delete(APP_NAME)
        ray_serve.shutdown()


def start_notes(http: httpx.Client, changes: str | None = None) -> tuple[str, str]:
    """Start a notes run over the API; returns (run id, the writer's Turn iid)."""
    r = http.post("/workflows/notes/runs", json={"input": {"changes": changes or NOTES_INPUT["changes"]}})
    assert r.status_code == 201, r.text
    body = r.json()
    (turn,) = [t for t in body["turns"] if t["active"]]
    assert turn["slot"] == "writer"
    return body["id"], turn["iid"]


def ask_in_background(http: httpx.Client, pool: ThreadPoolExecutor, run_id: str, iid: str,
                      question: str = "Which change matters most?") -> tuple[Future[httpx.Response], dict[str, Any]]:
    """Pick `ask` (its receipt waits for the editor) and wait until the run shows the Gate it opened."""
    fut = pool.submit(http.post, f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": question}})

    def gate() -> dict[str, Any] | None:
        gates = http.get(f"/runs/{run_id}").json()["gates"]
        return gates[0] if gates else None

    return fut, wait_for(gate, what="the editor's Gate to open")


STORES: list[Path] = []  # the journal stores of the tier's apps (conftest adds them): their registries hold the runs


class _HostCall:
    def __init__(self, face: HostFace, method: str) -> None:
        self.face, self.method = face, method

    def remote(self, *args: Any) -> Any:
        return self.face.host().call.remote(self.face.run_id, self.method, list(args))


class HostFace:
    """A virtual run's host, called like its own RunActor would be (`face.status.remote()` is an ObjectRef)."""

    def __init__(self, run_id: str, registry: Any) -> None:
        self.run_id, self.registry = run_id, registry

    def host(self) -> Any:
        import ray

        (host,) = ray.get(self.registry.activate.remote(self.run_id), timeout=60)
        return host

    def __getattr__(self, method: str) -> _HostCall:
        if method.startswith("_"):
            raise AttributeError(method)
        return _HostCall(self, method)


def _actor(run_id: str) -> Any:
    """The run's actor: its own RunActor (JR2RAY_VIRTUAL_RUNS=0), else a face on the pooled host that holds it."""
    import ray

    from jr2ray.run.actor import NAMESPACE, actor_name
    from jr2ray.run.registry import get_registry

    try:
        return ray.get_actor(actor_name(run_id), namespace=NAMESPACE)
    except ValueError:
        pass
    for store in STORES:
        if (store / f"{run_id}.sqlite").exists():
            return HostFace(run_id, get_registry(str(store), NAMESPACE))
    raise AssertionError(f"run {run_id} is in none of the tier's stores {STORES}")


def run_actor(run_id: str) -> Any:
    return _actor(run_id)


def kill_run_actor(run_id: str) -> None:
    """End the process that holds the run now, for good (Ray does not restart it)."""
    import ray

    got = _actor(run_id)
    if not isinstance(got, HostFace):
        ray.kill(got, no_restart=True)
        return
    host = got.host()
    ray.kill(host, no_restart=True)
    ray.get(got.registry.host_died.remote(run_id, host._actor_id.hex()))  # as a caller that found it dead would


def holds_no_actor(run_id: str) -> bool:
    """True once the run is held by no actor: its RunActor exited, or its host parked it (or died)."""
    import ray

    from jr2ray.run.actor import NAMESPACE, actor_name
    from jr2ray.run.registry import get_registry

    try:
        ray.get_actor(actor_name(run_id), namespace=NAMESPACE)
        return False
    except ValueError:
        pass
    for store in STORES:
        if (store / f"{run_id}.sqlite").exists():
            got = ray.get(get_registry(str(store), NAMESPACE).lookup.remote(run_id), timeout=60)
            if not got:
                return True
            try:
                ray.get(got[0].info.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - a host that does not answer is gone
                return True
            return False
    return True


def history(run_id: str) -> list[dict[str, Any]]:
    import ray

    return ray.get(_actor(run_id).history.remote(0), timeout=60)


def journal(store_dir: Path, run_id: str) -> dict[str, Any]:
    """A run's journal as JSON values, read straight from the store (no Ray): its run row, every ledger entry in
    order, and the latest snapshot."""
    from jr2ray.run.store import Store

    j = Store(store_dir).open(run_id)
    try:
        row = j.run()
        return {"run": row.model_dump(mode="json") if row else None,
                "ledger": [e.model_dump(mode="json") for e in j.ledger()],
                "snapshot": j.latest_snapshot()}
    finally:
        j.close()


def observe(store_dir: Path, run_id: str) -> dict[str, Any]:
    """Everything a request could change about a run: live status, event history, and the journal (run row, every
    ledger entry, the latest snapshot)."""
    import ray

    status = ray.get(_actor(run_id).status.remote(), timeout=60).model_dump(mode="json")
    return json.loads(json.dumps({"status": status, "history": history(run_id),
                                  "journal": journal(store_dir, run_id)}, default=str))


def run_ids(store_dir: Path) -> list[str]:
    from jr2ray.run.store import Store

    return sorted(Store(store_dir).run_ids())


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str | None, Any]]:
    """Parse an SSE stream into (event, id, data) triples; a `: comment` yields ("comment", None, text)."""
    kind: str = "message"
    eid: str | None = None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield kind, eid, json.loads("\n".join(data))
            kind, eid, data = "message", None, []
        elif line.startswith(":"):
            yield "comment", None, line[1:].strip()
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("id:"):
            eid = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
