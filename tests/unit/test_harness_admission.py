"""Turn admission in the turn loop (issue 25, items 2 and 4): a Turn that does not fit in the KV budget beside
another live conversation waits until that one's Turn ends; the wait is in its telemetry row; the model reads the
very same bytes as without admission."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field
from test_harness_fakes import Port, spec

from jr2ray import LocalRun, agent, define_event, jr2_setup
from jr2ray.cli import main
from jr2ray.harness import Conversation, ModelAnswer, ModelRequest, ToolCall, TurnSpec
from jr2ray.harness.admission import KvBudget, budget_from_settings
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.harness.providers import OpenAICompatProvider, ProviderConfig, ProviderRegistry
from jr2ray.harness.telemetry import RequestTelemetry
from jr2ray.menu.models import Receipt
from jr2ray.run.store import Store
from jr2ray.run.store.base import LedgerKind
from jr2ray.settings import load_settings

GROWTH = 10_000
CAPACITY = 15_000  # one conversation (its prompt plus GROWTH) fits, two do not


def reply(name: str, call_id: str) -> dict[str, Any]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}],
        }}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105},
    }


class Wire:
    """The HTTP the model server receives: every request's body bytes and headers, per conversation (session)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.counts: dict[str, int] = {}

    def __call__(self, req: httpx.Request) -> httpx.Response:
        session = req.headers.get("x-session-id", "?")
        n = self.counts[session] = self.counts.get(session, 0) + 1
        self.sent.append((session, bytes(req.content), dict(req.headers)))
        return httpx.Response(200, json=reply("ask" if n == 1 else "done", f"{session}-{n}"))


class SlowPort(Port):
    """`ask` is answered only when `release` is set: its Turn stays live (and holds its share) until then."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        if name == "ask":
            await self.release.wait()
        return await super().pick(iid, name, args, delivery_id)


def conversation(wire: Wire, budget: KvBudget | None, rows: list[RequestTelemetry],
                 release_s: float = 60.0) -> Conversation:
    """`release_s`: how long a pending pick keeps its share (long here, unless a test is about giving it back)."""
    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(wire)))
    registry = ProviderRegistry(ProviderConfig(), providers={"local": OpenAICompatProvider(client=client)})
    return Conversation(providers=registry, admission=budget, admission_growth=GROWTH, on_telemetry=rows.append,
                        admission_release_s=release_s)


async def until(check: Any, timeout_s: float = 10.0) -> None:
    """Poll until `check()` holds (a loaded box is slow; a fixed sleep would be a race)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def turn(run: str) -> TurnSpec:
    return spec(run_id=run, iid=f"{run}/w")


async def test_a_turn_that_does_not_fit_waits_for_the_other_turn_to_end() -> None:
    wire, budget, rows = Wire(), KvBudget(CAPACITY), []
    first, second = conversation(wire, budget, rows), conversation(wire, budget, rows)
    port_a = SlowPort()
    a = asyncio.create_task(first.run_turn(turn("a"), port_a))
    await until(lambda: len(wire.sent) >= 1)
    b = asyncio.create_task(second.run_turn(turn("b"), Port()))
    await until(lambda: budget.waiting == ["b/w"])
    await asyncio.sleep(0.2)
    assert [s for s, _, _ in wire.sent] == ["a/w"]  # b's first request has not been sent: it waits for room
    assert budget.waiting == ["b/w"] and list(budget.held) == ["a/w"]
    port_a.release.set()
    ra, rb = await asyncio.wait_for(asyncio.gather(a, b), 10)
    assert ra.outcome == rb.outcome == "complete"
    assert [s for s, _, _ in wire.sent] == ["a/w", "a/w", "b/w", "b/w"]
    assert budget.held == {} and budget.high_water <= CAPACITY  # both Turns ended: both shares are back

    by_run = {(r.run_id, r.step): r for r in rows}
    assert by_run[("b", 1)].kv_wait_s is not None and by_run[("b", 1)].kv_wait_s >= 0.2
    assert by_run[("a", 1)].kv_wait_s is not None and by_run[("a", 1)].kv_wait_s < 0.2
    assert by_run[("b", 2)].kv_wait_s is not None and by_run[("b", 2)].kv_wait_s < 0.2  # holds
    # the last prompt, what was appended since (the answer, the receipt) at the last request's bytes per token, and
    # the growth
    appended = by_run[("b", 2)].kv_tokens - (100 + GROWTH)
    assert 0 < appended < 100
    assert by_run[("b", 1)].latency_s < by_run[("b", 1)].kv_wait_s  # the wait is not model latency


