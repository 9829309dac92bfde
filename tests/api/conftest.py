"""The API tier: the FastAPI app against real Run actors on a private Ray.

- `ray_cluster` (package scope) starts a local Ray only if none is up, and shuts down only what it started, so this
  tier shares one pytest process with the others.
- `live` serves the app with uvicorn on a thread in this process (real HTTP: SSE and chunked bodies behave as they do
  in production); `asgi_app` is the same app for in-process httpx `ASGITransport` clients.
- Agents here are played by the test over `/agents/{iid}/...` (the external driver), never by a model.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from serve.api import ApiConfig, build_app
from serve.auth import ensure_token

from .api_helpers import ENV, STORES, TEST_HOSTS, LiveServer


@pytest.fixture(scope="package")
def api_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jr2ray_api_home")


@pytest.fixture(scope="package")
def token(api_home: Path) -> str:
    tok, created = ensure_token(api_home)
    assert created
    return tok


@pytest.fixture(scope="package")
def api_config(api_home: Path, token: str) -> Iterator[ApiConfig]:
    # No `token=`: the app must read the instance token from <home>/token, as a deployed one does.
    STORES.append(api_home / "runs")
    # Runs stay live between a test's steps: parking and waking are the ray tier's subject (test_virtual_*.py), and
    # a woken run's feed numbers skip ahead by design, which the SSE tests here would read as a gap.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JR2RAY_IDLE_DEACTIVATE_S", "600")
        yield ApiConfig(home=str(api_home), launcher="none", run_env=dict(ENV), poll_s=0.05, keepalive_s=0.4,
                        hosts=TEST_HOSTS)


@pytest.fixture(scope="package")
def ray_cluster(api_home: Path) -> Iterator[bool]:
    """Yields True when this tier started the Ray it uses (False: it joined one already up in this process)."""
    import ray

    started = not ray.is_initialized()
    if started:
        for attempt in range(2):  # on a loaded 2-core box the raylet can miss Ray's fixed 30 s startup window
            try:
                ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
                break
            except Exception:
                ray.shutdown()
                if attempt:
                    raise
    yield started
    # Detached Run actors outlive their driver: end the ones this tier started, even on a Ray we only joined.
    from jr2ray.run.actor import NAMESPACE, actor_name
    from jr2ray.run.store import Store

    for rid in Store(api_home / "runs").run_ids():
        try:
            ray.kill(ray.get_actor(actor_name(rid), namespace=NAMESPACE), no_restart=True)
        except ValueError:
            pass
    if started:
        ray.shutdown()


@pytest.fixture(scope="package")
def asgi_app(api_config: ApiConfig, ray_cluster: bool) -> FastAPI:
    return build_app(api_config)


@pytest.fixture(scope="package")
def live(api_config: ApiConfig, ray_cluster: bool, token: str) -> Iterator[LiveServer]:
    import uvicorn

    app = build_app(api_config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="api-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield LiveServer(f"http://127.0.0.1:{port}", token, app)
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    """A client holding the instance token."""
    with httpx.Client(base_url=live.url, headers=live.auth(), timeout=60) as c:
        yield c


@pytest.fixture
def anon(live: LiveServer) -> Iterator[httpx.Client]:
    """A client with no token at all."""
    with httpx.Client(base_url=live.url, timeout=60) as c:
        yield c


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The schemathesis tier's count of generated requests and failures, and what a client saw during the restart
    tests' kills, printed in the summary (when they ran)."""
    import sys

    fuzz = sys.modules.get(f"{__package__}.test_api_fuzz")
    if fuzz is not None and fuzz.COUNTS["requests"]:
        terminalreporter.write_line(fuzz.summary())
    restarts = sys.modules.get(f"{__package__}.test_api_restarts_under_requests")
    for line in restarts.summary() if restarts is not None else []:
        terminalreporter.write_line(line)
