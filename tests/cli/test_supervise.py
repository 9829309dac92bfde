"""The head heals itself (issue 23): with `jr2ray supervise` running, a SIGKILL of the instance's raylet, then of its
GCS (each by pid, this test's own instance only), is recovered with no command typed: the API answers again, every
parked run takes its Gate event once, a timer that fell due during the outage fires once, and none of the old
head's processes is left. Also: `up` on a dead instance says so in one line and starts fresh. The recovery times
are printed (`-s`) with the load average; they are figures, not assertions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psutil
import pytest
from up_instance import REPO, UP_TIMEOUT_S, UpInstance, post_served, start_instance, stop_instance, wait_for

from jr2ray.run.head import instance_pids, vital_pids
from jr2ray.run.store import Store

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

ENV = {"JR2RAY_DEPLOY_DRIVER": "external", "JR2RAY_NOTES_DRIVER": "external", "JR2RAY_IDLE_DEACTIVATE_S": "1"}
PARKED = 3


def _http(up: UpInstance) -> httpx.Client:
    return up.http()


# How long a request retries the API's 503 ("retry shortly": its replica slow to answer on a loaded box).
RETRY_503_S = 180.0


def _post(up: UpInstance, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    """Picks and Gate events sent here carry a delivery id, so a retry on the 503 is applied once."""
    return post_served(lambda: _http(up), path, body or {}, retry_s=RETRY_503_S)


def _view(up: UpInstance, rid: str) -> dict[str, Any]:
    deadline = time.monotonic() + RETRY_503_S
    while True:
        with _http(up) as h:
            r = h.get(f"/runs/{rid}")
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _to_gate(up: UpInstance, cooldown_ms: int) -> str:
    """A deploy run at its approval Gate, its operator's picks made over the API."""
    r = _post(up, "/workflows/deploy/runs", {"input": {"deploy_seconds": 0.05, "cooldown_ms": cooldown_ms}})
    assert r.status_code == 201, r.text
    rid = str(r.json()["id"])

    def iid() -> str:
        return next(t["iid"] for t in _view(up, rid)["turns"] if t["slot"] == "operator" and t["active"])

    for name in ("deploy", "submit"):
        got = _post(up, f"/agents/{iid()}/picks", {"name": name, "args": {}, "delivery_id": f"{rid}-{name}"})
        assert got.status_code == 200, got.text
    wait_for(f"the approval Gate of {rid}", lambda: [g["id"] for g in _view(up, rid)["gates"]] == ["approval"])
    return rid


