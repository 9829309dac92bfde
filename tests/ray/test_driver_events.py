"""The driver API on a real local Ray, as a script from the README would use it: the README's example itself with
200 runs, reads that never wake a parked run (activations counted), the caller's loop never stalled while 1,000
queued runs are driven, durable batch starts, and pushed events."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import until

import jr2ray
from jr2ray.run.client import Client
from jr2ray.run.store import LedgerKind, journal_bytes

pytestmark = pytest.mark.ray
GATE = "notes.writing.asking"
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A private Ray with its own store; runs park 1 s after they rest, and 10 are live at most."""
    home = tmp_path_factory.mktemp("events-home")
    keep = {k: os.environ.get(k) for k in ("JR2RAY_HOME", "JR2RAY_IDLE_DEACTIVATE_S", "JR2RAY_MAX_LIVE_RUNS")}
    os.environ.update(JR2RAY_HOME=str(home), JR2RAY_IDLE_DEACTIVATE_S="1", JR2RAY_MAX_LIVE_RUNS="10")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    c = jr2ray.connect(launcher=None)
    yield c
    ray.shutdown()
    for k, v in keep.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _stats(client: Client) -> dict[str, Any]:
    return dict(ray.get(client.registry().stats.remote()))


def _admissions(client: Client, run_id: str) -> list[str]:
    j = client.store.open(run_id)
    try:
        return [e.data["name"] for e in j.ledger(LedgerKind.ADMISSION)]
    finally:
        j.close()


def _readme_example() -> str:
    block = re.search(r"### Driving runs from Python\n```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "the README has no driving example"
    return block.group(1)


def test_the_readmes_example_drives_200_runs_to_done(client: Client) -> None:
    code = _readme_example()
    assert "N = 20\n" in code and "sleep" not in code  # event-driven: the example polls nothing
    scope: dict[str, Any] = {}
    exec(compile(code.replace("N = 20\n", "N = 200\n"), "README.md", "exec"), scope)  # noqa: S102 - our own README
    runs, finals = scope["runs"], scope["finals"]
    assert len(runs) == 200 and [f.status for f in finals] == ["done"] * 200
    assert all(_admissions(client, r.id) == ["ask", "reply", "done"] for r in runs)  # none lost or applied twice


def test_reads_of_a_parked_run_wake_nothing(client: Client) -> None:
    (run,) = client.start_many("notes", [{"changes": "fix: one"}])
    before, with_write = _stats(client)["activations"], _stats(client)["activations_with_write"]
    waker = run.waker
    resent, carried = waker.resent, waker.answered_carried

    async def drive() -> tuple[Any, ...]:
        await run.until_turn("writer")
        ask = run.pick_async("writer", "ask", {"question": "Which?"}, "ask-1")
        await run.until_gate(GATE)
        while (await run.presence_async()) != "parked":  # only this test looks: when has it parked?
            await asyncio.sleep(0.2)
        reads = (await run.status_async(), await run.gates_async(), await run.surface_async("writer"),
                 await run.history_async(), run.status(), run.gates())
        assert (await run.presence_async()) == "parked"  # none of the reads woke it
        await run.send_async(GATE, "reply", {"text": "the first"}, "reply-1")
        assert (await ask).moved
        done = await run.pick_async("writer", "done", {"notes": "# N"}, "done-1")
        return (*reads, done, await run.finished())

    status, gates, surface, history, status2, gates2, done, final = asyncio.run(drive())
    assert status.value is not None and status == status2 and [g.id for g in gates] == [GATE] == [g.id for g in gates2]
    assert surface.allowed == [] and surface.menu and any(e["kind"] == "gate" for e in history)
    assert done.moved and final.status == "done"
    assert _stats(client)["activations"] - before == 2  # the start, and the Gate's reply: nothing for the reads
    assert _admissions(client, run.id) == ["ask", "reply", "done"]
    # the parked ask's receipt came back with the reply that woke the run: it was not sent again in a call of its own
    assert (waker.answered_carried - carried, waker.resent - resent) == (1, 0)
    assert _stats(client)["activations_with_write"] - with_write == 1  # and the reply rode with the activation


class BlockingWaits:
    """Every blocking wait this process makes from a thread whose event loop is running: a Ray wait (`ray.get`,
    `ray.wait`), or a wait on a future another thread answers (`concurrent.futures.Future.result` before it is
    done, which is how a sync call reaches the driver's own loop). Each would hold the caller's loop until it ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on_loop: list[str] = []
        for name in ("get", "wait"):
            monkeypatch.setattr(ray, name, self._watch(f"ray.{name}", getattr(ray, name)))
        real_result = concurrent.futures.Future.result

        def result(fut: concurrent.futures.Future[Any], timeout: float | None = None) -> Any:
            if not fut.done():
                self._note("Future.result")
            return real_result(fut, timeout)

        monkeypatch.setattr(concurrent.futures.Future, "result", result)

    def _note(self, what: str) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop runs on this thread: a plain blocking call is what the caller asked for
        self.on_loop.append(f"{what} from {threading.current_thread().name}")

    def _watch(self, what: str, real: Any) -> Any:
        def watched(*args: Any, **kwargs: Any) -> Any:
            self._note(what)
            return real(*args, **kwargs)

        return watched


def test_the_async_calls_never_hold_the_callers_loop_on_ray_while_1000_queued_runs_are_driven(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, a call on a queued run did a blocking `ray.get` on the caller's loop until the run's slot came (the
    loop froze 42 s with 3,000 runs). Now no `*_async` call waits on Ray on the loop: every wait is awaited. How long
    the loop went without a beat is printed (`-s`); it is a figure for benchmarks/, not asserted here."""
    waits = BlockingWaits(monkeypatch)

    async def drive() -> tuple[list[float], list[Any], list[Any]]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:  # late from the wake-up before, as benchmarks/control_beat.py counts it
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last - 0.01)
                last = now

        beat = asyncio.ensure_future(heartbeat())
        runs = await client.start_many_async("notes", [{"changes": f"fix {i}"} for i in range(1000)])
        statuses = await asyncio.gather(*(r.status_async() for r in runs))
        await asyncio.gather(*(r.gates_async() for r in runs), *(r.history_async() for r in runs[:100]),
                             *(r.presence_async() for r in runs[:100]))  # none may wait on Ray on this loop
        ended = await asyncio.gather(*(r.cancel_async() for r in runs))
        stop.set()
        await beat
        return gaps, statuses, ended

    gaps, statuses, ended = asyncio.run(drive())
    print(f"\nlongest gap between the loop's beats: {max(gaps) * 1000:.0f} ms; load average {os.getloadavg()}")
    assert waits.on_loop == [], waits.on_loop[:5]
    assert len(gaps) > 1  # the loop beat while the runs were driven
    assert {s.status for s in statuses} <= {"queued", "active"} and len(statuses) == 1000
    assert {s.status for s in ended} == {"cancelled"}


