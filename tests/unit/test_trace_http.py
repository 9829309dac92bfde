"""The API's request span (serve/api/middleware.py TraceMiddleware): a child of the request's `traceparent` header,
current while the route runs, so what the route hands a run (a Gate event's context) is that span. Off, a request
passes straight through and the route sees no context."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jr2ray.run import tracing
from serve.api.middleware import TraceMiddleware

CALLER = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/runs/{run_id}/gates/{gate}/events")
    async def handed(run_id: str, gate: str) -> dict[str, str | None]:
        return {"traceparent": tracing.current_traceparent()}

    app.add_middleware(TraceMiddleware)
    return app


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(exporter)
    yield exporter
    tracing.uninstall()


def test_a_request_span_is_the_child_of_its_traceparent_and_what_the_route_hands_on(
        spans: InMemorySpanExporter) -> None:
    got = TestClient(_app()).post("/runs/r1/gates/g/events", headers={"traceparent": CALLER}).json()
    (span,) = spans.get_finished_spans()
    assert span.name == "POST /runs/r1/gates/g/events"
    assert span.context.trace_id == int("12" * 16, 16) and span.parent.span_id == int("34" * 8, 16)
    assert got["traceparent"] == tracing.traceparent_of(span.context)


def test_without_a_header_the_request_starts_its_own_trace(spans: InMemorySpanExporter) -> None:
    got = TestClient(_app()).post("/runs/r1/gates/g/events").json()
    (span,) = spans.get_finished_spans()
    assert span.parent is None and got["traceparent"] == tracing.traceparent_of(span.context)


def test_off_the_route_sees_no_context() -> None:
    assert not tracing.enabled()
    got = TestClient(_app()).post("/runs/r1/gates/g/events", headers={"traceparent": CALLER}).json()
    assert got == {"traceparent": None}
