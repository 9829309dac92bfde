"""Kill a run's actor at each risky point; Ray restarts it and the run resumes from its journal (R5).

Runs here are virtual (the default): the actor killed is the pooled host that holds the run at that moment, and
the run is adopted again from its journal when Ray restarts it. Runs park between steps when idle long enough.

Each test asserts on the journal (admissions, effect records) and on the file the deploy Effect appends to:
no pick, gate event or effect is lost or applied twice.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import ray
from ray_helpers import holds_no_actor, killable

from conformance_fakes import FakeModelServer, calls

ENV = {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_DEPLOY_DRIVER": "external"}

pytestmark = pytest.mark.ray


def _kill(run, how: str = "ray.kill") -> None:  # noqa: ANN001
    """Kill the run's worker at this point (`kill -9` of its process, or `ray.kill`) and wait until the run answers
    from a new process (Ray restarted its actor, and the run was adopted again from its journal)."""
    pid_before = run.pid()
    if how == "sigkill":
        os.kill(pid_before, signal.SIGKILL)
    else:
        ray.kill(killable(run), no_restart=False)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if run.pid() != pid_before:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.2)
    raise AssertionError("the run's actor did not come back")


def _ledger(client, run_id, kind):  # noqa: ANN001
    j = client.store.open(run_id)
    try:
        return j.ledger(kind)
    finally:
        j.close()


def _wait(pred, timeout=20.0):  # noqa: ANN001
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _start(client, tmp_path: Path, **door):  # noqa: ANN001
    # The deploy Effect's file is confined to the run's workspace: <home>/workspaces/<run id>/deploy.log.
    run = client.start("deploy", {"log_path": "deploy.log", **door}, env=ENV)
    return run, Path(os.environ["JR2RAY_HOME"]) / "workspaces" / run.id / "deploy.log"


def test_kill_after_a_pick(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, _ = _start(client, tmp_path)
    r = run.pick("operator", "note", {"text": "changelog reviewed"})
    assert r.moved and not r.turn_complete
    _kill(run)
    status = run.status()
    assert status.value == {"planning": "idle"}
    assert status.context["notes"] == ["changelog reviewed"]
    assert [e.data["name"] for e in _ledger(client, run.id, "admission")] == ["note"]
    # The Turn came back at the same address, and the run goes on.
    assert run.surface("operator").allowed == ["deploy", "note"]
    run.cancel()


def test_kill_while_an_effect_runs(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, log = _start(client, tmp_path, deploy_seconds=3.0)
    ref = run.pick_async("operator", "deploy", {})
    _wait(lambda: _ledger(client, run.id, "effect_started"))
    _kill(run)
    try:  # the caller sees the crash, or the dying actor's last word; picks are never retried (D12)
        late = ref.result(30)
        assert late.answer is None or "deploy finished" not in late.answer
    except ray.exceptions.RayActorError:
        pass
    status = _wait(lambda: (s := run.status()).value == {"planning": "idle"} and s)
    time.sleep(3.5)  # longer than the command would have run
    assert not log.exists() or log.read_text() == "", "the interrupted effect ran anyway"
    assert len(_ledger(client, run.id, "effect_started")) == 1, "the effect was started twice"
    assert status.context["deploys"] == 0
    # A fresh deploy pick runs the command exactly once more.
    again = run.pick("operator", "deploy", {})
    assert again.answer == "deploy finished: deployed"
    assert log.read_text() == "deployed\n"
    assert len(_ledger(client, run.id, "effect_started")) == 2
    run.cancel()


def test_kill_while_a_gate_is_open(client, tmp_path: Path) -> None:  # noqa: ANN001
    run, log = _start(client, tmp_path, deploy_seconds=0.05, cooldown_ms=100)
    assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
    assert run.pick("operator", "submit", {}).turn_complete
    assert [g.id for g in run.gates()] == ["approval"]
    _kill(run)
    gates = run.gates()
    assert [g.id for g in gates] == ["approval"] and gates[0].accepts_now == ["approve", "reject"]
    run.send("approval", "approve", {"by": "ops"})
    assert run.wait(20).status == "done"
    assert [e.data["name"] for e in _ledger(client, run.id, "admission")] == ["deploy", "submit", "approve"]
    assert log.read_text() == "deployed\n"


def test_kill_while_an_after_timer_is_pending(client, tmp_path: Path) -> None:  # noqa: ANN001
    # Long enough that a loaded box kills and restores well before the deadline: with 6 s, the kill and the read
    # after it took over 5.5 s here once, and the timer had fired.
    cooldown_s = 20.0
    run, log = _start(client, tmp_path, deploy_seconds=0.05, cooldown_ms=int(cooldown_s * 1000))
    run.pick("operator", "deploy", {})
    run.pick("operator", "submit", {})
    t0 = time.time()
    run.send("approval", "approve", {"by": "ops"})
    assert run.status().value == "cooldown"
    time.sleep(0.5)
    _kill(run)
    assert run.status().value == "cooldown"
    killed_at = time.time() - t0
    final = run.wait(60)
    elapsed = time.time() - t0
    assert final.status == "done" and final.value == "released"
    # It fired at its persisted deadline: not early (skipped), and not a full cooldown after the restart (from zero).
    assert cooldown_s - 0.1 <= elapsed < killed_at + cooldown_s
    assert log.read_text() == "deployed\n"


KILLS = pytest.mark.parametrize("how", ["sigkill", "ray.kill"])
NOTES_ENV = {"JR2RAY_NOTES_DRIVER": "external"}


def _journal_bytes(client, run_id) -> bytes:  # noqa: ANN001
    """The run's journal as raw bytes (main file and WAL), read without SQLite so reading changes nothing."""
    path = client.store.path(run_id)
    wal = Path(str(path) + "-wal")
    return path.read_bytes() + b"|" + (wal.read_bytes() if wal.exists() else b"")


