"""The API replica, then Serve's HTTP proxy, killed with SIGKILL under a steady stream of requests, on a real Ray
Serve deployed as `jr2ray up` deploys it (`deploy_api`).

Every request is answered 200 or the API's JSON 503 with Retry-After, and none waits past the request timeout (set
small here): a request queued for a dead replica is not left hanging. While the proxy itself is down its socket
refuses connections (it is Ray's), and the requests it held when killed lose their connection; once Serve restarts
it, the same rule holds again. Both come back with no command typed. (The times are measured, not asserted: see
docs/design.md.)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from serve.api import APP_NAME
from serve.api.deploy import DEPLOYMENT_NAME

from .api_helpers import answers_ok, deployed_api, wait_for

pytestmark = pytest.mark.ray

REQUEST_TIMEOUT_S = 6.0
# A request may take the bound plus the proxy's own overhead on a loaded 2-core box; past this it hung.
HUNG_S = REQUEST_TIMEOUT_S + 10
EVERY_S = 0.25  # 8 requests a second: a cold replica on a loaded 2-core box keeps up (at 20 it fell behind for good)
# What each kill looked like from the client's side, printed in the test summary (measured here, never asserted).
FIGURES: dict[str, str] = {}


@pytest.fixture(scope="module")
def served(api_home: Path, token: str, ray_cluster: bool) -> Iterator[str]:
    if not ray_cluster:  # Serve is per cluster: never deploy onto (or shut down) a Ray that another fixture owns
        pytest.skip("this process already had a Ray up; the restart tests need one of their own")
    with deployed_api(api_home, request_timeout_s=REQUEST_TIMEOUT_S) as url:
        yield url


def _pids(actor_class: str) -> list[int]:
    """This cluster's live actors of one class, from the GCS actor table (no dashboard runs for the state API)."""
    from ray._private import state

    return [int(a["Pid"]) for a in state.actors().values()
            if a.get("ActorClassName") == actor_class and a.get("State") == "ALIVE" and a.get("Pid")]


@dataclass
class Seen:
    sent: float
    took: float
    status: int | None = None
    json_503: bool = False
    error: str | None = None


class Stream:
    """GET /healthz and GET /runs, each every EVERY_S on its own thread, until stopped."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.auth = url, {"Authorization": f"Bearer {token}"}
        self.seen: list[Seen] = []
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def _one(self, path: str) -> None:
        t0 = time.monotonic()
        try:
            r = httpx.get(self.url + path, headers=self.auth, timeout=HUNG_S + 30)
        except httpx.TransportError as e:
            self.seen.append(Seen(t0, time.monotonic() - t0, error=type(e).__name__))
            return
        ok_503 = (r.status_code == 503 and r.headers.get("content-type", "").startswith("application/json")
                  and int(r.headers.get("retry-after", "0")) > 0
                  and r.json().get("retry_after") == int(r.headers["retry-after"]))
        self.seen.append(Seen(t0, time.monotonic() - t0, r.status_code, ok_503))

    def _fire(self) -> None:
        while not self.stop.is_set():
            for path in ("/healthz", "/runs"):
                t = threading.Thread(target=self._one, args=(path,), daemon=True)
                t.start()
                self.threads.append(t)
            time.sleep(EVERY_S)

    def __enter__(self) -> Stream:
        self.threads.append(threading.Thread(target=self._fire, daemon=True))
        self.threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in list(self.threads):
            t.join(HUNG_S + 60)


def _kill_under_requests(url: str, token: str, actor_class: str) -> tuple[float, list[Seen]]:
    (pid,) = wait_for(lambda: _pids(actor_class), timeout=60, what=f"the {actor_class} pid")
    with Stream(url, token) as stream:
        time.sleep(1)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: [p for p in _pids(actor_class) if p != pid], timeout=240, every=0.5,
                 what=f"a new {actor_class}")
        wait_for(lambda: answers_ok(f"{url}/healthz"), timeout=240, every=0.2, what="the API again")
        time.sleep(2)  # a few answers from the new one
    assert all(not t.is_alive() for t in stream.threads), "a request never ended"
    return killed, sorted(stream.seen, key=lambda s: s.sent)


def _figures(what: str, killed: float, seen: list[Seen]) -> None:
    after = [s for s in seen if s.sent > killed]
    back = next((s.sent + s.took - killed for s in after if s.status == 200), float("nan"))
    refused = [s for s in after if s.error == "ConnectError"]
    json_503 = [s for s in after if s.json_503]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    FIGURES[what] = (f"{what} SIGKILL: first 200 {back:.1f} s after the kill; {len(json_503)} JSON 503 (longest "
                     f"{max((s.took for s in json_503), default=0):.2f} s), {len(refused)} refused at the socket "
                     f"(last sent {max((s.sent - killed for s in refused), default=0):.1f} s after the kill); longest "
                     f"answered wait {max((s.took for s in after if s.error is None), default=0):.2f} s; "
                     f"{len(after)} requests; load {load}")


def summary() -> list[str]:
    return list(FIGURES.values())


def _assert_answered(seen: list[Seen]) -> None:
    for s in seen:
        assert s.status == 200 or s.json_503, s
        assert s.took < HUNG_S, s


def test_a_replica_killed_under_requests_never_leaves_one_hanging(served: str, token: str) -> None:
    killed, seen = _kill_under_requests(served, token, f"ServeReplica:{APP_NAME}:{DEPLOYMENT_NAME}")
    _figures("API replica", killed, seen)
    _assert_answered(seen)
    after = [s for s in seen if s.sent > killed]
    assert any(s.json_503 for s in after), "nothing saw the restart: the kill did not land"
    assert after[-1].status == 200 and after[-2].status == 200  # and service came back


def test_the_proxy_killed_under_requests_refuses_at_the_socket_then_answers_again(served: str, token: str) -> None:
    killed, seen = _kill_under_requests(served, token, "ProxyActor")
    _figures("Serve proxy", killed, seen)
    lost = [s for s in seen if s.error is not None]
    # In flight at the kill: the connection drops. After it, only a refused connection (the socket is closed).
    assert all(s.error == "ConnectError" or s.sent < killed + 0.5 for s in lost), lost
    assert any(s.error == "ConnectError" for s in lost), "nothing saw the proxy down: the kill did not land"
    _assert_answered([s for s in seen if s.error is None])
    assert seen[-1].status == 200 and seen[-2].status == 200
