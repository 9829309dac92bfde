"""Runs off the head: with the PostgreSQL store, Run actors spread over both nodes of a real two-node cluster.

- runs placed on the second node are driven to the end from the head (this test process joins the head);
- an old incarnation of a run, still alive beside a newer one (a node that lost touch and came back), cannot commit:
  it gets RunFenced and the journal does not change;
- removing the second node mid-run moves its runs to the head; they resume from the database with nothing lost or
  applied twice (the kill suite's assertions: admissions, effect records, the deploy Effect's file).

The node removal comes last: it changes the cluster the module's other tests share.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast

import pytest
import ray

from jr2ray.run import RunFenced
from jr2ray.run.actor import RunActor

ENV = {"JR2RAY_DEPLOY_DRIVER": "external"}
EFFECT_S = 6.0  # the deploy command cut off by the node's removal
QUICK = {"log_path": "deploy.log", "deploy_seconds": 0.05, "cooldown_ms": 100}

pytestmark = pytest.mark.ray


def _until(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.GetTimeoutError, TimeoutError) as exc:
            last = exc  # the actor is restarting
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def _ledger(client: Any, run_id: str, kind: str) -> list[Any]:
    j = client.store.open(run_id)
    try:
        return j.ledger(kind)
    finally:
        j.close()


def _names(client: Any, run_id: str) -> list[str]:
    return [e.data["name"] for e in _ledger(client, run_id, "admission")]


def _log(nodes: Any, run_id: str) -> Path:
    return nodes.home / "workspaces" / run_id / "deploy.log"


def _node(run: Any) -> str:
    return str(ray.get(run.actor.node.remote(), timeout=60))


def _dump(client: Any, run_id: str) -> str:
    """Every row the database keeps of one run: what a fenced commit must leave as it was."""
    with client.store.pool.connection() as conn:
        rows = [conn.execute(f"SELECT * FROM {t} WHERE {k} = %s ORDER BY 1, 2", (run_id,)).fetchall()
                for t, k in (("jr2ray_run", "id"), ("jr2ray_snapshot", "run_id"), ("jr2ray_ledger", "run_id"))]
    return repr(rows)


def _on_second(nodes: Any, n: int, **door: Any) -> list[Any]:
    """Start runs until `n` of them were placed on the second node (the spread placement alternates nodes); the
    others are cancelled."""
    runs = [nodes.client.start("deploy", {**QUICK, **door}, env=ENV) for _ in range(2 * n + 2)]
    return _keep_on_second(nodes, runs, {r.id: _node(r) for r in runs}, n, "runs")


def _keep_on_second(nodes: Any, runs: list[Any], placed: dict[str, str], n: int, what: str) -> list[Any]:
    """The first `n` runs placed on the second node; the others are cancelled. Both nodes must have been used."""
    assert set(placed.values()) == {nodes.head_id, nodes.second_id}, f"{what} did not spread over both nodes"
    chosen = [r for r in runs if placed[r.id] == nodes.second_id][:n]
    for r in runs:
        if r not in chosen:
            r.cancel()
    assert len(chosen) == n, placed
    return chosen


def test_runs_on_the_second_node_are_driven_to_the_end_from_the_head(two_nodes: Any) -> None:
    client = two_nodes.client
    runs = _on_second(two_nodes, 2)
    assert ray.get_runtime_context().get_node_id() == two_nodes.head_id  # the driver is on the head
    for run in runs:
        assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
        assert run.pick("operator", "submit", {}).turn_complete
        assert [g.id for g in run.gates()] == ["approval"]
        run.send("approval", "approve", {"by": "ops"})
    for run in runs:
        final = run.wait(60)
        assert final.status == "done" and final.value == "released"
        assert _names(client, run.id) == ["deploy", "submit", "approve"]
        assert len(_ledger(client, run.id, "effect_started")) == 1
        assert _log(two_nodes, run.id).read_text() == "deployed\n"
    assert {r["id"]: r["status"] for r in client.runs()}.items() >= {r.id: "done" for r in runs}.items()


def test_with_the_sqlite_store_every_run_stays_on_the_head(two_nodes: Any, tmp_path: Path) -> None:
    """The same cluster, a SQLite store: its journals are files on the head's disk, so runs are pinned there."""
    import jr2ray

    client = jr2ray.connect(store=tmp_path / "runs", launcher=None, virtual=False)
    runs = [client.start("deploy", QUICK, env=ENV) for _ in range(4)]
    assert {_node(r) for r in runs} == {two_nodes.head_id}
    assert runs[0].pick("operator", "note", {"text": "here"}).moved
    assert _names(client, runs[0].id) == ["note"]
    for r in runs:
        r.cancel()


