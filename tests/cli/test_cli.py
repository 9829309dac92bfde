"""The `jr2ray` CLI (K1, K2) as a user runs it: a subprocess against one real `jr2ray up --llm none` per module.

The notes workflow's writer is driven externally (JR2RAY_NOTES_DRIVER=external): the test picks for it over HTTP with
the instance token, and plays the editor through `jr2ray send`. Exit codes: 0 ok, 1 error, 2 usage.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from typing import Any

import pytest
from up_instance import REPO, PickInBackground, UpInstance, port_open, up_fixture, wait_for

from jr2ray.code_digest import code_digest

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

NOTES_INPUT = json.dumps({"changes": "fix: crash on empty input\nfeat: dark mode"})
GATE = "notes.writing.asking"


up = up_fixture("cli-home")


# ---- helpers ---------------------------------------------------------------------------------------------------
def start_detached(up: UpInstance, workflow: str = "notes", data: str = NOTES_INPUT) -> dict[str, Any]:
    res = up.cli("run", workflow, "--input", data, "--detach")
    assert res.code == 0, res.explain()
    view = res.json()
    assert view["status"] in ("active", "queued")  # started: live, or waiting for a slot (admission)
    return view


def short_prefix(up: UpInstance, run_id: str) -> str:
    """The shortest prefix (at least 4 characters) that no other run shares."""
    with up.http() as http:
        ids = [r["id"] for r in http.get("/runs", params={"limit": 1000}).json()]
    for n in range(4, len(run_id) + 1):
        if sum(1 for i in ids if i.startswith(run_id[:n])) == 1:
            return run_id[:n]
    return run_id


def writer_iid(up: UpInstance, run_id: str) -> str:
    with up.http() as http:
        turns = http.get(f"/runs/{run_id}").json()["turns"]
    return next(t["iid"] for t in turns if t["slot"] == "writer" and t["active"])


def open_gate(up: UpInstance, run_id: str) -> dict[str, Any]:
    def gate() -> dict[str, Any] | None:
        with up.http() as http:
            gates = http.get(f"/runs/{run_id}").json()["gates"]
        return next((g for g in gates if g["id"] == GATE and g["accepts_now"]), None)

    return wait_for(f"Gate {GATE} to open in run {run_id}", gate, timeout_s=60)


# ---- up ------------------------------------------------------------------------------------------------------
def test_up_prints_seats_warnings_and_the_token_once(up: UpInstance) -> None:
    out = up.up.stdout
    assert "jr2ray is up" in out and up.api in out
    # The SQLite store (the default) keeps every run on the head node, and `up` says so.
    assert f"store: {up.home / 'runs'}" in out and "runs: on the head node only" in out
    # Seats of every workflow, one line per party state (M3).
    for wf in ("notes", "deploy", "coder"):
        assert f'seats: workflow "{wf}"' in out
    assert "notes.writing agent:writer: [ask, done]" in out
    assert "notes.writing.asking gate: [reply]" in out
    assert "deploy.approval gate:approval: [approve, reject]" in out
    for line in out.splitlines():  # load warnings, if any, sit under their workflow
        if "warning" in line.lower():
            assert line.startswith("  warning: ")
    # The token: printed exactly once, on stdout, and stored 0600 (the Ray auth token of this head too).
    assert out.count(up.token) == 1 and up.token not in up.up.stderr
    for name in ("token", "ray_auth_token"):
        mode = stat.S_IMODE(os.stat(up.home / name).st_mode)
        assert mode == 0o600, f"{name} has mode {oct(mode)}"

    again = up.cli("up", "--llm", "none", "--port", str(up.port), "--ray-port", str(up.ray_port),
                   "--launcher", "none", timeout=600)
    assert again.code == 0, again.explain()
    assert up.token not in again.stdout and up.token not in again.stderr
    assert f"instance token: in {up.home / 'token'}" in again.stdout
    assert "joining the Ray this home started before" in again.stderr
    assert "notes.writing agent:writer: [ask, done]" in again.stdout
    assert (up.home / "token").read_text().strip() == up.token
    with up.http() as http:
        assert http.get("/healthz").json()["ok"] is True
        assert http.get("/runs").status_code == 200


def test_up_binds_every_ray_port_to_loopback(up: UpInstance) -> None:
    """The head `up` started on one machine listens on 127.0.0.1 only: its GCS port, and every port of its raylet,
    agents and workers; the GCS port does not answer on the machine's routable address."""
    import ipaddress

    import psutil
    from ray._private.services import get_node_ip_address

    from jr2ray.cli.rayproc import ray_pids

    assert up.temp_dir
    listening: list[tuple[str, str, int]] = []
    for pid in ray_pids(up.temp_dir):
        try:
            proc = psutil.Process(pid)
            listening += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                          if c.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert any(port == up.ray_port for _, _, port in listening), listening
    wide = [(name, ip, port) for name, ip, port in listening
            if not ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback]
    assert wide == [], f"Ray ports listening beyond loopback: {wide}"
    routable = get_node_ip_address()
    if not ipaddress.ip_address(routable).is_loopback:
        assert not port_open(routable, up.ray_port)
    assert port_open("127.0.0.1", up.ray_port)