def test_start_many_returns_with_every_start_journaled_and_listed(client: Client) -> None:
    runs = client.start_many("notes", [{"changes": f"listed {i}"} for i in range(1200)])  # three batches
    listed = {r["id"]: r for r in client.runs(status=["queued", "active"])}
    assert {r.id for r in runs} <= set(listed)
    assert all(client.store.exists(r.id) for r in runs)
    queued = [listed[r.id] for r in runs if listed[r.id]["presence"] == "queued"]
    assert queued and sorted(q["place"] for q in queued) == list(range(1, len(queued) + 1))
    async def cancel_all() -> None:
        await asyncio.gather(*(r.cancel_async() for r in runs))
    asyncio.run(cancel_all())


def test_events_are_pushed_for_each_run(client: Client) -> None:
    runs = client.start_many("notes", [{"changes": f"evt {i}"} for i in range(3)])

    async def drive() -> list[Any]:
        seen: list[Any] = []
        async for ev in client.events(runs):
            seen.append(ev)
            run = next(r for r in runs if r.id == ev.run_id)
            if ev.kind == "turn" and ev.allowed == ["ask"]:
                run.pick_async("writer", "ask", {"question": "q?"}, f"ask-{run.id}")
            elif ev.kind == "gate":
                await run.send_async(GATE, "reply", {"text": "t"}, f"rep-{run.id}")
            elif ev.kind == "turn" and "done" in ev.allowed:
                run.pick_async("writer", "done", {"notes": "n"}, f"done-{run.id}")
        return seen

    seen = asyncio.run(asyncio.wait_for(drive(), 120))
    for r in runs:
        kinds = [e.kind for e in seen if e.run_id == r.id]
        assert "gate" in kinds and kinds[-1] == "finished", kinds
        assert _admissions(client, r.id) == ["ask", "reply", "done"]


def test_a_pick_on_a_live_run_is_one_call_to_its_host_and_none_to_the_registry(client: Client) -> None:
    (run,) = client.start_many("notes", [{"changes": "fix: hot"}])

    async def drive() -> tuple[int, list[Any], Any]:
        await run.until_turn("writer")
        before = (await client.stats_async())["asked"]
        receipts = [await run.pick_async("writer", "done", {"notes": "too soon"}, f"hot-{i}") for i in range(20)]
        asked = (await client.stats_async())["asked"] - before
        ended = await run.cancel_async()
        return asked, receipts, ended

    asked, receipts, ended = asyncio.run(drive())
    assert asked == 0, "the handle knew the host: the registry was not asked"
    assert all(r.delivered and not r.moved for r in receipts) and ended.status == "cancelled"


