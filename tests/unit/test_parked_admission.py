"""A run parked while its Turn waits for Turn admission (issue 25, item 2), piece by piece without Ray: the Harness
tells its Run it waits, the budget actor keeps a parked run's ask and wakes the run once it is granted, the journal
marks the Turn parked, and the Harness the run's restore starts sends its request as it was, with no notice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from test_harness_fakes import FakeProvider, Port, pick, spec
from test_harness_resume import JournalPort

from jr2ray import LocalRun, agent, define_event, jr2_setup
from jr2ray.harness import Conversation, Message
from jr2ray.harness.admission import AdmissionGrant
from jr2ray.harness.budget_actor import KvBudgetActorImpl
from jr2ray.harness.providers import ProviderConfig, ProviderRegistry
from jr2ray.harness.turn import WAIT_NOTICE_S
from jr2ray.menu import texts
from jr2ray.run.models import Transcript, TranscriptEntry
from jr2ray.run.store import Store


class Registry:
    """Stands in for the run registry's handle: records the runs the budget wakes (`activate.remote`)."""

    def __init__(self) -> None:
        self.woken: list[str] = []
        self.activate = self

    async def _activate(self, run_id: str) -> list[Any]:
        self.woken.append(run_id)
        return [None]

    def remote(self, run_id: str) -> Any:
        return self._activate(run_id)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _parked(cancel: bool) -> tuple[KvBudgetActorImpl, Registry, asyncio.Future[Any]]:
    """A budget full of another run's share, and conversation `conv` asking for room, its run `run-1` parked and
    its ask handed over. `cancel`: its Harness's call is cancelled as it ends (Ray may do that, or let it run on)."""
    actor = KvBudgetActorImpl([100])
    await actor.admit("other run", 80)
    registry = Registry()
    ask = asyncio.ensure_future(actor.admit("conv", 50))  # its Harness's ask: it does not fit
    await _settle()
    assert await actor.park("conv", "run-1", registry) is True
    if cancel:
        ask.cancel()
        await _settle()
    return actor, registry, ask


async def test_a_parked_runs_ask_keeps_its_place_and_wakes_the_run_when_granted() -> None:
    actor, registry, _ = await _parked(cancel=True)
    assert (await actor.stats())["parked"] == ["conv"] and (await actor.stats())["waiting"] == ["conv"]
    await asyncio.sleep(0.05)
    assert registry.woken == []  # not before its share is granted
    await actor.release("other run")
    await _settle()
    assert registry.woken == ["run-1"]
    stats = await actor.stats()
    assert stats["held"] == {"conv": 50} and stats["parked"] == [] and stats["woken"] == 1
    # The run's restore starts the Turn's Harness again: its ask finds the share held, and counts the whole wait.
    grant = AdmissionGrant.model_validate(await actor.admit("conv", 50))
    assert grant.waited and grant.waited_s >= 0.05
    assert registry.woken == ["run-1"]  # woken once


async def test_a_parked_ask_whose_call_runs_on_is_granted_once_and_wakes_the_run() -> None:
    actor, registry, ask = await _parked(cancel=False)
    await actor.release("other run")
    await _settle()
    assert ask.done() and registry.woken == ["run-1"]  # the grant went to the gone Harness, and the run was woken
    assert (await actor.stats())["held"] == {"conv": 50}


async def test_a_park_that_crosses_the_grant_wakes_the_run_at_once() -> None:
    actor = KvBudgetActorImpl([100])
    registry = Registry()
    await actor.admit("conv", 50)  # let in as the run was deciding to park
    assert await actor.park("conv", "run-1", registry) is False
    await _settle()
    assert registry.woken == ["run-1"] and (await actor.stats())["held"] == {"conv": 50}


async def test_a_parked_run_woken_for_something_else_asks_itself_and_is_not_woken_again() -> None:
    actor, registry, _ = await _parked(cancel=True)
    again = asyncio.ensure_future(actor.admit("conv", 50))  # a Gate event woke the run: its new Harness asks
    await _settle()
    assert (await actor.stats())["parked"] == [] and (await actor.stats())["waiting"] == ["conv"]
    await actor.release("other run")
    grant = AdmissionGrant.model_validate(await again)
    assert grant.waited and registry.woken == []


