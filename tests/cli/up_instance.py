"""A real `jr2ray up --llm none` in a temp home, driven as a subprocess: shared by the cli and console tiers.

Why a subprocess: `up` starts its own Ray head (own temp dir, free ports) and the API under Ray Serve, exactly as a
user gets it, and the pytest process never joins that Ray, so these tiers coexist with the ray tier's own instance.
Every instance started here is stopped with `jr2ray down`, and its Ray temp dir removed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 600.0  # a loaded 2-core box: Ray head + Serve + the API replica
CMD_TIMEOUT_S = 180.0
# Env the child must not inherit: it would point the CLI at another instance or another Ray.
FOREIGN_ENV = ("RAY_ADDRESS", "JR2RAY_API", "JR2RAY_TOKEN", "JR2RAY_STORE", "JR2RAY_LAUNCHER", "RAY_AUTH_MODE",
               "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


class CliResult(BaseModel):
    """One `jr2ray ...` invocation."""

    argv: list[str]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:  # type: ignore[override]
        return json.loads(self.stdout)

    def explain(self) -> str:
        return f"jr2ray {' '.join(self.argv)} -> {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


class UpInstance(BaseModel):
    """What a test needs of a running instance."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    home: Path
    env: dict[str, str]
    api: str
    port: int
    ray_port: int
    token: str
    up: CliResult
    temp_dir: str | None

    def cli(self, *argv: str, timeout: float = CMD_TIMEOUT_S, env: dict[str, str] | None = None) -> CliResult:
        return run_cli(list(argv), {**self.env, **(env or {})}, timeout)

    def http(self, token: str | None = "instance") -> httpx.Client:
        """An API client with the instance token (or another token, or none)."""
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {self.token if token == 'instance' else token}"
        return httpx.Client(base_url=self.api, headers=headers, timeout=httpx.Timeout(120.0, connect=10.0))


def post_served(client: Callable[[], httpx.Client], path: str, body: dict[str, Any],
                headers: dict[str, str] | None = None, retry_s: float = 120.0) -> httpx.Response:
    """A POST that takes the API's JSON 503 as "retry after Retry-After", as a client should (a fresh or restarting
    instance answers it while its first host starts). A fresh client each try: the instance may have restarted."""
    deadline = time.monotonic() + retry_s
    while True:
        with client() as h:
            r = h.post(path, json=body, headers=headers)
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        time.sleep(float(r.headers.get("retry-after", "2")))


def start_keyed(up: UpInstance, workflow: str, data: dict[str, Any]) -> httpx.Response:
    """Start a run with an Idempotency-Key, retried on the 503: a retry of a start that did go through answers 200
    with that run, so there is never a second one."""
    return post_served(up.http, f"/workflows/{workflow}/runs", {"input": data},
                       headers={"Idempotency-Key": uuid.uuid4().hex})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def child_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env["JR2RAY_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_cli(argv: list[str], env: dict[str, str], timeout: float = CMD_TIMEOUT_S) -> CliResult:
    proc = subprocess.run([sys.executable, "-m", "jr2ray.cli", *argv], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    return CliResult(argv=argv, code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


def start_instance(home: Path, extra_env: dict[str, str] | None = None, launcher: str = "none",
                   args: tuple[str, ...] = ()) -> UpInstance:
    """`jr2ray up --llm none` on free ports (and `args`); fails the test (after cleaning up) if it does not come up.
    `launcher` "auto" starts a Harness per Turn (its model at JR2RAY_LOCAL_BASE_URL, given in `extra_env`)."""
    env = child_env(home, extra_env)
    port, ray_port = free_port(), free_port()
    argv = ["up", "--llm", "none", "--port", str(port), "--ray-port", str(ray_port), "--launcher", launcher, *args]
    try:
        up = run_cli(argv, env, UP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_instance(home, env)
        pytest.fail(f"`jr2ray up` did not finish within {UP_TIMEOUT_S:.0f}s")
    if up.code != 0:
        stop_instance(home, env)
        pytest.fail("`jr2ray up` failed:\n" + up.explain())
    inst = json.loads((home / "instance.json").read_text())
    token = (home / "token").read_text().strip()
    return UpInstance(home=home, env=env, api=inst["api"], port=port, ray_port=ray_port, token=token, up=up,
                      temp_dir=inst.get("temp_dir"))


def stop_instance(home: Path, env: dict[str, str], temp_dir: str | None = None) -> CliResult | None:
    """`jr2ray down` if the home still records an instance; then remove the Ray temp dir it used (`temp_dir`, for
    when a test already ran `down` itself)."""
    path = home / "instance.json"
    res: CliResult | None = None
    if path.exists():
        temp_dir = json.loads(path.read_text()).get("temp_dir") or temp_dir
        res = run_cli(["down"], env, CMD_TIMEOUT_S)
    if temp_dir and temp_dir.startswith("/tmp/jr2ray-"):
        shutil.rmtree(temp_dir, ignore_errors=True)
    return res


def wait_for(what: str, check: Any, timeout_s: float = 60.0, every_s: float = 0.25) -> Any:
    """Poll `check()` until it returns something truthy; fail naming `what` (and the last value) on timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


class PickInBackground:
    """A pick that waits for Rest (for the editor's answer), posted on a thread like a Harness would."""

    def __init__(self, up: UpInstance, iid: str, name: str, args: dict[str, Any],
                 delivery_id: str | None = None) -> None:
        self.receipt: dict[str, Any] | None = None
        self.error: BaseException | None = None

        def go() -> None:
            try:
                with up.http() as http:
                    r = http.post(f"/agents/{iid}/picks", json={"name": name, "args": args, "delivery_id": delivery_id})
                    r.raise_for_status()
                    self.receipt = r.json()
            except BaseException as exc:  # noqa: BLE001 - reported by join()
                self.error = exc

        self.thread = threading.Thread(target=go, daemon=True)
        self.thread.start()

    def join(self, timeout_s: float = 120.0) -> dict[str, Any]:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the pick's receipt never came"
        assert self.error is None, repr(self.error)
        assert self.receipt is not None
        return self.receipt


def up_fixture(home_prefix: str) -> Any:
    """A module-scoped pytest fixture: one `up --llm none` with an externally driven writer, stopped afterwards."""

    @pytest.fixture(scope="module")
    def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpInstance]:
        pytest.importorskip("ray")
        home = tmp_path_factory.mktemp(home_prefix)
        inst = start_instance(home, {"JR2RAY_NOTES_DRIVER": "external"})
        try:
            yield inst
        finally:
            stop_instance(home, inst.env, inst.temp_dir)

    return up