# ---- run, status, send -------------------------------------------------------------------------------------------
def test_run_detach_then_status_by_a_four_character_prefix(up: UpInstance) -> None:
    view = start_detached(up)
    rid = view["id"]
    assert view["value"] == {"writing": "drafting"}
    prefix = short_prefix(up, rid)
    assert len(prefix) >= 4
    st = up.cli("status", prefix)
    assert st.code == 0, st.explain()
    data = st.json()
    assert data["id"] == rid and data["status"] == "active"
    assert "notes.writing.drafting" in data["active"]
    full = up.cli("status", rid)
    assert full.code == 0 and full.json()["id"] == rid
    # Without a run: the instance's health and run counts.
    inst = up.cli("status")
    assert inst.code == 0, inst.explain()
    summary = inst.json()
    assert summary["healthy"] is True and summary["api"] == up.api and summary["runs"].get("active", 0) >= 1
    assert sum(summary["where"].values()) >= 1 and set(summary["where"]) <= {"live", "parked", "queued"}
    kept = json.loads((up.home / "instance.json").read_text())
    recorded = kept["metrics_port"]  # the port `up` fixed and printed
    assert kept["code"] == code_digest()  # the code `up` ran, what `connect()` checks a driver's against
    assert summary["metrics"] == f"http://127.0.0.1:{recorded}/metrics" and summary["metrics"] in up.up.stdout
    # What a driver script needs to join this Ray (token auth, with the home's own Ray token).
    assert summary["ray_env"] == {"RAY_ADDRESS": summary["ray_address"], "RAY_AUTH_MODE": "token",
                                  "RAY_AUTH_TOKEN_PATH": str(up.home / "ray_auth_token")}


def test_send_answers_a_gate_and_the_pick_gets_the_answer(up: UpInstance) -> None:
    rid = start_detached(up)["id"]
    iid = writer_iid(up, rid)
    pick = PickInBackground(up, iid, "ask", {"question": "Which change leads?"})
    gate = open_gate(up, rid)
    assert gate["accepts_now"] == ["reply"] and gate["meta"] == {"question": "Which change leads?"}

    res = up.cli("send", short_prefix(up, rid), "--gate", GATE, "--event", "reply",
                 "--input", json.dumps({"text": "The crash fix."}))
    assert res.code == 0, res.explain()
    sent = res.json()
    assert sent["ok"] is True and sent["value"] == {"writing": "drafting"}
    receipt = pick.join()
    assert receipt["moved"] is True and receipt["turn_complete"] is False
    assert receipt["answer"] == "The editor replied: The crash fix."
    assert receipt["allowed"] == ["ask", "done"]