def _open_gate(run):  # noqa: ANN001
    return _wait(lambda: run.gates())[0]


def _ask(run, question: str, delivery_id: str | None = None):  # noqa: ANN001
    """Pick `ask` and return its pending receipt once the editor's Gate is open."""
    ref = run.pick_async("writer", "ask", {"question": question}, delivery_id)
    _wait(lambda: any(g.meta == {"question": question} for g in run.gates()))
    return ref


@KILLS
def test_case1_gate_event_is_not_applied_twice_after_a_restart(client, how: str) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    first = _ask(run, "q1?")
    run.send(_open_gate(run).id, "reply", {"text": "A"}, delivery_id="rep-1")
    assert first.result(20).answer == "The editor replied: A"
    second = _ask(run, "q2?")
    _kill(run, how)
    with pytest.raises(ray.exceptions.RayActorError):
        second.result(30)
    again = run.send("notes.writing.asking", "reply", {"text": "A"}, delivery_id="rep-1")
    assert again.delivery_id == "rep-1"
    status = run.status()
    assert status.context["replies"] == 1, "the editor's reply was counted twice"
    assert status.value == {"writing": "asking"}, "the repeat answered the second question"
    replies = [e for e in _ledger(client, run.id, "admission") if e.data["name"] == "reply"]
    assert len(replies) == 1
    run.cancel()


@KILLS
def test_case7_delivery_ids_are_scoped_by_sender_and_never_reused(client, how: str) -> None:  # noqa: ANN001
    from jr2ray.run import Conflict

    run = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    asked = _ask(run, "q?", delivery_id="a-1")
    run.send(_open_gate(run).id, "reply", {"text": "A"}, delivery_id="g-1")
    first = asked.result(20)
    assert first.delivered
    _kill(run, how)
    before = _journal_bytes(client, run.id)
    with pytest.raises(Conflict, match="g-1"):  # the same Gate id with another payload: a clear 409
        run.send("notes.writing.asking", "reply", {"text": "B"}, delivery_id="g-1")
    reused = run.pick("writer", "ask", {"question": "another?"}, delivery_id="a-1")
    assert not reused.delivered and reused.refused == "reused_id"
    assert run.pick("writer", "ask", {"question": "q?"}, "a-1") == first  # same id, same payload: the first receipt
    assert _journal_bytes(client, run.id) == before, "a refusal or a repeat changed the journal"
    # The Gate's id does not shadow a Turn's pick: `done` with "g-1" is delivered.
    done = run.pick("writer", "done", {"notes": "# n"}, delivery_id="g-1")
    assert done.delivered and done.turn_complete
    assert run.wait(20).status == "done"
    names = [e.data["name"] for e in _ledger(client, run.id, "admission")]
    assert names == ["ask", "reply", "done"]