def test_a_stale_host_says_not_here_and_the_handle_asks_the_registry_once(client: Client) -> None:
    (run,) = client.start_many("notes", [{"changes": "fix: moved"}])

    async def drive() -> tuple[Any, int, Any]:
        await run.until_turn("writer")
        assert run.host is not None
        while (await run.presence_async()) != "parked":  # idle 1 s: it parks, and its host is pooled again
            await asyncio.sleep(0.2)
        before = (await client.stats_async())["asked"]
        receipt = await run.pick_async("writer", "done", {"notes": "too soon"}, "after-park")  # wakes it
        asked = (await client.stats_async())["asked"] - before
        return receipt, asked, await run.cancel_async()

    receipt, asked, ended = asyncio.run(drive())
    assert receipt.delivered and not receipt.moved
    assert asked == 1, f"the registry was asked {asked} times for one pick after the run moved"
    assert ended.status == "cancelled"


def test_a_watched_run_that_parks_leaves_no_host_in_its_handle(client: Client) -> None:
    """The host's answer to the watch says the run parked: the handle forgets that host, so its next write goes to
    the registry at once instead of first to a host that would answer NotHere."""
    (run,) = client.start_many("notes", [{"changes": "fix: watched"}])

    async def drive() -> tuple[bool, Any, Any]:
        await run.until_turn("writer")
        finished = asyncio.ensure_future(run.finished())  # keeps the run's watch open while it parks
        for _ in range(100):  # idle 1 s: it parks, and the open watch is answered with how it parked
            if run.host is None:
                break
            await asyncio.sleep(0.1)
        dropped = run.host is None
        receipt = await run.pick_async("writer", "done", {"notes": "too soon"}, "after-watched-park")
        ended = await run.cancel_async()
        await finished
        return dropped, receipt, ended

    dropped, receipt, ended = asyncio.run(drive())
    assert dropped, "the watch heard the run park, but the handle kept its old host"
    assert receipt.delivered and ended.status == "cancelled"


def test_the_api_reads_a_parked_run_without_waking_it(client: Client) -> None:
    """The API's read paths on a parked run: its view (GET /runs/{id}), a Turn's surface (the route too), the first
    status of its event stream, a Harness token's check, and its model telemetry (GET /runs/{id}/telemetry, which
    the Console asks for whenever a run's page opens), all from the store, with no activation; also when the API
    remembers the host that held the run while it was live (that host has let it go since)."""
    from starlette.requests import Request

    from serve.api.config import ApiConfig
    from serve.api.context import ApiContext
    from serve.api.routes.agents import surface as surface_route
    from serve.api.routes.runs import telemetry

    ctx = ApiContext(ApiConfig(home=os.environ["JR2RAY_HOME"], store=client.store.location, launcher="none"))
    ctx2 = ApiContext(ApiConfig(home=os.environ["JR2RAY_HOME"], store=client.store.location, launcher="none"))
    ctx3 = ApiContext(ApiConfig(home=os.environ["JR2RAY_HOME"], store=client.store.location, launcher="none"))
    (run,) = client.start_many("notes", [{"changes": "fix: read me"}])

    async def drive() -> tuple[Any, ...]:
        turn = await run.until_turn("writer")
        iid = next(t.iid for t in turn.status.turns if t.slot == "writer")
        for c in (ctx, ctx2, ctx3):  # read while live: these API replicas now remember the run's host
            await c.status(await c.actor(run.id))
            assert c.remembers(run.id)
        ask = run.pick_async("writer", "ask", {"question": "Which?"}, "ask-api")
        await run.until_gate(GATE)
        while (await run.presence_async()) != "parked":
            await asyncio.sleep(0.2)
        before = (await client.stats_async())["activations"]
        status = await ctx.parked_status(run.id)
        assert ctx.remembers(run.id)  # it read the store although this API still remembers a host for the run
        used = await telemetry(run.id, ctx3)  # asks the host it remembers, which has let the run go
        assert not ctx3.remembers(run.id)
        view = await ctx2.live_or_journal(run.id)  # asks the host it remembers, which has let the run go
        assert not ctx2.remembers(run.id)
        routed = await surface_route(iid, Request({"type": "http", "method": "GET", "path": "/", "headers": []}), ctx)
        assert not ctx.remembers(run.id)  # the route asked the host it remembered, which had let the run go
        got = (view, await ctx.parked_surface(run.id, iid), status, await ctx.turn_over(iid), used, routed)
        woke = (await client.stats_async())["activations"] - before
        still = await run.presence_async()
        await run.send_async(GATE, "reply", {"text": "t"}, "reply-api")
        await ask
        await run.pick_async("writer", "done", {"notes": "n"}, "done-api")
        return (*got, woke, still)

    view, surface, status, refused, used, routed, woke, still = asyncio.run(drive())
    assert woke == 0 and still == "parked"
    assert routed == surface
    assert used.rows == [] and used.turns == []  # no model was called (launcher none): the journal has no rows
    assert view.live is False and [g.id for g in view.gates] == [GATE] and "notes.writing.asking" in view.active
    assert surface is not None and surface.allowed == [] and not surface.turn_over and surface.menu
    assert status is not None and status.value == view.value
    assert refused is None  # the Turn is open: the Harness token still works


