"""Traces of one notes run (jr2ray.run.tracing), caught by an in-memory exporter: the whole span tree of a run on
the real engine, with the Harness against the recording fake model, in this process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jr2ray
from conformance_fakes import FakeModelServer, calls
from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.run import tracing
from jr2ray.run.store import open_store
from jr2ray.settings import load_settings
from workflows.notes import machine as notes


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(exporter)
    yield exporter
    tracing.uninstall()


async def _notes(llm: FakeModelServer, store_dir: Path) -> jr2ray.LocalRun:
    launcher = LocalTurnLauncher(ProviderConfig(local_base_url=llm.url, local_api_key="t", max_retries=0,
                                                timeout_s=10), Limits())
    run = jr2ray.LocalRun(notes, {"changes": "fix: crash"}, launcher=launcher, store=open_store(str(store_dir)))
    for _ in range(400):
        if run.gates():
            break
        await asyncio.sleep(0.01)
    (gate,) = run.gates()
    run.send(gate.id, "reply", {"text": "The crash fix."})
    status = await run.wait(20)
    await launcher.settle()
    assert status.status == "done"
    return run


def print_tree(root: Any, got: Any) -> None:
    """The span tree, printed (pytest -s shows it): names, indented under their parents, in start order."""
    kids: dict[int, list[Any]] = {}
    for s in got:
        if s.parent is not None:
            kids.setdefault(s.parent.span_id, []).append(s)

    def walk(s: Any, depth: int) -> None:
        print("  " * depth + s.name, {k: v for k, v in s.attributes.items() if k in ("jr2ray.event", "jr2ray.verdict")})
        for k in sorted(kids.get(s.context.span_id, []), key=lambda k: k.start_time):
            walk(k, depth + 1)

    walk(root, 0)


def _tree(finished: Any) -> dict[int, Any]:
    return {s.context.span_id: s for s in finished}


async def test_a_notes_run_is_one_trace_with_its_steps_turn_requests_picks_and_gate(
        llm: FakeModelServer, spans: InMemorySpanExporter, tmp_path: Path) -> None:
    llm.push(calls(("ask", {"question": "Which change matters most?"})), calls(("done", {"notes": "# Notes"})))
    run = await _notes(llm, tmp_path / "runs")
    tracing.flush()  # the spans recorded on the run's paths are made in batches, off those paths
    got = spans.get_finished_spans()
    by_id = _tree(got)
    assert len({s.context.trace_id for s in got}) == 1, "one trace per run"
    (root,) = [s for s in got if s.parent is None]
    assert root.name == "run notes"
    assert root.attributes["jr2ray.run.id"] == run.id

    def parent(s: Any) -> Any:
        return by_id[s.parent.span_id]

    names = sorted(s.name for s in got)
    assert names.count("chat tiny") == 2 and names.count("turn writer") == 1
    assert {"pick ask", "pick done", "gate reply"} <= set(names)
    (turn,) = [s for s in got if s.name == "turn writer"]
    assert turn.attributes["jr2ray.seat"] == "writer" and turn.attributes["jr2ray.state"] == "notes.writing"
    # The Turn was started by the run's first step, which hangs off the root.
    assert parent(turn).name == "step" and parent(turn).attributes["jr2ray.event"] == "xstate.init"
    assert parent(parent(turn)) is root
    # Model requests and picks are the Turn's children; each pick's step is under the pick.
    for s in got:
        if s.name in ("chat tiny", "pick ask", "pick done"):
            assert parent(s) is turn, s.name
    (ask,) = [s for s in got if s.name == "pick ask"]
    assert ask.attributes["jr2ray.verdict"] == "delivered"
    steps_of_ask = [s for s in got if s.name == "step" and s.parent.span_id == ask.context.span_id]
    assert [s.attributes["jr2ray.event"] for s in steps_of_ask] == ["ask"]
    # The Gate event is under the run's root (no caller here), and its step under it; done follows the reply.
    (gate,) = [s for s in got if s.name == "gate reply"]
    assert parent(gate) is root and gate.attributes["jr2ray.gate"] == "notes.writing.asking"
    assert [s.attributes["jr2ray.event"] for s in got if s.name == "step" and parent(s) is gate] == ["reply"]
    print_tree(root, got)
    # GenAI semantic conventions on the model requests, with the tokens the fake server reported.
    chats = sorted((s for s in got if s.name == "chat tiny"), key=lambda s: s.start_time)
    for i, c in enumerate(chats):
        a = c.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "tiny"
        assert a["gen_ai.provider.name"] == "local"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] == 1
        assert tracing.GEN_AI_CACHED_TOKENS in a and a["jr2ray.step"] == i + 1
        assert c.start_time < c.end_time
    assert chats[1].attributes[tracing.GEN_AI_CACHED_TOKENS] > 0  # the second request reused the first's prefix


def test_the_gen_ai_names_are_the_installed_semantic_conventions() -> None:
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

    assert (tracing.GEN_AI_OPERATION, tracing.GEN_AI_PROVIDER, tracing.GEN_AI_MODEL, tracing.GEN_AI_INPUT_TOKENS,
            tracing.GEN_AI_OUTPUT_TOKENS, tracing.GEN_AI_CACHED_TOKENS) == (
        g.GEN_AI_OPERATION_NAME, g.GEN_AI_PROVIDER_NAME, g.GEN_AI_REQUEST_MODEL, g.GEN_AI_USAGE_INPUT_TOKENS,
        g.GEN_AI_USAGE_OUTPUT_TOKENS, g.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)


async def test_the_root_traceparent_is_journaled_and_a_wake_continues_the_trace(
        llm: FakeModelServer, spans: InMemorySpanExporter, tmp_path: Path) -> None:
    llm.push(calls(("ask", {"question": "Which?"})), calls(("done", {"notes": "# N"})))
    run = await _notes(llm, tmp_path / "runs")
    store = open_store(str(tmp_path / "runs"))
    j = store.open(run.id)
    (start,) = j.ledger("start")
    j.close()
    tracing.flush()
    root = next(s for s in spans.get_finished_spans() if s.parent is None)
    assert start.data["traceparent"] == tracing.traceparent_of(root.context)
    # Reopening the run (as a wake does) carries the traceparent from the journal.
    again = jr2ray.run.RunEngine.from_store(notes, run.id, None, store, create=False, settings=load_settings())
    assert again.origin["traceparent"] == start.data["traceparent"]


async def test_off_means_no_sdk_objects_and_no_traceparent(llm: FakeModelServer, tmp_path: Path) -> None:
    assert not tracing.enabled() and tracing._provider is None
    llm.push(calls(("ask", {"question": "Which?"})), calls(("done", {"notes": "# N"})))
    run = await _notes(llm, tmp_path / "runs")
    j = open_store(str(tmp_path / "runs")).open(run.id)
    (start,) = j.ledger("start")
    j.close()
    assert "traceparent" not in start.data and tracing._provider is None