@KILLS
def test_case2_a_waiting_pick_keeps_its_receipt_across_a_restart(client, how: str) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    lost = _ask(run, "which?", delivery_id="ask-1")
    _kill(run, how)
    with pytest.raises(ray.exceptions.RayActorError):
        lost.result(30)
    retry = run.pick_async("writer", "ask", {"question": "which?"}, "ask-1")  # waits for the same receipt
    time.sleep(0.5)
    assert not retry.done(), "the retry was answered before the editor replied"
    (gate,) = run.gates()
    assert gate.meta == {"question": "which?"}
    run.send(gate.id, "reply", {"text": "the crash fix"})
    receipt = retry.result(20)
    assert receipt.delivered and receipt.moved and receipt.refused is None
    assert receipt.answer == "The editor replied: the crash fix"
    _kill(run, how)  # after Rest, the receipt itself is in the journal
    assert run.pick("writer", "ask", {"question": "which?"}, "ask-1") == receipt
    asks = [e for e in _ledger(client, run.id, "admission") if e.data["name"] == "ask"]
    assert len(asks) == 1
    assert run.status().context["replies"] == 1
    run.cancel()


def _remove_journal(client, run_id) -> None:  # noqa: ANN001
    for suffix in ("", "-wal", "-shm"):
        Path(str(client.store.path(run_id)) + suffix).unlink(missing_ok=True)


def _listing(client, run_id):  # noqa: ANN001
    return next(r for r in client.runs() if r["id"] == run_id)


@KILLS
def test_case4_a_missing_journal_is_lost_and_never_rerun_from_its_input(client, tmp_path: Path, how: str) -> None:  # noqa: ANN001
    from jr2ray.run import RunLost

    run, log = _start(client, tmp_path, deploy_seconds=0.05)
    assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
    _remove_journal(client, run.id)
    _kill(run, how)
    status = run.status()
    assert status.status == "lost" and "gone" in (status.error or "")
    with pytest.raises(RunLost, match="not re-run"):
        run.pick("operator", "deploy", {})
    with pytest.raises(RunLost):
        run.surface("operator")
    time.sleep(0.5)
    assert log.read_text() == "deployed\n", "the deploy ran again"
    assert not client.store.path(run.id).exists(), "the journal was made anew"
    row = _listing(client, run.id)
    assert row["status"] == "lost" and "gone" in row["error"]


@KILLS
def test_case5_a_damaged_journal_is_corrupt_and_every_other_run_works(client, tmp_path: Path, how: str) -> None:  # noqa: ANN001
    from jr2ray.run import RunCorrupt

    bad, _ = _start(client, tmp_path / "a", deploy_seconds=0.05)
    bad.cancel()
    _wait(lambda: holds_no_actor(client, bad), timeout=30)  # finished: it holds no actor
    path = client.store.path(bad.id)
    with open(path, "r+b") as f:  # a truncated file
        f.truncate(1000)
    live, log = _start(client, tmp_path / "b", deploy_seconds=0.05)
    good = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    rows = {r["id"]: r for r in client.runs()}
    assert rows[bad.id]["status"] == "corrupt" and "damaged" in rows[bad.id]["error"]
    assert rows[good.id]["status"] == "active" and rows[live.id]["status"] == "active"
    # A live run whose file goes bad stops writing and says so.
    assert live.pick("operator", "note", {"text": "one"}).moved
    with open(client.store.path(live.id), "r+b") as f:
        f.write(b"garbage garbage!")
    damaged = _journal_bytes(client, live.id)
    with pytest.raises(RunCorrupt, match="stopped writing"):
        live.pick("operator", "deploy", {})
    status = live.status()
    assert status.status == "corrupt" and "stopped writing" in (status.error or "")
    time.sleep(0.5)
    assert not log.exists(), "the deploy ran although its journal could not be written"
    assert _journal_bytes(client, live.id) == damaged, "a run kept writing to a damaged journal"
    _kill(live, how)
    assert live.status().status == "corrupt"
    assert _journal_bytes(client, live.id) == damaged
    # Every other run lists and works as before.
    ref = _ask(good, "q?")
    good.send(_open_gate(good).id, "reply", {"text": "yes"})
    assert ref.result(20).answer == "The editor replied: yes"
    assert _listing(client, live.id)["status"] == "corrupt"
    good.cancel()