def test_a_harness_tokens_pick_for_its_ended_turn_on_a_parked_run_is_a_401_that_wakes_nothing(
        client: Client) -> None:
    """A deploy run whose operator Turn ended when it went to its approval Gate, parked there. Its Harness token's
    pick, through an API that remembers the host the run had: that host has let it go, so the API checks the Turn as
    the run parked (from the store) and answers 401, without waking the run or writing to its journal."""
    from starlette.requests import Request

    from serve.api.config import ApiConfig
    from serve.api.context import ApiContext
    from serve.api.refusals import TokenOver
    from serve.api.routes.agents import pick as pick_route
    from serve.api.schemas import Pick
    from serve.auth import Principal

    ctx = ApiContext(ApiConfig(home=os.environ["JR2RAY_HOME"], store=client.store.location, launcher="none"))
    (run,) = client.start_many("deploy", [{"log_path": "deploy.log", "deploy_seconds": 0.05, "cooldown_ms": 500}])

    async def drive() -> tuple[Any, ...]:
        turn = await run.until_turn("operator")
        iid = next(t.iid for t in turn.status.turns if t.slot == "operator")
        await ctx.status(await ctx.actor(run.id))
        assert ctx.remembers(run.id)
        await run.pick_async("operator", "deploy", {}, "deploy-1")
        await run.pick_async("operator", "submit", {}, "submit-1")
        await run.until_gate("approval")
        while (await run.presence_async()) != "parked":
            await asyncio.sleep(0.2)
        before, journal = (await client.stats_async())["activations"], journal_bytes(client.store.path(run.id))
        request = Request({"type": "http", "method": "POST", "path": "/", "headers": [],
                           "state": {"principal": Principal(kind="harness", iid=iid)}})
        with pytest.raises(TokenOver) as refused:
            await pick_route(iid, Pick(name="deploy", args={}, delivery_id="deploy-2"), request, ctx)
        woke = (await client.stats_async())["activations"] - before
        same = journal_bytes(client.store.path(run.id)) == journal
        still = await run.presence_async()
        await run.send_async("approval", "approve", {"by": "ops"}, "approve-1")
        return str(refused.value), woke, same, still, (await run.finished(timeout=120)).status

    detail, woke, same, still, final = asyncio.run(drive())
    assert "no longer works: its Turn has ended" in detail and (woke, same, still) == (0, True, "parked")
    assert final == "done"


def test_a_wait_after_a_send_sees_the_send_and_never_the_standing_from_before_it(client: Client) -> None:
    """A script waits for a Gate, answers it, and waits for that Gate again while another waiter (here `finished`)
    keeps the run's watch open: the second wait must not be answered by the standing from before the answer (the
    Gate was closed by it), or the script's next send finds no Gate."""
    (run,) = client.start_many("notes", [{"changes": "fix: twice"}])

    async def drive() -> tuple[list[str], list[str], str]:
        done = asyncio.ensure_future(run.finished(timeout=120))
        seen: list[str] = []
        for i in range(2):
            await run.until_turn("writer")
            run.pick_async("writer", "ask", {"question": f"q{i}?"}, f"ask-{i}")
            await run.until_gate(GATE, timeout=60)
            await run.send_async(GATE, "reply", {"text": f"a{i}"}, f"rep-{i}")
            try:  # nobody asked again: the Gate stays closed
                await run.until_gate(GATE, timeout=1.5)
                seen.append("open")
            except TimeoutError:
                seen.append("closed")
        open_now = [g.id for g in await run.gates_async()]
        await run.until_turn("writer")
        await run.pick_async("writer", "done", {"notes": "n"}, "done")
        return seen, open_now, (await done).status

    seen, open_now, final = asyncio.run(drive())
    assert seen == ["closed", "closed"] and open_now == [] and final == "done"
    assert _admissions(client, run.id) == ["ask", "reply", "ask", "reply", "done"]