async def test_a_pick_waiting_on_a_gate_gives_the_share_back_and_asks_again_after() -> None:
    """`ask` opens a Gate: its receipt waits for a person. After `admission_release_s` the conversation holds nothing,
    so another run's Turn goes ahead; when the receipt comes, the next request asks for its share again and waits
    for it like any other conversation."""
    wire, budget, rows = Wire(), KvBudget(CAPACITY), []
    first, second = conversation(wire, budget, rows, release_s=0.1), conversation(wire, budget, rows)
    port_a, port_b = SlowPort(), SlowPort()
    a = asyncio.create_task(first.run_turn(turn("a"), port_a))
    await until(lambda: len(wire.sent) >= 1)
    b = asyncio.create_task(second.run_turn(turn("b"), port_b))
    await until(lambda: [s for s, _, _ in wire.sent] == ["a/w", "b/w"])  # a's Gate wait let b in
    assert list(budget.held) == ["b/w"]  # b's ask waits on its own Gate, with the long release: it holds
    port_a.release.set()  # the person answers a's Gate: a's next request must wait for b's share
    await until(lambda: budget.waiting == ["a/w"])
    assert [s for s, _, _ in wire.sent] == ["a/w", "b/w"]
    port_b.release.set()
    ra, rb = await asyncio.wait_for(asyncio.gather(a, b), 10)
    assert ra.outcome == rb.outcome == "complete"
    assert [s for s, _, _ in wire.sent] == ["a/w", "b/w", "b/w", "a/w"]
    assert budget.held == {} and budget.high_water <= CAPACITY and budget.peak_holders == 1
    by_run = {(r.run_id, r.step): r for r in rows}
    assert by_run[("a", 2)].kv_wait_s is not None and by_run[("a", 2)].kv_wait_s > 0


async def test_a_continued_conversation_keeps_its_share_a_moment_after_its_turn_ends() -> None:
    """A `continue` seat's next Turn may open at once (the chart moves on to another state that invokes it): its
    share lingers for `admission_release_s`, and a Turn of the same conversation within it goes on holding; a fresh
    conversation's Turn gives its share back at once."""
    wire, budget, rows = Wire(), KvBudget(CAPACITY), []
    conv = conversation(wire, budget, rows, release_s=0.3)
    cont = spec(run_id="c", iid="c/w1", **{"continue": True})
    assert (await asyncio.wait_for(conv.run_turn(cont, Port()), 10)).outcome == "complete"
    assert list(budget.held) == ["c:w"]  # the Turn ended; its share lingers
    other = asyncio.create_task(conversation(wire, budget, rows).run_turn(turn("o"), Port()))
    await until(lambda: budget.waiting == ["o/w"])
    again = spec(run_id="c", iid="c/w2", **{"continue": True})
    assert (await asyncio.wait_for(conv.run_turn(again, Port()), 10)).outcome == "complete"
    waits = [r.kv_wait_s for r in rows if r.run_id == "c"]
    assert len(waits) == 3 and all(w is not None and w < 0.2 for w in waits)  # two requests, then one: no wait
    assert not other.done()  # the same conversation came back in time: the other still waits
    assert (await asyncio.wait_for(other, 10)).outcome == "complete"  # ... until the linger ran out
    assert budget.held == {}  # the fresh conversation gave its share back as its Turn ended


