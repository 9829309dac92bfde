"""Trace sampling is by run: the SDK's sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) decides at a run's
root, and every other span of the run (steps, its Turn, a pick, a Gate event, an Effect, the Harness's model
requests under the Turn's traceparent) follows it: a run's spans are all kept or all dropped. Also the batch the
spans are made in (`trace_batch`): a span record becomes the SDK span it names, with its ids, parent and times."""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jr2ray.run import tracing
from jr2ray.run.batcher import Batcher, holding

RUNS = 40


class FakeRun:
    """What the tracing hooks read of an engine: its origin (with the root's traceparent), id and workflow."""

    def __init__(self, run_id: str) -> None:
        self.run_id, self.workflow_name = run_id, "notes"
        self.origin = tracing.rooted({}, run_id, "notes")

    @tracing.traced_pick
    async def pick(self, address: str, name: str, args: Any, delivery_id: str | None = None) -> Any:
        tracing.step_begin(self, SimpleNamespace(type=name))
        tracing.step_end(self)
        return SimpleNamespace(refused=None, moved=True)


async def _one_run(run_id: str) -> tuple[FakeRun, str | None]:
    """A run's every kind of span: root, steps, its Turn, a model request, a pick, a Gate event and an Effect."""
    run = FakeRun(run_id)
    tracing.step_begin(run, None)
    turn_tp = tracing.turn_begin(run, f"{run_id}.t1", "writer", "notes.writing")
    tracing.step_end(run)
    tracing.model_request(turn_tp, "local/tiny", 0.01, {"prompt_tokens": 5, "completion_tokens": 1},
                          iid=f"{run_id}.t1", step=1)  # in the Harness, with the TurnSpec's traceparent
    await run.pick(f"{run_id}.t1", "ask", {})
    with tracing.gate_event(run, "notes.writing.asking", "reply"):
        tracing.step_begin(run, SimpleNamespace(type="reply"))
        tracing.step_end(run)
    tracing.effect_end(tracing.effect_begin(run, "e1", "shell"))
    tracing.turn_end(run, f"{run_id}.t1")
    return run, turn_tp


def _trace_id(run: FakeRun) -> int:
    return int(run.origin["traceparent"].split("-")[1], 16)


@pytest.fixture
def sampled_half(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    exporter = InMemorySpanExporter()
    tracing.install(exporter)  # the provider reads the sampler from the environment
    yield exporter
    tracing.uninstall()


async def test_a_runs_spans_are_all_kept_or_all_dropped(sampled_half: InMemorySpanExporter) -> None:
    runs = [await _one_run(f"run{i}") for i in range(RUNS)]
    tracing.flush()
    got = sampled_half.get_finished_spans()
    per_trace = Counter(s.context.trace_id for s in got)
    kept = [run for run, _ in runs if run.origin["traceparent"].endswith("-03")]  # sampled (and a random id)
    dropped = [(run, tp) for run, tp in runs if run.origin["traceparent"].endswith("-02")]
    assert len(kept) + len(dropped) == RUNS and kept and dropped  # a ratio of one half: some of each
    assert set(per_trace) == {_trace_id(run) for run in kept}  # no span of a dropped run, none elsewhere
    assert set(per_trace.values()) == {9}, per_trace  # every span of every kept run
    names = Counter(s.name for s in got if s.context.trace_id == _trace_id(kept[0]))
    assert names == Counter({"run notes": 1, "step": 3, "turn writer": 1, "chat tiny": 1, "pick ask": 1,
                             "gate reply": 1, "effect shell": 1})
    assert all(tp is None for _, tp in dropped)  # a dropped run's Turn hands the Harness no traceparent


async def test_the_batch_makes_the_spans_the_records_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The journaled traceparent is the root's; the Turn's traceparent is the Turn span's; each span's parent, ids
    and times are the recorded ones; nothing is exported before the batch is made."""
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    exporter = InMemorySpanExporter()
    tracing.install(exporter)
    try:
        run, turn_tp = await _one_run("r1")
        assert exporter.get_finished_spans() == ()  # recorded, not yet made: the batch waits for a pause
        tracing.flush()
        got = {s.name: s for s in exporter.get_finished_spans()}
        root, turn, chat, pick = got["run notes"], got["turn writer"], got["chat tiny"], got["pick ask"]
        assert run.origin["traceparent"] == tracing.traceparent_of(root.context) and root.parent is None
        assert turn_tp == tracing.traceparent_of(turn.context)
        assert chat.parent.span_id == turn.context.span_id and pick.parent.span_id == turn.context.span_id
        assert pick.attributes["jr2ray.verdict"] == "delivered" and pick.attributes["jr2ray.moved"] is True
        assert all(s.start_time <= s.end_time for s in got.values())
        assert got["gate reply"].parent.span_id == root.context.span_id
    finally:
        tracing.uninstall()


def test_the_batcher_hands_every_item_over_in_order_once() -> None:
    seen: list[int] = []
    done = threading.Event()

    def handle(items: list[int]) -> None:
        seen.extend(items)
        if len(seen) >= 300:
            done.set()

    b = Batcher("test-batcher", handle, delay_s=0.01)
    threads = [threading.Thread(target=lambda k=k: [b.put(k * 100 + i) for i in range(100)]) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done.wait(30), "the thread handled the items"
    b.put(999)
    b.close()  # what waits is handled before the thread ends
    assert sorted(seen) == sorted([*range(300), 999]) and len(seen) == 301
    for k in range(3):  # each thread's items in the order it put them
        mine = [x for x in seen if x // 100 == k and x != 999]
        assert mine == sorted(mine)


def test_batchers_wait_while_the_process_holds_them_back_and_go_once_it_stops() -> None:
    """A start batch's journal writes hold the process's telemetry back: nothing is handled while held (even past
    `max_wait_s`), and all of it right after."""
    seen: list[int] = []
    done = threading.Event()

    def handle(items: list[int]) -> None:
        seen.extend(items)
        done.set()

    b = Batcher("test-held", handle, delay_s=0.01, max_wait_s=0.05)
    with holding():
        b.put(1)
        b.put(2)
        assert not done.wait(0.3), "handled while held, past its max_wait_s"
    assert done.wait(5), "handled once the hold ended"
    assert seen == [1, 2]
    b.close()