def test_a_wait_on_a_run_that_has_ended_raises_run_ended_saying_so(client: Client) -> None:
    """`until_gate` and `until_turn` on a run that ended (here cancelled) raise `RunEnded` with its last status: the
    message says what the run is and what will not come, not that it ended before the Gate opened (it may have
    opened and been answered long before). The waits write nothing."""
    (run,) = client.start_many("notes", [{"changes": "fix: ended"}])
    assert run.cancel().status == "cancelled"
    until("the cancelled run to park", lambda: run.presence() == "parked")  # its park is its last write
    path = client.store.path(run.id)
    journal = journal_bytes(path)

    async def waits() -> list[jr2ray.RunEnded]:
        got = []
        for wait in (run.until_gate(GATE, timeout=60), run.until_turn("writer", timeout=60)):
            with pytest.raises(jr2ray.RunEnded) as exc:
                await wait
            got.append(exc.value)
        return got

    gate, turn = asyncio.run(waits())
    assert str(gate) == f"run {run.id} is cancelled, so Gate {GATE!r} will not open"
    assert str(turn) == f"run {run.id} is cancelled, so no Turn of seat 'writer' will be at Rest"
    assert gate.status.status == turn.status.status == "cancelled"
    assert journal_bytes(path) == journal


def test_a_refused_send_raises_the_runs_own_error_in_one_line_and_changes_nothing(client: Client) -> None:
    """A send to a Gate that is not open reaches the script as `UnknownGate` itself (its message one line, no
    remote traceback around it), and the journal is byte-identical before and after."""
    from jr2ray.run.errors import UnknownGate

    (run,) = client.start_many("notes", [{"changes": "fix: refused"}])
    asyncio.run(run.until_turn("writer"))
    before = journal_bytes(client.store.path(run.id))
    with pytest.raises(UnknownGate) as got:
        run.send(GATE, "reply", {"text": "nobody asked"}, "refused-1")
    assert type(got.value) is UnknownGate and len(str(got.value).splitlines()) == 1, str(got.value)
    assert str(got.value).endswith("(open now: none)")
    assert journal_bytes(client.store.path(run.id)) == before
    run.cancel()


def test_a_refused_reply_to_a_parked_run_wakes_nothing_and_writes_nothing(client: Client) -> None:
    """A reply to a Gate that is not open, sent to a parked run whose writer's `ask` waits parked: the run is not
    taken for it (the host that would adopt it checks the reply against the run as its journal left it first), so
    no activation, and the journal is byte-identical. Before, the run was woken, took a new lease (written), refused
    the reply and parked; and before that, its `ask` sent again woke it once every idle spell, for ever. The `ask`
    it took along waits parked again, and the right reply then carries it and finishes the run, each event
    admitted once."""
    from jr2ray.run.errors import UnknownGate

    (run,) = client.start_many("notes", [{"changes": "fix: refused while parked"}])

    async def drive() -> tuple[int, Any, bytes, bytes, str]:
        await run.until_turn("writer")
        ask = run.pick_async("writer", "ask", {"question": "Which?"}, "ask-r")
        await run.until_gate(GATE)
        while (await run.presence_async()) != "parked":
            await asyncio.sleep(0.2)
        before_bytes = journal_bytes(client.store.path(run.id))
        before = (await client.stats_async())["activations"]
        with pytest.raises(UnknownGate, match="open now: notes.writing.asking"):
            await run.send_async("notes.no.such.gate", "reply", {"text": "x"}, "wrong-1")
        await asyncio.sleep(3.0)  # three idle spells of 1 s
        woke = (await client.stats_async())["activations"] - before
        after_bytes = journal_bytes(client.store.path(run.id))
        presence = await run.presence_async()
        await run.send_async(GATE, "reply", {"text": "the first"}, "reply-r")
        assert (await ask).moved
        await run.pick_async("writer", "done", {"notes": "# N"}, "done-r")
        return woke, presence, before_bytes, after_bytes, (await run.finished()).value

    woke, presence, before_bytes, after_bytes, value = asyncio.run(drive())
    assert woke == 0 and presence == "parked", f"{woke} activations after one refused reply"
    assert after_bytes == before_bytes, "a refused reply changed the parked run's journal"
    assert value == "published" and _admissions(client, run.id) == ["ask", "reply", "done"]


