"""Turn admission on Ray (issue 25): the Harness actors of two runs, each in its own process, share one KV budget
actor, so a Turn waits for another run's conversation to give its share back, and the wait is in its journal."""

from __future__ import annotations

import time

import pytest

from conformance_fakes import FakeModelServer, calls

pytestmark = pytest.mark.ray

APP = "kv-test"


def _until(check, timeout_s: float = 60.0, what: str = "") -> None:  # noqa: ANN001
    deadline = time.time() + timeout_s
    while not check():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _reply_and_finish(runs: list) -> list[str]:  # noqa: ANN001
    """Once every run's writer has asked its editor, answer each Gate; then each run's final status."""
    _until(lambda: all(r.gates() for r in runs), what="every run's Gate")
    for r in runs:
        (gate,) = r.gates()
        r.send(gate.id, "reply", {"text": "Yes."})
    return [r.wait(60).status for r in runs]


def test_two_runs_harness_actors_share_one_budget(client, model: FakeModelServer) -> None:  # noqa: ANN001
    import ray

    import jr2ray
    from jr2ray.harness.budget_actor import budget_stats, drop_budget, ensure_budget
    from jr2ray.run.actor import NAMESPACE

    model.reset()
    model.push(calls(("ask", {"question": "First?"})), calls(("ask", {"question": "First?"})),
               calls(("done", {"notes": "# Notes"})), calls(("done", {"notes": "# Notes"})))
    # Capacity 1 token: every conversation needs more than the whole cache, so each is let in only alone.
    handle = ensure_budget(APP, 1, namespace=NAMESPACE)
    try:
        ray.get(handle.admit.remote("another app user", 1))  # the cache is busy: both runs' first requests wait
        c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher")
        env = {"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url, "JR2RAY_TURN_ADMISSION": "1",
               "JR2RAY_TURN_ADMISSION_APP": APP, "JR2RAY_TURN_ADMISSION_RELEASE_S": "0.2"}
        runs = [c.start("notes", {"changes": f"fix: crash {k}"}, env=env) for k in range(2)]
        _until(lambda: len(budget_stats(handle).waiting) == 2, what="both Harness actors to ask the budget")
        time.sleep(0.5)
        assert model.requests == []  # nobody was let in while the budget was full
        ray.get(handle.release.remote("another app user"))
        # One at a time: the first writer asks the editor (its pick waits on the Gate), gives its share back after
        # 0.2 s, and only then the second is let in.
        assert _reply_and_finish(runs) == ["done", "done"]
        # Both Turns ended: their shares come back (the Harness releases as its Turn ends, just after the run's end).
        _until(lambda: budget_stats(handle).held == {}, timeout_s=30, what="the shares to come back")
        stats = budget_stats(handle)
        assert stats.peak_holders == 1  # never two conversations in the cache at once
        assert stats.waiting == []
        # every hold of the runs' conversations, fresh or grown, is past the 1-token capacity (not the blocker's)
        assert stats.waits >= 2 and stats.over_capacity_grants == stats.grants - 1 + stats.grown
        for r in runs:
            rows = r.telemetry()
            assert len(rows) == 2
            assert rows[0]["kv_wait_s"] >= 0.5  # the first request waited for the cache to free up
            waited = [e for e in r.history() if e["kind"] == "telemetry" and (e["data"].get("kv_wait_s") or 0) > 0]
            assert waited  # the wait is in the run's events too
        for rec in model.requests:  # the model reads nothing of it
            assert not any("admission" in str(m.get("content") or "").lower() for m in rec.messages)
    finally:
        drop_budget(APP, NAMESPACE)


def test_a_run_with_admission_on_and_no_budget_fails_with_the_reason(client, model: FakeModelServer) -> None:  # noqa: ANN001
    import jr2ray

    model.reset()
    c = jr2ray.connect(store=client.store.directory, launcher="jr2ray.harness.launcher:RayTurnLauncher")
    run = c.start("notes", {"changes": "fix"}, env={
        "JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url, "JR2RAY_TURN_ADMISSION": "1",
        "JR2RAY_TURN_ADMISSION_APP": "no-such-app"})
    status = run.wait(60)
    assert status.status in ("failed", "error"), status
    assert "no KV budget actor" in str(status.error or status.output), status
    assert model.requests == []  # never a guessed capacity: no request went out