def test_a_refused_event_exits_1_with_the_reason(up: UpInstance) -> None:
    rid = start_detached(up)["id"]
    pick = PickInBackground(up, writer_iid(up, rid), "ask", {"question": "Short or long?"})
    open_gate(up, rid)
    prefix = short_prefix(up, rid)

    # The Gate never takes `done` (the writer's pick): a 409 naming what it accepts now.
    refused = up.cli("send", prefix, "--gate", GATE, "--event", "done", "--input", '{"notes": "x"}')
    assert refused.code == 1, refused.explain()
    assert "409" in refused.stderr and "accepts now: reply" in refused.stderr and refused.stdout == ""
    # A payload that fails the event's schema: 400, exit 1.
    bad = up.cli("send", prefix, "--gate", GATE, "--event", "reply", "--input", "{}")
    assert bad.code == 1 and "400" in bad.stderr and "text" in bad.stderr, bad.explain()
    # No such Gate: 404, exit 1.
    nogate = up.cli("send", prefix, "--gate", "nope", "--event", "reply", "--input", '{"text": "x"}')
    assert nogate.code == 1 and "404" in nogate.stderr and "nope" in nogate.stderr, nogate.explain()
    # Nothing was delivered: the Gate is still open and the pick still waits; then answer it properly.
    assert up.cli("status", prefix).json()["value"] == {"writing": "asking"}
    ok = up.cli("send", prefix, "--gate", GATE, "--event", "reply", "--input", '{"text": "Short."}')
    assert ok.code == 0, ok.explain()
    assert pick.join()["answer"] == "The editor replied: Short."
    # The Gate is closed now: the same event is refused (404, exit 1).
    again = up.cli("send", prefix, "--gate", GATE, "--event", "reply", "--input", '{"text": "Again."}')
    assert again.code == 1 and "404" in again.stderr, again.explain()


def test_run_streams_the_activity_and_prints_the_final_status(up: UpInstance) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "jr2ray.cli", "run", "notes", "--input", NOTES_INPUT],
                            env=up.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def started() -> str | None:
            with up.http() as http:
                runs = http.get("/runs", params={"limit": 1000}).json()
            mine = [r for r in runs if r["status"] == "active" and not r["gates"] and r["value"] ==
                    {"writing": "drafting"} and r["id"] not in seen]
            return mine[0]["id"] if mine else None

        with up.http() as http:
            seen = {r["id"] for r in http.get("/runs", params={"limit": 1000}).json()}
        rid = wait_for("the streamed run to start", started, timeout_s=120)
        iid = writer_iid(up, rid)
        pick = PickInBackground(up, iid, "ask", {"question": "Bullets?"})
        open_gate(up, rid)
        assert up.cli("send", rid, "--gate", GATE, "--event", "reply", "--input", '{"text": "Yes."}').code == 0
        assert pick.join()["moved"] is True
        with up.http() as http:
            done = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "- crash fix"}}).json()
        assert done["moved"] is True and done["turn_complete"] is True
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"{stdout}\n{stderr}"
    final = json.loads(stdout)
    assert final["id"] == rid and final["status"] == "done" and final["value"] == "published"
    assert final["output"] == {"notes": "- crash fix"}
    # The activity went to stderr, in order: the pick, the Gate, the receipt with its answer, the end.
    lines = stderr.splitlines()
    assert lines[0] == f"started run {rid} of notes"
    want = ['pick ' + iid + ': ask {"question": "Bullets?"}', f"gate {GATE} open", f"gate {GATE}: reply",
            f"receipt {iid}: ask moved=True turn_complete=False answer=\"The editor replied: Yes.\"",
            f"receipt {iid}: done moved=True turn_complete=True", 'status done value="published"']
    at = [next((i for i, ln in enumerate(lines) if ln.startswith(w)), -1) for w in want]
    assert -1 not in at and at == sorted(at), stderr


def test_cancel_by_prefix(up: UpInstance) -> None:
    rid = start_detached(up)["id"]
    res = up.cli("cancel", short_prefix(up, rid))
    assert res.code == 0, res.explain()
    assert res.json()["status"] == "cancelled"
    assert up.cli("status", rid).json()["status"] == "cancelled"
    # A run already over is left as it is, and the command says so with exit 1 (this call cancelled nothing).
    again = up.cli("cancel", rid)
    assert again.code == 1, again.explain()
    assert f"run {rid} had already ended (cancelled); nothing was cancelled" in again.stderr
    assert up.cli("status", rid).json()["status"] == "cancelled"