def test_send_many_answers_every_gate_in_order_and_a_refused_one_in_its_place(client: Client) -> None:
    """One call sends a Gate event to each of many runs (live or parked) and gives their SendResults in order; a
    refused one is its own error in its place (`return_exceptions`) or raised once all have answered, its run's
    journal byte-identical, and every other event still applied once."""
    from jr2ray.run.errors import UnknownGate
    from jr2ray.testing import ScriptedAgent

    runs = client.start_many("notes", [{"changes": f"fix: many {i}"} for i in range(30)])
    (lonely,) = client.start_many("notes", [{"changes": "fix: nobody asked"}])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which?"}), ("done", {"notes": "# N"})])

    async def drive() -> tuple[list[Any], bytes, bytes, list[Any]]:
        played = [asyncio.ensure_future(writer.play_async(r)) for r in runs]
        await asyncio.gather(*(r.until_gate(GATE) for r in runs), lonely.until_turn("writer"))
        while (await lonely.presence_async()) != "parked":  # refused while parked: it is not even woken
            await asyncio.sleep(0.2)
        before = journal_bytes(client.store.path(lonely.id))
        sends = [(r, GATE, "reply", {"text": f"the first of {r.id}"}, f"many-{r.id}") for r in runs]
        got = await client.send_many_async([*sends[:15], (lonely, GATE, "reply", {"text": "x"}, "many-lonely"),
                                            *sends[15:]], return_exceptions=True)
        middle = journal_bytes(client.store.path(lonely.id))
        with pytest.raises(UnknownGate):
            await client.send_many_async([(lonely, GATE, "reply", {"text": "x"}, "many-lonely-2")])
        finals = await asyncio.gather(*(r.finished() for r in runs))
        await asyncio.gather(*played)
        return got, before, middle + journal_bytes(client.store.path(lonely.id)), finals

    got, before, after, finals = asyncio.run(drive())
    assert isinstance(got[15], UnknownGate) and len(got) == 31
    answered = got[:15] + got[16:]
    assert all(res.ok for res in answered), answered
    assert [res.delivery_id for res in answered] == [f"many-{r.id}" for r in runs]  # in the order sent
    assert after == before + before, "a refused Gate event changed its run's journal"
    assert [f.value for f in finals] == ["published"] * 30
    assert all(_admissions(client, r.id) == ["ask", "reply", "done"] for r in runs)
    assert client.send_many([]) == []
    lonely.cancel()