def _host_node(run: Any) -> str:
    run.status()  # activates the run if it is not live, and caches its host
    return str(ray.get(run.host.info.remote(), timeout=60)["node"])


def _virtual_on_second(nodes: Any, n: int) -> list[Any]:
    """Virtual runs whose pooled host the registry placed on the second node (hosts spread like Run actors)."""
    client = nodes.virtual_client()
    runs = [client.start("deploy", QUICK, env=ENV) for _ in range(2 * n + 2)]
    return _keep_on_second(nodes, runs, {r.id: _host_node(r) for r in runs}, n, "hosts")


def test_virtual_runs_on_the_second_node_are_driven_to_the_end(two_nodes: Any) -> None:
    (run,) = _virtual_on_second(two_nodes, 1)
    client = two_nodes.virtual_client()
    assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
    assert run.pick("operator", "submit", {}).turn_complete
    run.send("approval", "approve", {"by": "ops"})
    assert run.wait(60).status == "done"
    assert _names(client, run.id) == ["deploy", "submit", "approve"]
    assert _log(two_nodes, run.id).read_text() == "deployed\n"


async def test_the_api_lists_and_feeds_runs_from_the_database(two_nodes: Any) -> None:
    """The API on the PostgreSQL store: a run started over HTTP, driven to the end, listed by `GET /runs` and
    replayed by its event feed from the database (its actor has exited by then); no journal directory is made."""
    import asyncio
    import json

    import httpx

    from serve.api import ApiConfig, build_app

    app = build_app(ApiConfig(home=str(two_nodes.home), store=two_nodes.url, token="t0ken", launcher="none",
                              run_env=dict(ENV), poll_s=0.05, keepalive_s=0.4, hosts=["jr2ray.test"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://jr2ray.test",
                                 headers={"Authorization": "Bearer t0ken"}, timeout=60) as c:
        r = await c.post("/workflows/deploy/runs", json={"input": QUICK})
        assert r.status_code == 201, r.text
        rid, iid = r.json()["id"], r.json()["turns"][0]["iid"]
        for name in ("deploy", "submit"):
            assert (await c.post(f"/agents/{iid}/picks", json={"name": name, "args": {}})).json()["delivered"]
        sent = await c.post(f"/runs/{rid}/gates/approval/events", json={"event": "approve", "input": {"by": "o"}})
        assert sent.status_code == 200, sent.text
        for _ in range(600):
            if (view := (await c.get(f"/runs/{rid}")).json())["status"] == "done":
                break
            await asyncio.sleep(0.1)
        assert view["status"] == "done" and view["value"] == "released"
        listed = {x["id"]: x["status"] for x in (await c.get("/runs?limit=1000")).json()}
        assert listed[rid] == "done"
        await asyncio.sleep(6.0)  # past the finished actor's exit grace: what follows can only come from the database
        assert (await c.get(f"/runs/{rid}")).json()["live"] is False
        kinds: list[str] = []
        admitted: list[str] = []
        async with c.stream("GET", f"/runs/{rid}/events") as feed:
            async for line in feed.aiter_lines():
                if line.startswith("event: "):
                    kinds.append(line.removeprefix("event: "))
                elif line.startswith("data: ") and kinds[-1] == "admission":
                    admitted.append(json.loads(line.removeprefix("data: "))["name"])
                if kinds[-1:] == ["end"]:
                    break
    assert kinds[0] == "status" and kinds[-1] == "end" and "receipt" in kinds, kinds
    assert admitted == ["deploy", "submit", "approve"]  # the journaled feed, replayed from the database
    assert _names(two_nodes.client, rid) == ["deploy", "submit", "approve"]
    assert not (two_nodes.home / "runs").exists()


def test_an_old_incarnation_of_a_run_cannot_commit(two_nodes: Any) -> None:
    """A second incarnation of a run on the head (as Ray makes when the run's node stops answering) takes the
    run's lease; the first, still alive on the second node, is fenced at its next commit and writes nothing."""
    client = two_nodes.client
    (old,) = _on_second(two_nodes, 1)
    assert old.pick("operator", "note", {"text": "a"}).moved
    row = client.store.open(old.id).run()
    actor_class = cast(Any, RunActor)
    new = actor_class.options(name=f"run:{old.id}:again", namespace="jr2ray", num_cpus=0,
                              resources={"jr2ray_test_head": 0.01}).remote(
        old.id, row.workflow, row.input, two_nodes.url, None, ENV, True, placement="spread")
    assert ray.get(new.status.remote(), timeout=60).context["notes"] == ["a"]  # rebuilt from the journal
    before = _dump(client, old.id)
    with pytest.raises(RunFenced, match="another activation holds the lease"):
        old.pick("operator", "note", {"text": "stale"})
    assert _dump(client, old.id) == before, "the fenced incarnation wrote"
    # The new incarnation goes on from where the journal is; the stale note never happened.
    assert ray.get(new.pick.remote("operator", "note", {"text": "b"}), timeout=60).moved
    assert ray.get(new.status.remote(), timeout=60).context["notes"] == ["a", "b"]
    assert _names(client, old.id) == ["note", "note"]
    ray.get(new.cancel.remote(), timeout=60)
    ray.kill(old.actor, no_restart=True)


def test_removing_the_second_node_moves_its_runs_to_the_head(two_nodes: Any) -> None:
    client = two_nodes.client
    (virtual,) = _virtual_on_second(two_nodes, 1)  # a virtual run, live at its Gate on the second node
    for name in ("deploy", "submit"):
        assert virtual.pick("operator", name, {}).delivered
    picked, gated, timed = _on_second(two_nodes, 3, cooldown_ms=8000)
    (effecting,) = _on_second(two_nodes, 1, deploy_seconds=EFFECT_S)  # still running when the node goes
    assert picked.pick("operator", "note", {"text": "changelog reviewed"}).moved
    for run in (gated, timed):
        assert run.pick("operator", "deploy", {}).answer == "deploy finished: deployed"
        assert run.pick("operator", "submit", {}).turn_complete
    timed.send("approval", "approve", {"by": "ops"})
    t0 = time.time()
    assert timed.status().value == "cooldown"
    ref = effecting.pick_async("operator", "deploy", {})
    _until("the running effect", lambda: _ledger(client, effecting.id, "effect_started"))
    effect_t0 = time.time()

    two_nodes.cluster.remove_node(two_nodes.second, allow_graceful=False)  # its raylet and workers are killed
    try:  # the caller sees the crash, or the dying actor's last word; picks are never retried
        late = ref.result(60)
        assert late.answer is None or "deploy finished" not in late.answer
    except ray.exceptions.RayActorError:
        pass
    for run in (picked, gated, timed, effecting):
        assert _until(f"run {run.id} back on the head", lambda run=run: _node(run)) == two_nodes.head_id
    moved_at = time.time() - t0

    # A virtual run's host came back empty on the head: the registry re-activates the run from the database.
    gates = _until("the virtual run's Gate",  # never hangs: each read is given 20 s
                   lambda: asyncio.run(asyncio.wait_for(virtual.gates_async(), 20)))
    assert [g.id for g in gates] == ["approval"]
    virtual.send("approval", "approve", {"by": "ops"})
    assert virtual.wait(60).status == "done"
    assert _names(two_nodes.virtual_client(), virtual.id) == ["deploy", "submit", "approve"]
    assert _log(two_nodes, virtual.id).read_text() == "deployed\n"
    # After a pick: the pick is there once, and the Turn goes on at the same address.
    st = picked.status()
    assert st.value == {"planning": "idle"} and st.context["notes"] == ["changelog reviewed"]
    assert _names(client, picked.id) == ["note"]
    assert picked.surface("operator").allowed == ["deploy", "note"]
    # An open Gate: still open, answered once, the run ends.
    assert [g.id for g in gated.gates()] == ["approval"]
    gated.send("approval", "approve", {"by": "ops"})
    assert gated.wait(60).status == "done"
    assert _names(client, gated.id) == ["deploy", "submit", "approve"]
    assert _log(two_nodes, gated.id).read_text() == "deployed\n"
    # A pending `after` timer fires at its journaled deadline, not a whole cooldown after the move.
    final = timed.wait(60)
    assert final.status == "done" and final.value == "released"
    row = client.store.open(timed.id).run()
    fired = row.updated_at - t0  # when it committed `released`: at the deadline, or at once when overdue
    assert 8.0 - 0.1 <= fired < max(8.0, moved_at) + 5.0, f"the timer restarted from zero on the head ({fired})"
    assert _names(client, timed.id) == ["deploy", "submit", "approve"]
    assert _log(two_nodes, timed.id).read_text() == "deployed\n"
    # An Effect cut off by the node's death did not finish, and is not run again by itself.
    st = _until("the effect's run back at idle", lambda: (s := effecting.status()).value == {"planning": "idle"} and s)
    log = _log(two_nodes, effecting.id)
    assert not log.exists() or log.read_text() == "", "the interrupted effect ran anyway"
    assert len(_ledger(client, effecting.id, "effect_started")) == 1, "the effect was started twice"
    assert st.context["deploys"] == 0
    time.sleep(max(0.0, effect_t0 + EFFECT_S + 1.0 - time.time()))  # longer than the command would have run
    assert not log.exists() or log.read_text() == "", "the interrupted effect ran anyway"
    assert len(_ledger(client, effecting.id, "effect_started")) == 1, "the effect was started again"
    for run in (picked, effecting):
        run.cancel()