class Gated:
    """An `Admission` that lets a request in only when `open` is set, and counts the asks."""

    def __init__(self, at_once: bool) -> None:
        self.open = asyncio.Event()
        if at_once:
            self.open.set()
        self.asks: list[str] = []

    async def admit(self, key: str, need_tokens: int, kind: str | None = None) -> AdmissionGrant:
        self.asks.append(key)
        await self.open.wait()
        return AdmissionGrant(need_tokens=need_tokens, waited_s=0.0, waited=False, capacity_tokens=10**6)

    async def release(self, key: str, after_s: float = 0.0) -> None:
        pass


def _conversation(port: Port, provider: FakeProvider, admission: Gated) -> Conversation:
    registry = ProviderRegistry(ProviderConfig(), providers={provider.kind: provider})
    return Conversation(port, providers=registry, admission=admission)


async def test_a_turn_tells_its_run_while_it_waits_for_admission_and_not_when_let_in_at_once() -> None:
    class Recording(Port):
        def __init__(self) -> None:
            super().__init__()
            self.told: list[tuple[str, str | None]] = []

        async def waits(self, iid: str, key: str | None) -> None:
            self.told.append((iid, key))

    port = Recording()
    gate = Gated(at_once=True)
    await _conversation(port, FakeProvider(pick(("done", {}))), gate).run_turn(spec())
    assert gate.asks and port.told == []  # let in at once: the run hears nothing

    port = Recording()
    gate = Gated(at_once=False)
    provider = FakeProvider(pick(("done", {})))
    turn = asyncio.ensure_future(_conversation(port, provider, gate).run_turn(spec()))
    await asyncio.sleep(WAIT_NOTICE_S * 3)
    iid = spec().iid
    assert port.told == [(iid, gate.asks[0])] and provider.requests == []  # it waits, and its run knows under what
    gate.open.set()
    assert (await turn).outcome == "complete"
    assert port.told == [(iid, gate.asks[0]), (iid, None)]  # let in: its run may not park it now


async def test_a_turn_whose_run_parked_while_it_waited_sends_its_request_as_it_was_with_no_notice() -> None:
    """The journal holds the messages of a Turn that waited for admission when its run parked: the Harness the
    restore starts sends exactly them, and no restart notice (the model reads nothing of the wait)."""

    class ParkedPort(JournalPort):
        async def transcript(self, iid: str) -> Transcript:
            return (await super().transcript(iid)).model_copy(update={"parked": True})

    port = ParkedPort()
    s = spec()
    first = Conversation(port, providers=ProviderRegistry(ProviderConfig(), providers={}))
    first.sync.new_turn()
    first.messages = [Message(role="user", content=texts.turn_part(s.prompt, ["ask", "done"]))]
    await first.sync.sync(port, s.iid, first.messages)
    journaled = list(port.log.messages)
    provider = FakeProvider(pick(("done", {})))
    again = Conversation(port, providers=ProviderRegistry(ProviderConfig(), providers={provider.kind: provider}))
    assert (await again.run_turn(s)).outcome == "complete"
    assert [m.model_dump_json() for m in provider.requests[0].messages] == journaled


class Done(BaseModel):
    pass


def _workflow() -> Any:
    done = define_event(name="done", description="Say it.", input=Done)
    return jr2_setup(events=[done], actors={"w": agent(model="local/m", instructions="Talk.")}).create_machine(
        {"id": "parked_mark", "initial": "talking", "states": {
            "talking": {"invoke": {"src": "w", "input": {"prompt": "Go."}}, "on": {"done": "over"}},
            "over": {"type": "final"}}})


async def test_the_run_journals_a_parked_wait_and_a_later_answer_clears_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    run = LocalRun(_workflow(), store=store, run_id="r1")
    await asyncio.sleep(0)
    (turn,) = [t for t in run.engine.turns.values() if t.active]
    run.engine.record_transcript(turn.iid, TranscriptEntry(seq=0, at=0, messages=['{"role": "user"}']))
    run.engine.turn_waits(turn.iid, "key-1")
    assert turn.waits_for == "key-1"
    assert not run.engine.transcript(turn.iid).parked
    run.engine.transcripts_part.mark_parked(turn.iid)
    assert run.engine.transcript(turn.iid).parked
    # What a host's restore reads back from the journal.
    run.engine.journal.close()
    reread = LocalRun(_workflow(), store=store, run_id="r1")
    await asyncio.sleep(0)
    back = reread.engine.transcript(turn.iid)
    assert back.parked and back.messages == ['{"role": "user"}'] and back.recorded == 1
    reread.engine.record_transcript(turn.iid, TranscriptEntry(seq=1, at=1, messages=['{"role": "assistant"}']))
    assert not reread.engine.transcript(turn.iid).parked  # it went on from there