def test_until_gates_waits_on_every_run_with_no_task_per_run_on_the_callers_loop(client: Client) -> None:
    """`client.until_turns` and `client.until_gates` return once the Turn (the Gate) has opened on every run, and the
    caller's loop holds no task per run meanwhile (the wait is one, on the driver's own thread). A run that finished
    first is RunEnded, raised once the others have answered; a timeout gives up every watch. Waiting writes
    nothing."""
    from jr2ray.testing import ScriptedAgent

    runs = client.start_many("notes", [{"changes": f"fix: gates {i}"} for i in range(40)])
    (ended,) = client.start_many("notes", [{"changes": "fix: gone"}])
    ended.cancel()
    writer = ScriptedAgent("writer", [("ask", {"question": "Which?"})])

    def mine(t: asyncio.Task[Any]) -> bool:  # not a writer's own wait (each may wrap a hop in a task of its own)
        return t.get_coro().__qualname__ not in ("VirtualRunHandle._async", "ScriptedAgent.play_async")

    async def watches_end(hs: list[Any]) -> bool:
        for _ in range(600):
            if not any(h.watched for h in hs):
                return True
            await asyncio.sleep(0.05)
        return False

    async def drive() -> tuple[int, int, list[Any], BaseException, BaseException, bool, bytes]:
        await client.until_turns(runs, "writer", timeout=120)
        played = await jr2ray.create_tasks(writer.play_async(r) for r in runs)
        most = before = sum(map(mine, asyncio.all_tasks()))
        waiting = asyncio.ensure_future(client.until_gates(runs, GATE, timeout=120))
        while not waiting.done():
            most = max(most, sum(map(mine, asyncio.all_tasks())))
            await asyncio.sleep(0.005)
        await waiting
        gates = [await r.gates_async() for r in runs]
        for _ in range(600):  # parked first: a park writes (and closes) the journal, which is not the waits' doing
            if await runs[0].presence_async() == "parked":
                break
            await asyncio.sleep(0.05)
        journal = journal_bytes(client.store.path(runs[0].id))
        with pytest.raises(jr2ray.RunEnded) as gone:
            await client.until_gates([*runs[:5], ended, *runs[5:10]], GATE, timeout=60)
        for p in played:  # each writer waits on for a Turn its script has no step for
            p.cancel()
        assert await watches_end(runs)
        with pytest.raises(TimeoutError) as late:
            await client.until_gates(runs, "notes.never.open", timeout=1.0)
        given_up = await watches_end(runs)  # on this loop, before asyncio.run cancels what is left
        return (before, most, gates, gone.value, late.value, given_up,
                journal + journal_bytes(client.store.path(runs[0].id)))

    before, most, gates, gone, late, given_up, journals = asyncio.run(drive())
    assert most <= before + 2, (before, most)  # the old way, a gather of until_gate, added one task per run: 40
    assert all(GATE in [g.id for g in gs] for gs in gates)
    assert str(gone) == f"run {ended.id} is cancelled, so Gate {GATE!r} will not open"
    assert isinstance(late, TimeoutError)
    assert given_up, "a watch outlived the wait that timed out"
    assert journals[:len(journals) // 2] == journals[len(journals) // 2:]  # the waits wrote nothing
    for r in [*runs, ended]:
        r.cancel()


def test_wait_async_gives_finished_and_not_yet_at_its_timeout_and_stops_watching(client: Client) -> None:
    """`wait_async` over virtual runs: at its timeout, the finished runs (their `final` set) and the others, whose
    watches it gives up."""
    runs = client.start_many("notes", [{"changes": f"fix: wait {i}"} for i in range(6)])
    for r in runs[:2]:
        r.cancel()

    async def drive() -> tuple[list[Any], list[Any], bool]:
        done, left = await client.wait_async([client.handle(r.id) for r in runs], timeout=2.0)
        for _ in range(600):  # on this loop, before asyncio.run cancels what is left
            if not any(h.watched for h in left):
                return done, left, True
            await asyncio.sleep(0.05)
        return done, left, False

    done, left, given_up = asyncio.run(drive())
    assert sorted(h.id for h in done) == sorted(r.id for r in runs[:2])
    assert [h.final.status for h in done] == ["cancelled", "cancelled"]
    assert sorted(h.id for h in left) == sorted(r.id for r in runs[2:]) and all(h.final is None for h in left)
    assert given_up, "a watch outlived the wait that timed out"
    for r in runs[2:]:
        r.cancel()


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal, and keeps what was drawn on it."""

    def isatty(self) -> bool:
        return True


def test_progress_bars_count_by_status_on_a_terminal_and_draw_nothing_elsewhere(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """`progress=True` draws a bar on stderr when it is a terminal: the starts journaled, then the runs finished,
    counted by final status, from `wait`, `as_finished` and their async twins. Into a log or a pipe, nothing."""
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    runs = client.start_many("notes", [{"changes": f"fix: bar {i}"} for i in range(3)], progress=True)
    started = tty.getvalue()
    for r in runs:
        r.cancel()
    drawn: dict[str, str] = {}
    for name, call in (("wait", lambda hs: client.wait(hs, progress=True)),
                       ("as_finished", lambda hs: list(client.as_finished(hs, progress=True))),
                       ("wait_async", lambda hs: asyncio.run(client.wait_async(hs, progress=True))),
                       ("as_finished_async", lambda hs: asyncio.run(_collect(client.as_finished_async(hs, True))))):
        tty.seek(0)
        tty.truncate()
        call([client.handle(r.id) for r in runs])  # fresh handles: each call hears every run finish itself
        drawn[name] = tty.getvalue()
    assert "3/3" in started and "journaled 3" in started
    for name, text in drawn.items():
        assert "3/3" in text and "cancelled 3" in text, (name, text)

    piped = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", piped)
    more = client.start_many("notes", [{"changes": "fix: no bar"}], progress=True)
    more[0].cancel()
    client.wait(more, progress=True)
    asyncio.run(client.wait_async(more, progress=True))
    assert piped.getvalue() == ""


async def _collect(it: Any) -> list[Any]:
    return [x async for x in it]


def test_a_burst_after_the_pool_is_warm_starts_no_host_process(client: Client) -> None:
    """`up` (here `warm_pool`, what it calls in the background) fills the host pool; a burst of four times as many
    runs as there are live slots then takes pooled hosts only: no new process is started for it."""
    client.warm_pool()
    before = client.stats()
    runs = client.start_many("notes", [{"changes": f"fix: burst {i}"} for i in range(4 * before["max_live"])])

    async def drive() -> list[Any]:
        got = await asyncio.gather(*(r.until_turn("writer", timeout=120) for r in runs))
        await asyncio.gather(*(r.cancel_async() for r in runs))
        return got

    at_turn = asyncio.run(drive())
    after = client.stats()
    assert len(at_turn) == len(runs) and after["activations"] - before["activations"] >= len(runs)
    assert after["started_hosts"] == before["started_hosts"], (before, after)
    assert after["peak_live"] <= after["max_live"]


def test_an_api_pick_on_a_live_run_is_one_host_call_with_no_store_read(client: Client,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The API keeps the host that holds a run, as a driver's handle does: once it has called the run, a pick on
    it reads nothing from the store and asks nothing of the registry (one Ray call, to the host)."""
    from starlette.requests import Request

    from serve.api.config import ApiConfig
    from serve.api.context import ApiContext
    from serve.api.routes.agents import pick as pick_route
    from serve.api.schemas import Pick

    ctx = ApiContext(ApiConfig(home=os.environ["JR2RAY_HOME"], store=client.store.location, launcher="none"))
    (run,) = client.start_many("notes", [{"changes": "fix: pick through the API"}])
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []})
    too_soon = {"notes": "too soon"}  # refused by the writer's guard: delivered, the run stays where it is

    async def drive() -> tuple[Any, ...]:
        turn = await run.until_turn("writer")
        iid = next(t.iid for t in turn.status.turns if t.slot == "writer")
        first = await pick_route(iid, Pick(name="done", args=too_soon, delivery_id="api-1"), request, ctx)
        store = ctx.client().store
        reads: list[str] = []
        for name in ("exists", "listing", "standing", "open", "indexed"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, lambda *a, _n=name, _r=real, **k: reads.append(_n) or _r(*a, **k))
        asked = (await client.stats_async())["asked"]
        second = await pick_route(iid, Pick(name="done", args=too_soon, delivery_id="api-2"), request, ctx)
        asked_again = (await client.stats_async())["asked"]
        monkeypatch.undo()
        await run.cancel_async()
        return first, second, reads, asked_again - asked

    first, second, reads, asked = asyncio.run(drive())
    assert first.delivered and not first.moved and second.delivered and not second.moved
    assert reads == [] and asked == 0, (reads, asked)