def _healthy(api: str) -> bool:
    try:
        return httpx.get(f"{api}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _procs(pids: list[int]) -> list[tuple[int, float]]:
    out = []
    for pid in pids:
        try:
            out.append((pid, psutil.Process(pid).create_time()))
        except psutil.NoSuchProcess:
            continue
    return out


def _still_running(procs: list[tuple[int, float]]) -> list[int]:
    """The old head's processes still there: same pid and the same start time (a reused pid is another process)."""
    left = []
    for pid, started in procs:
        try:
            if psutil.Process(pid).create_time() == started:
                left.append(pid)
        except psutil.NoSuchProcess:
            continue
    return left


def _kill_and_recover(up: UpInstance, store: Store, which: str, whole_head: bool = True) -> dict[str, float]:
    """Park runs at their Gate and one in a cooldown due during the outage, SIGKILL `which` by pid, and check the
    recovery the supervisor makes on its own: a new head (`whole_head`), or (GCS fault tolerance) a new GCS beside the
    same raylet, the head not restarted."""
    temp_dir = up.temp_dir
    assert temp_dir
    parked = [_to_gate(up, 100) for _ in range(PARKED)]
    due = _to_gate(up, 4000)  # approved just before the kill: its cooldown falls due while the head is down

    def parked_now() -> bool:  # a 503 (the replica busy on a loaded box) is "not yet", as a client would take it
        with _http(up) as h:
            r = h.get("/runs", params={"where": "parked", "limit": 1000})
        return r.status_code == 200 and set(parked) <= {row["id"] for row in r.json()}

    wait_for("the Gate runs to park", parked_now, timeout_s=60)
    before = json.loads((up.home / "instance.json").read_text())
    assert before["ray_started_at"], before
    old = _procs(instance_pids(temp_dir))
    vital = vital_pids(temp_dir)
    victim = vital[which]
    assert len(victim) == 1, f"{which}: {victim}"
    assert _post(up, f"/runs/{due}/gates/approval/events", {"event": "approve", "input": {"by": "ops"},
                                                            "delivery_id": f"{which}-due-{due}"}).status_code == 200
    killed_at = time.monotonic()
    os.kill(victim[0], signal.SIGKILL)

    def recovered() -> bool:
        if not whole_head:  # a GCS of a new pid answers on the head's port, and the API answers
            gcs = vital_pids(temp_dir)["gcs_server"]
            return bool(gcs) and gcs != vital["gcs_server"] and _healthy(up.api)
        # A new head on the same port and temp dir writes the same record but for when its Ray started.
        now = json.loads((up.home / "instance.json").read_text()) if (up.home / "instance.json").exists() else None
        return (bool(now) and now["ray_address"] != "" and now["api"] != ""
                and now["ray_started_at"] != before["ray_started_at"] and _healthy(up.api))

    # Bounded by what one `up` may take on a loaded 2-core box (UP_TIMEOUT_S); the goal (60 s) is a figure, printed.
    wait_for(f"the instance to come back after the {which} kill", recovered, timeout_s=UP_TIMEOUT_S, every_s=0.5)
    api_s = time.monotonic() - killed_at
    for rid in parked:  # every parked run takes its Gate event, once
        r = _post(up, f"/runs/{rid}/gates/approval/events", {"event": "approve", "input": {"by": "ops"},
                                                              "delivery_id": f"{which}-{rid}"})
        assert r.status_code == 200, r.text
    gate_s = time.monotonic() - killed_at
    for rid in [*parked, due]:
        wait_for(f"run {rid} to finish", lambda rid=rid: _view(up, rid)["status"] == "done", timeout_s=120)
        j = store.open(rid)
        try:
            names = [e.data["name"] for e in j.ledger("admission")]
        finally:
            j.close()
        assert names == ["deploy", "submit", "approve"], (rid, names)  # each event applied once
    assert _view(up, due)["value"] == "released"
    if whole_head:
        wait_for("the old head's processes to be gone", lambda: not _still_running(old), timeout_s=30)
    else:  # the head was never restarted: the same raylet runs, and its Ray started when it did
        assert vital_pids(temp_dir)["raylet"] == vital["raylet"]
        assert json.loads((up.home / "instance.json").read_text())["ray_started_at"] == before["ray_started_at"]
    return {"api_s": api_s, "gate_s": gate_s}


@contextmanager
def supervised(up: UpInstance, figures: dict[str, Any]) -> Iterator[subprocess.Popen[bytes]]:
    """`jr2ray supervise` on the instance's home for the block; then it is stopped, and the recovery `figures` and
    its log are printed (`-s`) with the load average."""
    log = (up.home / "supervise.log").open("w")
    sup = subprocess.Popen([sys.executable, "-m", "jr2ray.cli", "supervise", "--interval", "0.5"], env=up.env,
                           cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Faults are injected only once it has seen the head up (and how its GCS runs): its own start can take
        # seconds on a loaded box, and a kill before its first check is a different story (the GCS line `up` kept).
        wait_for("the supervisor to see the head up",
                 lambda: sup.poll() is not None or "the head is up" in (up.home / "supervise.log").read_text(),
                 timeout_s=60)
        assert sup.poll() is None, (up.home / "supervise.log").read_text()
        yield sup
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(60)
        except subprocess.TimeoutExpired:
            sup.kill()
        log.close()
        print(f"\nrecovery (s from the kill): {figures}; load average {os.getloadavg()}")
        print((up.home / "supervise.log").read_text())


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpInstance]:
    """One instance for the module (an `up` takes about 20 s): the supervisor brings it back twice, then it is
    killed once more for `up` alone to clear."""
    home = tmp_path_factory.mktemp("supervise-home")
    up = start_instance(home, ENV)
    try:
        yield up
    finally:
        stop_instance(home, up.env, up.temp_dir)


def test_the_supervisor_brings_the_head_back_after_a_raylet_kill_and_a_gcs_kill(instance: UpInstance) -> None:
    up, home = instance, instance.home
    store = Store(home / "runs")
    figures: dict[str, dict[str, float]] = {}
    with supervised(up, figures):
        for which in ("raylet", "gcs_server"):
            figures[which] = _kill_and_recover(up, store, which)
        # The supervisor says so once its `up` child has exited, which may be a while after the API answers.
        log = home / "supervise.log"
        wait_for("the supervisor to say the instance is up again, twice",
                 lambda: log.read_text().count("the instance is up again") >= 2, timeout_s=UP_TIMEOUT_S)
        assert log.read_text().count("the instance is up again") == 2, log.read_text()


def test_up_on_a_dead_instance_clears_it_and_starts_fresh_in_one_line(instance: UpInstance) -> None:
    up = instance
    assert up.temp_dir
    # The test before leaves it up: if it failed and left the head down, this one fails here, saying so.
    wait_for("the instance to be up, as the supervisor test leaves it", lambda: _healthy(up.api), timeout_s=60)
    old = _procs(instance_pids(up.temp_dir))
    os.kill(vital_pids(up.temp_dir)["raylet"][0], signal.SIGKILL)
    again = up.cli("up", timeout=600)
    assert again.code == 0, again.explain()
    said = [line for line in again.stderr.splitlines() if "is gone" in line]
    assert len(said) == 1 and "leftover process(es)" in said[0], again.explain()
    assert "Traceback" not in again.stdout + again.stderr
    assert _healthy(up.api)
    assert not _still_running(old)