def test_a_run_parks_while_its_turn_waits_for_admission_and_wakes_when_let_in(  # noqa: ANN001
        client, model: FakeModelServer, ray_home) -> None:
    """A virtual run whose Turn waits for room parks (its host slot is free for other runs), its Harness ends and
    the budget keeps its ask; granted, the run is woken, and the Harness its restore starts sends the request it was
    about to send, with no restart notice. The whole wait is in the Turn's telemetry row."""
    import ray

    import jr2ray
    from jr2ray.harness.budget_actor import budget_stats, drop_budget, ensure_budget
    from jr2ray.menu import texts
    from jr2ray.run.actor import NAMESPACE
    from jr2ray.settings import load_settings

    model.reset()
    model.push(calls(("ask", {"question": "First?"})), calls(("done", {"notes": "# Notes"})))
    handle = ensure_budget(APP, 1, namespace=NAMESPACE)
    try:
        ray.get(handle.admit.remote("another app user", 1))  # the cache is busy
        c = jr2ray.connect(store=ray_home / "parked", launcher="jr2ray.harness.launcher:RayTurnLauncher",
                           settings=load_settings(idle_deactivate_s=1.0))
        env = {"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url, "JR2RAY_TURN_ADMISSION": "1",
               "JR2RAY_TURN_ADMISSION_APP": APP, "JR2RAY_TURN_ADMISSION_RELEASE_S": "0.2"}
        run = c.start("notes", {"changes": "fix: crash"}, env=env)
        _until(lambda: budget_stats(handle).parked != [], what="its run to park and hand its ask to the budget")
        presence = next(r["presence"] for r in c.runs() if r["id"] == run.id)
        assert presence == "parked"
        assert run.status().status == "active"  # read from its journal, without waking it
        time.sleep(1.0)
        assert model.requests == [] and budget_stats(handle).woken == 0
        ray.get(handle.release.remote("another app user"))
        assert _reply_and_finish([run]) == ["done"]  # woken, its writer asks, and it ends
        assert budget_stats(handle).woken == 1
        first = model.requests[0].messages
        assert [m["role"] for m in first] == ["system", "user"]  # a fresh Turn's first request, as it was
        assert not any(texts.TURN_RESTARTED in str(m.get("content") or "") for r in model.requests for m in r.messages)
        rows = run.telemetry()
        assert rows[0]["kv_wait_s"] >= 1.0  # the wait while parked counts
        assert any(e["kind"] == "park" for e in run.history())
    finally:
        drop_budget(APP, NAMESPACE)


def test_runs_waiting_for_room_give_their_slots_to_queued_runs(  # noqa: ANN001
        client, model: FakeModelServer, ray_home) -> None:
    """Two slots, both taken by runs whose Turns wait for a full KV cache, and a third run queued that needs no
    model: a waiting run parks, so the queued one goes live and finishes while the cache is still full; then the
    cache frees, the parked run is woken, and both finish."""
    import ray

    import jr2ray
    from jr2ray.harness.budget_actor import budget_stats, drop_budget, ensure_budget
    from jr2ray.run.actor import NAMESPACE
    from jr2ray.settings import load_settings

    model.reset()
    model.push(calls(("ask", {"question": "First?"})), calls(("ask", {"question": "First?"})),
               calls(("done", {"notes": "# Notes"})), calls(("done", {"notes": "# Notes"})))  # both ask, then both end
    handle = ensure_budget(APP, 1, namespace=NAMESPACE)
    try:
        ray.get(handle.admit.remote("another app user", 1))  # the cache is busy
        c = jr2ray.connect(store=ray_home / "slots", launcher="jr2ray.harness.launcher:RayTurnLauncher",
                           settings=load_settings(max_live_runs=2, idle_deactivate_s=600, queued_idle_s=0.25))
        env = {"JR2RAY_NOTES_DRIVER": "harness", "JR2RAY_LOCAL_BASE_URL": model.url, "JR2RAY_TURN_ADMISSION": "1",
               "JR2RAY_TURN_ADMISSION_APP": APP, "JR2RAY_TURN_ADMISSION_RELEASE_S": "0.2"}
        waiting = [c.start("notes", {"changes": f"fix: crash {k}"}, env=env) for k in range(2)]
        _until(lambda: len(budget_stats(handle).waiting) == 2, what="both runs' Turns to wait for room")
        played = c.submit("notes", {"changes": "docs"}, env={"JR2RAY_NOTES_DRIVER": "external"})
        # Played by this script: it needs a slot, not the model.
        _until(lambda: played.presence() == "live", what="the queued run to get a slot")
        asked = played.pick_async("writer", "ask", {"question": "Which first?"})  # its receipt waits past the Gate
        _until(lambda: played.gates(), what="its Gate to open")
        (gate,) = played.gates()
        played.send(gate.id, "reply", {"text": "The crash."})
        assert asked.result(60).delivered
        assert played.pick("writer", "done", {"notes": "# Docs"}).delivered
        assert played.wait(60).status == "done"
        assert model.requests == []  # all of it while the cache was full
        stats = budget_stats(handle)
        # One slot was wanted, so one waiting run gave its slot up (the registry parks early only for a queued run).
        assert len(stats.parked) == 1 and set(stats.parked) <= set(stats.waiting)
        presence = sorted(r["presence"] for r in c.runs() if r["id"] in {w.id for w in waiting})
        assert presence == ["live", "parked"]
        ray.get(handle.release.remote("another app user"))
        assert _reply_and_finish(waiting) == ["done", "done"]
        assert budget_stats(handle).woken == 1
    finally:
        drop_budget(APP, NAMESPACE)