async def test_the_model_reads_the_same_bytes_with_and_without_admission() -> None:
    """The wait leaves no trace in what is sent: body bytes equal, and no header or text speaks of it."""

    async def run(budget: KvBudget | None) -> list[tuple[str, bytes, dict[str, str]]]:
        wire, rows = Wire(), []
        blocker = asyncio.create_task(budget.admit("other", CAPACITY - 1)) if budget is not None else None
        task = asyncio.create_task(conversation(wire, budget, rows).run_turn(turn("b"), Port()))
        if budget is not None:
            assert blocker is not None
            await blocker
            await until(lambda: budget.waiting == ["b/w"])
            assert wire.sent == [] and budget.waiting == ["b/w"]  # it did wait
            await budget.release("other")
        assert (await asyncio.wait_for(task, 10)).outcome == "complete"
        assert all((r.kv_wait_s is None) == (budget is None) for r in rows)
        return wire.sent

    with_admission, without = await run(KvBudget(CAPACITY)), await run(None)
    assert [body for _, body, _ in with_admission] == [body for _, body, _ in without]
    assert [sorted(h) for _, _, h in with_admission] == [sorted(h) for _, _, h in without]
    for _, body, headers in with_admission:
        assert b"admission" not in body.lower() and b"wait" not in body.lower()
        assert not any("admission" in k.lower() for k in headers)
        assert json.loads(body)["messages"]  # a real chat request


async def test_a_turn_resting_on_an_empty_allowed_list_gives_its_share_back() -> None:
    """The model stopped with nothing to pick (the run waits on a Gate or an Effect): the Turn rests, holding
    nothing, so another conversation goes ahead; when a pick opens it asks again."""
    wire, budget, rows = Wire(), KvBudget(CAPACITY), []
    port = Port(allowed=[])

    def stop_answer(req: httpx.Request) -> httpx.Response:
        session = req.headers.get("x-session-id", "?")
        if session == "a/w" and wire.counts.get("a/w", 0) == 0:
            wire.counts["a/w"] = 1
            wire.sent.append((session, bytes(req.content), dict(req.headers)))
            return httpx.Response(200, json={
                "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}})
        return wire(req)

    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(stop_answer)))
    registry = ProviderRegistry(ProviderConfig(), providers={"local": OpenAICompatProvider(client=client)})
    first = Conversation(providers=registry, admission=budget, admission_growth=GROWTH, on_telemetry=rows.append)
    first.limits.wake_poll_s = 0.02
    a = asyncio.create_task(first.run_turn(turn("a"), port))
    await until(lambda: wire.counts.get("a/w") == 1 and port.reads >= 3)  # answered without a pick, resting
    assert budget.held == {}  # resting: nothing held
    b = await asyncio.wait_for(conversation(wire, budget, rows).run_turn(turn("b"), Port()), 10)
    assert b.outcome == "complete"
    port.allowed = ["ask", "done"]
    assert (await asyncio.wait_for(a, 10)).outcome == "complete"
    assert budget.held == {}


class Done(BaseModel):
    note: str = Field(description="What you have to say.")


class DoneProvider:
    """Picks `done` at once, and keeps every request it was sent."""

    kind = "local"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        self.requests.append(request)
        return ModelAnswer(tool_calls=[ToolCall(id="d1", name="done", arguments='{"note": "n"}')],
                           prompt_tokens=50, cached_tokens=0)


async def test_the_wait_is_in_the_journal_and_the_runs_events(tmp_path: Path) -> None:
    """A run's Turn that waited for admission: its telemetry row, as journaled and as the run's feed shows it, says
    how long; the Turn's transcript (what the model read) has no word of it."""
    done = define_event(name="done", description="Say it.", input=Done)
    wf = jr2_setup(events=[done], actors={"w": agent(model="local/m", instructions="Talk.")}).create_machine(
        {"id": "one", "initial": "talking", "states": {
            "talking": {"invoke": {"src": "w", "input": {"prompt": "Go."}}, "on": {"done": "over"}},
            "over": {"type": "final"}}})
    budget = KvBudget(CAPACITY)
    await budget.admit("another run", CAPACITY)  # the replica's cache is full of another conversation
    provider = DoneProvider()
    launcher = LocalTurnLauncher(providers=ProviderRegistry(ProviderConfig(), providers={"local": provider}),
                                 admission=budget, admission_growth=GROWTH)
    store = Store(tmp_path / "runs")
    run = LocalRun(wf, store=store, launcher=launcher)
    await until(lambda: len(budget.waiting) == 1)
    await asyncio.sleep(0.3)
    assert provider.requests == []
    await budget.release("another run")
    assert (await run.wait(10)).status == "done"
    [row] = [e.data for e in store.open(run.id).ledger(LedgerKind.TELEMETRY)]
    assert row["kv_wait_s"] >= 0.3 and row["kv_tokens"] > GROWTH
    [event] = [e for e in run.history() if e["kind"] == "telemetry"]
    assert event["data"]["kv_wait_s"] == row["kv_wait_s"]
    [request] = provider.requests
    assert not any("admission" in (m.content or "").lower() or "wait" in (m.content or "").lower()
                   for m in request.messages)
    await launcher.settle(10)  # the Turn's task has ended (the run may report `done` a step before)
    assert budget.held == {}  # the Turn ended: its share is back