def test_runs_lists_every_run_with_its_status(up: UpInstance) -> None:
    with up.http() as http:
        api_runs = http.get("/runs", params={"limit": 1000}).json()
    assert len(api_runs) >= 4
    table = up.cli("runs")
    assert table.code == 0, table.explain()
    head, *rows = table.stdout.splitlines()
    assert head.split() == ["ID", "WORKFLOW", "STATUS", "WHERE", "CREATED", "VALUE"]
    by_id = {row.split()[0]: row.split()[2] for row in rows}
    assert by_id == {r["id"]: r["status"] for r in api_runs}
    assert {"active", "done", "cancelled"} <= set(by_id.values())
    at, end = head.index("WHERE"), head.index("CREATED")
    where = {row.split()[0]: row[at:end].strip() for row in rows}
    for r in api_runs:  # an unfinished run is live, parked (at what) or queued; a finished one waits for nothing
        assert (r["presence"] in ("live", "parked", "queued")) == (r["status"] in ("active", "queued"))
        said = where[r["id"]]
        parked_now = said.split(" ")[0] in ("gate", "turn", "timer", "parked")
        if r["presence"] == "parked":
            assert parked_now, said
        elif r["presence"] == "live" and parked_now:  # it parked between the API's read and the command's
            assert r["status"] == "active", r
        elif r["presence"] == "live":  # and what its host says it waits for, when anything
            assert said == "live" or said.startswith("live: "), said
        else:
            assert said == {"queued": "queued"}.get(r["presence"], "") or said.startswith("queued #")
    listed = up.cli("runs", "--json")
    assert listed.code == 0 and {r["id"] for r in listed.json()} == set(by_id)


# ---- errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    [],                                           # no command
    ["frobnicate"],                               # unknown command
    ["run", "notes"],                             # --input is required
    ["run", "notes", "--input", "{not json"],     # --input is not JSON
    ["send", "abcd1234", "--gate", GATE],         # --event is required
    ["send", "abcd1234", "--gate", GATE, "--event", "reply", "--input", "[1, 2]"],  # not an object
    ["status", "abc"],                            # a prefix under 4 characters
    ["up", "--llm", "tpu"],                       # not a choice
    ["model"],                                    # no model command
])
def test_bad_usage_exits_2(up: UpInstance, argv: list[str]) -> None:
    res = up.cli(*argv)
    assert res.code == 2, res.explain()
    assert res.stderr.strip() and res.stdout == ""


@pytest.mark.parametrize("argv", [
    ["status", "ffffffffffff"], ["cancel", "ffffffff"],
    ["send", "ffffffff", "--gate", GATE, "--event", "reply", "--input", '{"text": "x"}'],
    ["run", "no_such_workflow", "--input", "{}"],
    ["run", "notes", "--input", '{"wrong": 1}'],  # fails the door schema: 400
])
def test_unknown_things_exit_1(up: UpInstance, argv: list[str]) -> None:
    res = up.cli(*argv)
    assert res.code == 1, res.explain()
    assert res.stderr.startswith("jr2ray: ") and res.stdout == ""


def test_a_bad_token_exits_1(up: UpInstance) -> None:
    res = up.cli("runs", env={"JR2RAY_TOKEN": "not-the-token"})
    assert res.code == 1 and "401" in res.stderr, res.explain()


# ---- down (last: it stops the module's instance) -----------------------------------------------------------------
def test_down_stops_everything_it_started(up: UpInstance) -> None:
    import psutil

    assert up.temp_dir and up.temp_dir.startswith("/tmp/jr2ray-")

    def ray_procs() -> list[int]:
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(up.temp_dir in part for part in (p.info["cmdline"] or [])):  # type: ignore[operator]
                    found.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    assert ray_procs(), "the instance's Ray processes should be running before `down`"
    res = up.cli("down")
    assert res.code == 0, res.explain()
    assert not (up.home / "instance.json").exists()
    wait_for("the Ray processes to exit", lambda: not ray_procs(), timeout_s=60)
    wait_for("the API port to close", lambda: not port_open("127.0.0.1", up.port), timeout_s=30)
    after = up.cli("--api", up.api, "status")
    assert after.code == 1 and "no jr2ray API" in after.stderr, after.explain()
    gone = up.cli("runs")  # nothing recorded now: the CLI says so rather than guess an address
    assert gone.code == 1 and "no jr2ray instance recorded" in gone.stderr, gone.explain()
    again = up.cli("down")
    assert again.code == 1 and "no instance" in again.stderr, again.explain()
    # The token outlives the instance: the next `up` reuses it (and does not print it).
    assert (up.home / "token").exists()