def test_case6_a_finished_run_frees_its_actor_and_is_purged_after_retention(client, tmp_path: Path) -> None:  # noqa: ANN001
    from jr2ray.settings import load_settings

    done = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    ref = _ask(done, "q?")
    done.send(_open_gate(done).id, "reply", {"text": "yes"})
    ref.result(20)
    assert done.pick("writer", "done", {"notes": "# n"}).turn_complete
    cancelled, _ = _start(client, tmp_path, deploy_seconds=0.05)
    cancelled.cancel()
    active, _ = _start(client, tmp_path / "x", deploy_seconds=0.05)
    assert done.wait(20).status == "done"
    _wait(lambda: holds_no_actor(client, done) and holds_no_actor(client, cancelled), timeout=30)
    # The journal stays readable: the handle, a fresh lookup, and the list all answer from it.
    assert done.status().output == {"notes": "# n"}
    assert client.get(done.id).wait(1).status == "done"
    assert client.get(cancelled.id).status().status == "cancelled"
    rows = {r["id"]: r for r in client.runs()}
    assert rows[done.id]["lifecycle"] == rows[cancelled.id]["lifecycle"] == "finished"
    assert rows[active.id]["presence"] in ("live", "parked"), "an active run was lost"
    # Retention: nothing finished is purged before the setting's days have passed; after them, only finished runs.
    assert load_settings().retention_days == 7
    assert client.gc() == []
    week = 7 * 24 * 3600
    purged = client.store.purge_finished(week, now=time.time() + week + 60)
    assert set(purged) >= {done.id, cancelled.id} and active.id not in purged
    assert not client.store.path(done.id).exists() and client.store.path(active.id).exists()
    assert active.pick("operator", "note", {"text": "still here"}).moved
    active.cancel()


@KILLS
def test_case8_the_feed_resumes_by_its_numbers_across_a_restart(client, how: str) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "fix: crash"}, env=NOTES_ENV)
    assert run.pick("writer", "publish", {"notes": "x"}).refused == "off_menu"  # shown, never journaled
    ref = _ask(run, "q?")
    run.send(_open_gate(run).id, "reply", {"text": "A"})
    ref.result(20)
    before = _wait(lambda: (h := run.history(0)) and h[-1]["kind"] == "receipt" and h)
    kinds = [e["kind"] for e in before]
    assert kinds.count("pick") == 2 and kinds.count("admission") == 2 and kinds.count("receipt") == 2
    cursor = before[3]["seq"] + 1  # a reader that saw the first four events (Last-Event-ID)
    _kill(run, how)
    after = run.history(0)
    kept = {e["seq"]: e for e in after}
    refusal = {e["seq"] for e in before if e["data"].get("name") == "publish" or e["data"].get("refused")}
    assert len(refusal) == 2 and not refusal & set(kept), "a refusal was journaled"
    durable = [e for e in before if e["seq"] not in refusal]
    for e in durable:  # every journaled event is back, with the same number and the same content
        assert e["seq"] in kept and kept[e["seq"]]["kind"] == e["kind"] and kept[e["seq"]]["data"] == e["data"]
    # Last-Event-ID: the reader gets exactly what it had not seen, then what happened since the restart.
    missed = [e["seq"] for e in durable if e["seq"] >= cursor]
    resumed = [e["seq"] for e in run.history(cursor)]
    assert resumed[:len(missed)] == missed and all(n > before[-1]["seq"] for n in resumed[len(missed):])
    # New events after the restart get new numbers: no number is ever given twice.
    assert run.pick("writer", "done", {"notes": "# n"}).turn_complete
    newest = run.history(before[-1]["seq"] + 1)
    assert newest and min(e["seq"] for e in newest) > max(e["seq"] for e in before)
    assert len({e["seq"] for e in run.history(0)}) == len(run.history(0))


RAY_LAUNCHER = "jr2ray.harness.launcher:RayTurnLauncher"


def _harnesses(run_id: str) -> set[str]:
    """The names of this run's live HarnessActors (harness:<conversation>:<n>:<tag>; a Turn's conversation starts
    with the run id)."""
    return {n for n in ray.util.list_named_actors() if n.startswith(f"harness:{run_id}.")}