def test_the_settings_switch_it_on_and_jr2ray_settings_shows_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for env in ("JR2RAY_TURN_ADMISSION", "JR2RAY_TURN_ADMISSION_GROWTH", "JR2RAY_TURN_ADMISSION_PATIENCE_S"):
        monkeypatch.delenv(env, raising=False)
    off = load_settings()
    assert budget_from_settings(off, 1280) is None  # off by default: vLLM's own scheduling, as before
    assert LocalTurnLauncher.with_admission(off, None, config=ProviderConfig()).admission is None
    monkeypatch.setenv("JR2RAY_TURN_ADMISSION", "1")
    monkeypatch.setenv("JR2RAY_TURN_ADMISSION_GROWTH", "300")
    on = load_settings()
    launcher = LocalTurnLauncher.with_admission(on, 1280, config=ProviderConfig())
    assert isinstance(launcher.admission, KvBudget) and launcher.admission.capacity == 1280
    assert launcher.admission_growth == 300
    with pytest.raises(ValueError, match="no KV capacity was read from vLLM"):
        budget_from_settings(on, None)  # never a guessed capacity
    assert main(["--home", str(tmp_path), "settings", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["turn_admission"]["env"] == "JR2RAY_TURN_ADMISSION" and rows["turn_admission"]["value"] is True
    assert rows["turn_admission_growth"]["source"] == "environment JR2RAY_TURN_ADMISSION_GROWTH"
    assert rows["turn_admission_patience_s"]["value"] == 30.0


async def test_a_conversation_placed_on_a_replica_says_so_in_its_session_header_and_nowhere_the_model_reads() -> None:
    """Two replicas, each holding one conversation: the second goes to the other replica, and the router (which
    reads only the session id) is told so; the request bodies are the very bytes a one-replica budget sends."""
    from jr2ray.harness.replicas import ReplicaBudgets, placed_replica

    wire, rows = Wire(), []
    budgets = ReplicaBudgets([CAPACITY, CAPACITY])
    first, second = conversation(wire, budgets, rows), conversation(wire, budgets, rows)  # type: ignore[arg-type]
    port_a = SlowPort()
    a = asyncio.create_task(first.run_turn(turn("a"), port_a))
    await until(lambda: len(wire.sent) >= 1)
    b = asyncio.create_task(second.run_turn(turn("b"), Port()))
    await until(lambda: len(wire.sent) >= 3)  # b did not wait for a: it had a replica of its own
    port_a.release.set()
    await asyncio.wait_for(asyncio.gather(a, b), 10)
    sessions = [s for s, _, _ in wire.sent]
    where = {s.split("#")[0]: placed_replica(s) for s in sessions}
    assert where == {"a/w": 0, "b/w": 1}
    assert sorted(sessions) == sorted(["a/w#replica=0"] * 2 + ["b/w#replica=1"] * 2)  # each stayed where placed

    alone, alone_rows = Wire(), []
    solo = conversation(alone, KvBudget(CAPACITY), alone_rows)
    await solo.run_turn(turn("b"), Port())
    # the fake server names its tool calls after the session header: that echo is the only difference
    placed = [body.replace(b"#replica=1", b"") for s, body, _ in wire.sent if s.startswith("b/w")]
    assert placed == [body for _, body, _ in alone.sent]
