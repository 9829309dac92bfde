"""The API replica dies mid-request, on a real Ray Serve deployed as `jr2ray up` deploys it (`deploy_api`).

A pick waits for Rest (the editor's Gate) when the replica's process is killed with SIGKILL. The client gets the
API's JSON 503 with Retry-After (not Serve's text 500), requests sent while the replica restarts are answered within
the request timeout instead of hanging, and once the replica is back the same pick retried with the same delivery_id
gets its receipt: the journal has the pick once.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serve.api import APP_NAME
from serve.api.deploy import DEPLOYMENT_NAME

from .api_helpers import answers_ok, deployed_api, journal, start_notes, wait_for

pytestmark = pytest.mark.ray

REQUEST_TIMEOUT_S = 8.0
DELIVERY = "restart-ask-1"


@pytest.fixture(scope="module")
def served(api_home: Path, token: str, ray_cluster: bool) -> Iterator[str]:
    if not ray_cluster:  # Serve is per cluster: never deploy onto (or shut down) a Ray that another fixture owns
        pytest.skip("this process already had a Ray up; the replica-restart test needs one of its own")
    with deployed_api(api_home, request_timeout_s=REQUEST_TIMEOUT_S) as url:
        yield url


def _replica_pids() -> list[int]:
    """The API replicas' processes, from the GCS actor table (this tier's Ray runs no dashboard for the state API)."""
    from ray._private import state

    cls = f"ServeReplica:{APP_NAME}:{DEPLOYMENT_NAME}"
    return [int(a["Pid"]) for a in state.actors().values()
            if a.get("ActorClassName") == cls and a.get("State") == "ALIVE" and a.get("Pid")]


def _pick_kinds(store_dir: Path, run_id: str) -> list[str]:
    """The kinds of the ledger entries keyed by this test's delivery id, in journal order."""
    return [e["kind"] for e in journal(store_dir, run_id)["ledger"] if e["key"] and e["key"].endswith(DELIVERY)]


def _assert_json_503(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.status_code, r.headers.get("content-type"), r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert int(r.headers["retry-after"]) > 0 and r.json()["retry_after"] == int(r.headers["retry-after"])


def test_a_replica_killed_under_a_waiting_pick_answers_json_503_and_the_retry_gets_the_receipt(
        served: str, token: str, api_home: Path) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    pick = {"name": "ask", "args": {"question": "Still there?"}, "delivery_id": DELIVERY}
    with httpx.Client(base_url=served, headers=auth, timeout=120) as c, ThreadPoolExecutor(2) as pool:
        rid, iid = start_notes(c)
        waiting = pool.submit(c.post, f"/agents/{iid}/picks", json=pick)
        gate = wait_for(lambda: c.get(f"/runs/{rid}").json()["gates"], what="the editor's Gate")[0]
        assert not waiting.done()

        (pid,) = wait_for(_replica_pids, timeout=60, what="the API replica's pid")
        os.kill(pid, signal.SIGKILL)
        got = waiting.result(60)
        _assert_json_503(got)
        assert "replica stopped" in got.json()["detail"] and "same delivery_id" in got.json()["detail"]

        # While it restarts a request is answered (JSON, within the bound), never left waiting.
        t0 = time.monotonic()
        during = c.get(f"/runs/{rid}")
        assert time.monotonic() - t0 < REQUEST_TIMEOUT_S + 10
        assert during.headers["content-type"].startswith("application/json"), during.text
        if during.status_code != 200:
            _assert_json_503(during)

        wait_for(lambda: answers_ok(f"{served}/healthz") and [p for p in _replica_pids() if p != pid], timeout=180,
                 every=0.5, what="a new API replica")
        retried = pool.submit(c.post, f"/agents/{iid}/picks", json=pick)
        time.sleep(0.5)
        assert not retried.done(), retried.result().text  # it waits for Rest again, as the first one did
        sent = c.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "Yes."}})
        assert sent.status_code == 200, sent.text
        receipt = retried.result(60)
        assert receipt.status_code == 200, receipt.text
        assert receipt.json()["delivered"] and receipt.json()["answer"] == "The editor replied: Yes."
        assert receipt.json()["delivery_id"] == DELIVERY

        again = c.post(f"/agents/{iid}/picks", json=pick)  # a third try: the journaled receipt, nothing new
        assert again.json() == receipt.json()
        kinds = _pick_kinds(api_home / "runs", rid)
        assert kinds.count("admission") == 1 and kinds.count("receipt") == 1
        c.post(f"/runs/{rid}/cancel")


def test_a_pick_waiting_past_the_request_timeout_is_json_503_while_a_stream_stays_open(
        served: str, token: str, api_home: Path) -> None:
    """Serve's end-to-end bound, set on each API request, answers a long wait (the proxy's text 408 becomes the
    API's 503), but does not cut the run's event stream, which has its own first-byte bound instead."""
    auth = {"Authorization": f"Bearer {token}"}
    pick = {"name": "ask", "args": {"question": "Long?"}, "delivery_id": DELIVERY}
    with httpx.Client(base_url=served, headers=auth, timeout=120) as c, ThreadPoolExecutor(2) as pool:
        rid, iid = start_notes(c)
        seen: list[float] = []

        def follow() -> None:
            with httpx.stream("GET", f"{served}/runs/{rid}/events", headers=auth, timeout=60) as s:
                assert s.status_code == 200
                for _ in s.iter_lines():
                    seen.append(time.monotonic())
                    if seen[-1] - seen[0] > REQUEST_TIMEOUT_S + 3:
                        return

        feed = pool.submit(follow)
        t0 = time.monotonic()
        waited = c.post(f"/agents/{iid}/picks", json=pick)
        _assert_json_503(waited)
        assert f"did not answer within {REQUEST_TIMEOUT_S:g} s" in waited.json()["detail"]
        assert REQUEST_TIMEOUT_S - 1 < time.monotonic() - t0 < REQUEST_TIMEOUT_S + 20
        feed.result(60)  # the stream outlived the bound
        assert seen[-1] - seen[0] > REQUEST_TIMEOUT_S + 3

        gate = wait_for(lambda: c.get(f"/runs/{rid}").json()["gates"], what="the editor's Gate")[0]
        assert c.post(f"/runs/{rid}/gates/{gate['id']}/events",
                      json={"event": "reply", "input": {"text": "Late."}}).status_code == 200
        receipt = c.post(f"/agents/{iid}/picks", json=pick)
        assert receipt.status_code == 200 and receipt.json()["answer"] == "The editor replied: Late.", receipt.text
        kinds = _pick_kinds(api_home / "runs", rid)
        assert kinds.count("admission") == 1 and kinds.count("receipt") == 1
        c.post(f"/runs/{rid}/cancel")