def _kill_harness(name: str, how: str) -> None:
    handle = ray.get_actor(name, namespace="jr2ray")
    if how == "sigkill":
        os.kill(ray.get(handle.pid.remote(), timeout=30), signal.SIGKILL)
    else:
        ray.kill(handle, no_restart=True)


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@KILLS
@pytest.mark.parametrize("who", ["harness", "run"])
def test_case9_a_turn_cut_off_mid_pick_goes_on_with_the_same_conversation(
        client, model: FakeModelServer, who: str, how: str) -> None:  # noqa: ANN001
    """The writer's `ask` waits for the editor when its Harness (or the run's actor, and the Harness with it) is
    killed. A fresh Harness for the same Turn sends the same tools and messages, byte for byte, then the notice;
    the `ask` is resent with its delivery id, so it is admitted once and its receipt reaches the new Harness."""
    import jr2ray
    from jr2ray.menu import texts

    model.reset()
    model.push(calls(("ask", {"question": "Which change matters most?"})), calls(("done", {"notes": "# N"})))
    c = jr2ray.connect(store=client.store.directory, launcher=RAY_LAUNCHER)
    run = c.start("notes", {"changes": "fix: crash"},
                  env={"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url})
    gate = _wait(lambda: run.gates(), timeout=60)[0]
    (first,) = _wait(lambda: _harnesses(run.id))
    if who == "harness":
        _kill_harness(first, how)
    else:
        _kill(run, how)
    _wait(lambda: _harnesses(run.id) - {first}, timeout=60)  # a fresh Harness took the Turn
    time.sleep(0.5)  # it resent the ask (same delivery id) and waits on its receipt
    run.send(gate.id, "reply", {"text": "The crash fix."})
    status = run.wait(60)
    assert status.status == "done" and status.output == {"notes": "# N"}
    assert status.context["replies"] == 1, "the editor's reply was counted twice"
    admissions = _ledger(client, run.id, "admission")
    assert [e.data["name"] for e in admissions] == ["ask", "reply", "done"], "a pick was applied twice"
    picks = [e.data["delivery_id"] for e in admissions if "iid" in e.data]
    assert len(set(picks)) == 2 and all(d.startswith("h0.") for d in picks), "the Harness sent no delivery ids"
    assert len(model.requests) == 2, "the model was asked again for what the journal had"
    before, after = model.requests
    old = b'"messages":[' + b",".join(_compact(m) for m in before.messages)
    assert old + b"]" in before.raw
    assert old + b"," in after.raw, "the relaunched Turn's first request does not start with the old messages"
    tools = b'"tools":' + _compact(before.body["tools"])
    assert tools in before.raw and tools in after.raw, "the tools block changed"
    rest = after.messages[len(before.messages):]
    assert [m["role"] for m in rest] == ["assistant", "tool", "user"]
    assert "The editor replied: The crash fix." in rest[1]["content"]
    assert rest[2]["content"] == texts.turn_restarted(["ask", "done"])
    assert _ledger(client, run.id, "transcript")


def _down_up(client) -> list[str]:  # noqa: ANN001
    """`jr2ray down` and `up` for this tier's private Ray: every process goes, then the instance resumes its runs."""
    ray.shutdown()
    time.sleep(1.0)
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    return client.resume(env=ENV)


# Usually longer than down, up and 16 actor starts take; when a loaded box takes longer, the long timers are overdue
# at up too, and only "not early, not from zero" is checked for them (as the CLI's case 3 does).
LONG_S = 40
# Outlasts two approvals, four status reads and the down on a loaded box: a send wakes a parked run, which took up
# to 3 s here (a 3 s cooldown had already released its run when it was read, in CI). It may still be running after
# up, and then fires with the time it had left.
SHORT_S = 20


def test_case3_twenty_runs_in_every_state_go_on_after_down_and_up(client, tmp_path: Path) -> None:  # noqa: ANN001
    """Last in the module: it restarts the tier's Ray."""
    def deploy(tag: str, **door):  # noqa: ANN001, ANN202
        return _start(client, tmp_path / tag, **door)

    def to_gate(tag: str, cooldown_ms: int):  # noqa: ANN202
        (tmp_path / tag).mkdir()
        run, log = deploy(tag, deploy_seconds=0.05, cooldown_ms=cooldown_ms)
        assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
        assert run.pick("operator", "submit", {}).turn_complete
        return run, log

    gated = [to_gate(f"g{i}", 100) for i in range(4)]
    asking = [client.start("notes", {"changes": f"fix {i}"}, env=NOTES_ENV) for i in range(4)]
    asked = [_ask(r, f"q{i}?", delivery_id=f"ask-{i}") for i, r in enumerate(asking)]
    timed = [to_gate(f"t{i}", ms) for i, ms in enumerate([SHORT_S * 1000] * 2 + [LONG_S * 1000] * 2)]
    for i in range(3):
        (tmp_path / f"e{i}").mkdir()
    effecting = [deploy(f"e{i}", deploy_seconds=30.0) for i in range(3)]
    effect_refs = [r.pick_async("operator", "deploy", {}) for r, _ in effecting]
    for run, _ in effecting:
        _wait(lambda run=run: _ledger(client, run.id, "effect_started"))
    finished = [client.start("notes", {"changes": "x"}, env=NOTES_ENV) for _ in range(3)]
    for run in finished:
        run.cancel()
    damaged = client.start("notes", {"changes": "x"}, env=NOTES_ENV)
    idle = client.start("notes", {"changes": "x"}, env=NOTES_ENV)
    del asked, effect_refs
    with open(client.store.path(damaged.id), "r+b") as f:
        f.write(b"not a journal at all")
    runs = [r for r, _ in gated + timed + effecting] + asking + finished + [damaged, idle]
    assert len(runs) == 20
    approved_at = time.time()
    for run, _ in timed[2:] + timed[:2]:  # the long ones first: the short ones' timers start last
        run.send("approval", "approve", {"by": "ops"}, delivery_id="ok-1")
    values = [r.status().value for r, _ in timed]
    assert values == ["cooldown"] * 4, (values, time.time() - approved_at)

    parked = {r.id for r in runs} - set(client.store.awake_runs())
    resumed = set(_down_up(client))
    resumed_at = time.time()
    active = {r.id for r, _ in gated + timed + effecting} | {r.id for r in asking} | {idle.id}
    ours = {r.id for r in runs}  # the tier's store also holds other tests' runs
    # Every active run is woken, but for those parked at the down (they wake on what they wait for: a timer, a
    # Gate event, a pick); nothing finished is. The runs with work in flight (an Effect) were not parked.
    assert resumed & ours == active - parked, "every active run that was not parked, and only those, is resumed"
    assert not parked & {r.id for r, _ in effecting}
    h = {r.id: client.get(r.id) for r in runs if r.id in active}

    # Pending timers fire with the time they had left (at once if overdue), never from zero.
    print(f"\n[case 3] approval to resumed: {resumed_at - approved_at:.1f}s; the long timers: {LONG_S}s")
    late = time.time() - approved_at >= LONG_S - 5.0  # so near due that the read below might see it fire
    for run, _ in timed[2:]:  # read first: waiting for the short ones below takes up to SHORT_S
        assert late or h[run.id].status().value == "cooldown"
    for run, log in timed[:2]:
        assert h[run.id].wait(SHORT_S + 30).value == "released"
        assert log.read_text() == "deployed\n"
    for run, _ in timed[2:]:
        assert h[run.id].wait(LONG_S + 30).value == "released"
    assert time.time() - approved_at >= LONG_S - 0.1, "a timer fired early"
    assert time.time() < resumed_at + LONG_S - 0.5, "a timer restarted from zero after up"
    # Gates accept, and nothing is applied twice.
    for run, log in gated:
        h[run.id].send("approval", "approve", {"by": "ops"})
        assert h[run.id].wait(20).status == "done"
        assert log.read_text() == "deployed\n"
    for run, _ in timed:
        assert [e.data["name"] for e in _ledger(client, run.id, "admission")] == ["deploy", "submit", "approve"]
    # The waiting picks are answered: a retry with the same delivery_id gets the receipt the Gate's reply makes.
    for i, run in enumerate(asking):
        retry = h[run.id].pick_async("writer", "ask", {"question": f"q{i}?"}, f"ask-{i}")
        h[run.id].send(_open_gate(h[run.id]).id, "reply", {"text": f"r{i}"})
        assert retry.result(20).answer == f"The editor replied: r{i}"
        assert h[run.id].status().context["replies"] == 1
    # An Effect cut off by `down` is not run again (it is not idempotent); the open Turn goes on.
    for run, log in effecting:
        status = _wait(lambda run=run: (s := h[run.id].status()).value == {"planning": "idle"} and s)
        assert status.context["deploys"] == 0 and not log.exists()
        assert len(_ledger(client, run.id, "effect_started")) == 1
        assert h[run.id].surface("operator").allowed == ["deploy", "note"]
    # Cancel works; finished runs stay finished; the damaged one lists as corrupt and took nothing down with it.
    assert h[idle.id].cancel().status == "cancelled"
    rows = {r["id"]: r for r in client.runs()}
    assert all(rows[r.id]["status"] == "cancelled" for r in finished)
    assert rows[damaged.id]["status"] == "corrupt"