def test_a_wait_opened_while_the_replies_are_on_their_way_asks_no_host_afresh(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Gate answered at once and then every run waited on, as a script does (the waits open while most
    replies are still on their way, queued for a slot): each writer's next wait, its Turn at Rest, is answered from
    the standing its reply's answer carried, and the driver never asks a host how a run stands with a look of its
    own (`watch` with no wait). A reply sent before its run's watch opened came back with no standing, so the watch
    went stale and the writer's wait asked the host afresh: one more host call in 963 of 1,000 wakes at N=1,000."""
    from jr2ray.run import wire
    from jr2ray.testing import ScriptedAgent

    looks: list[str] = []
    send = wire.send

    def counted(host: Any, run_id: str, method: str, args: list[Any], *rest: Any, **kw: Any) -> Any:
        if method == "watch" and args[2] == 0.0:
            looks.append(run_id)
        return send(host, run_id, method, args, *rest, **kw)

    runs = client.start_many("notes", [{"changes": f"fix: wake {i}"} for i in range(30)])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which?"}), ("done", {"notes": "# Notes"})])

    async def drive() -> tuple[list[Any], list[Any], list[Any]]:
        played = await jr2ray.create_tasks(writer.play_async(r) for r in runs)
        await client.until_gates(runs, GATE, timeout=120)
        ids = {r.id for r in runs}
        for _ in range(600):  # every run parked at its Gate: each reply is a wake, 10 live at a time
            if not ids & set((await client.stats_async())["live"]):
                break
            await asyncio.sleep(0.1)
        assert not ids & set((await client.stats_async())["live"]), "a run did not park at its Gate"
        monkeypatch.setattr(wire, "send", counted)
        sent = asyncio.ensure_future(client.send_many_async(
            (r, GATE, "reply", {"text": "the first"}, f"w-{r.id}") for r in runs))
        _finished, unfinished = await client.wait_async(runs, timeout=180)
        return await sent, [await p for p in played], unfinished

    replied, receipts, unfinished = asyncio.run(drive())
    assert all(r.ok for r in replied) and not unfinished
    assert all(len(rs) == 2 for rs in receipts)
    assert [_admissions(client, r.id) for r in runs] == [["ask", "reply", "done"]] * len(runs)
    ours = {r.id for r in runs}
    mine = [r for r in looks if r in ours]
    # Before, every wake took one. One may still come, rarely: the watch's own answer, from after the reply, can
    # be handled before the reply's, and the reply then leaves the watch stale.
    assert len(mine) <= len(runs) // 10, f"{len(mine)} looks in {len(runs)} wakes: {mine}"
