"""Spans recorded on a hot path as plain records, made into the SDK's spans later, in batches, on a thread.

Why: the OpenTelemetry SDK's `start_span` (sampler, ids, attribute checks, locks) and `end` were most of what the
traces cost a pick (docs/design.md, "What they cost"). A `SpanRecord` keeps what the span will hold: its ids (made
here, so a child or a traceparent can name it at once), its parent, name, attributes, links, kind, status, and its
start and end times. It costs a few microseconds. The `Shipper` then makes each record a span through the SDK's own
Tracer, with the recorded times (`start_time`, `end_time`) and the recorded ids (`PresetIds`, the provider's id
generator), so the sampler, the span limits, the processors and the exporter see what an eager span would have
been. It is the provider's first span processor: the provider's `force_flush` and `shutdown` (at exit too) make the
records still waiting into spans before the exporting processor after it flushes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from jr2ray.run.batcher import Batcher

# The pause in records the shipper waits for (at most 2 s after one): the records of a burst (a pick and its step, a
# batch of starts) go together, after it, and the SDK's work waits until the caller has had its answer.
BATCH_DELAY_S = 0.2
SAMPLED = 0x01
RANDOM_ID = 0x02  # W3C level 2's random trace id flag, which the SDK sets on its random ids as well

_log = logging.getLogger(__name__)


def new_trace_id() -> int:
    return random.getrandbits(128) or 1


def new_span_id() -> int:
    return random.getrandbits(64) or 1


class SpanRecord:
    """What one span will hold, recorded cheaply; `end` hands it to the shipper (when its trace is sampled)."""

    __slots__ = ("name", "trace_id", "span_id", "trace_flags", "parent", "attributes", "links", "kind", "start",
                 "end_time", "status", "exc", "_shipper")

    def __init__(self, shipper: Shipper, name: str, trace_id: int, trace_flags: int, parent: Any,
                 attributes: dict[str, Any], links: list[Any] | None = None, kind: SpanKind = SpanKind.INTERNAL,
                 start: int | None = None) -> None:
        self._shipper = shipper
        self.name = name
        self.trace_id = trace_id
        self.span_id = new_span_id()
        self.trace_flags = trace_flags
        self.parent = parent  # a SpanContext (from a traceparent), another SpanRecord, or None for a root
        self.attributes = attributes
        self.links = links
        self.kind = kind
        self.start = time.time_ns() if start is None else start
        self.end_time: int | None = None
        self.status: str | None = None  # an error's description
        self.exc: BaseException | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.trace_flags & SAMPLED)

    def get_span_context(self) -> SpanContext:
        return SpanContext(self.trace_id, self.span_id, is_remote=False, trace_flags=TraceFlags(self.trace_flags))

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def record_exception(self, exc: BaseException) -> None:
        self.exc = exc

    def set_error(self, description: str) -> None:
        self.status = description

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = time.time_ns() if end_time is None else end_time
        if self.trace_flags & SAMPLED:
            self._shipper.put(self)


class PresetIds(IdGenerator):
    """The provider's id generator: the ids of the record being made into a span (set by the shipper in its own
    thread), else random ones as the SDK's default makes (a span made directly, such as an API request's)."""

    def __init__(self) -> None:
        self._next = threading.local()

    def preset(self, trace_id: int | None, span_id: int | None) -> None:
        self._next.trace_id, self._next.span_id = trace_id, span_id

    def generate_span_id(self) -> int:
        sid: int | None = getattr(self._next, "span_id", None)
        if sid is not None:
            self._next.span_id = None
            return sid
        return new_span_id()

    def generate_trace_id(self) -> int:
        tid: int | None = getattr(self._next, "trace_id", None)
        if tid is not None:
            self._next.trace_id = None
            return tid
        return new_trace_id()

    def is_trace_id_random(self) -> bool:
        return True


def _context_of(parent: Any) -> Any:
    """The parent as a context to start a span in: a root's is empty (never whatever is current where it is made)."""
    if parent is None:
        return Context()
    sc = parent if isinstance(parent, SpanContext) else parent.get_span_context()
    return trace.set_span_in_context(NonRecordingSpan(sc))


class Shipper(SpanProcessor):
    """Makes the records into SDK spans: on its own thread (`Batcher`), once records pause for `BATCH_DELAY_S`, or
    at once on `force_flush` and `shutdown`. A span processor itself only so the provider drains it first."""

    def __init__(self, ids: PresetIds) -> None:
        self.tracer: Any = None  # set once the provider that owns this processor has made its tracer
        self._ids = ids
        self._batcher = Batcher("jr2ray-span-shipper", self._make, BATCH_DELAY_S)

    def put(self, rec: SpanRecord) -> None:
        if not self._batcher.closed:
            self._batcher.put(rec)

    def _make(self, recs: list[SpanRecord]) -> None:
        for rec in recs:
            try:
                self._one(rec)
            except Exception:  # noqa: BLE001 - a span that cannot be made never stops the others
                _log.exception("span %s could not be made", rec.name)

    def _one(self, rec: SpanRecord) -> None:
        links = [trace.Link(x) for x in rec.links] if rec.links else None
        self._ids.preset(rec.trace_id if rec.parent is None else None, rec.span_id)
        try:
            span = self.tracer.start_span(rec.name, context=_context_of(rec.parent), kind=rec.kind,
                                          attributes=rec.attributes, links=links, start_time=rec.start)
        finally:
            self._ids.preset(None, None)
        if rec.exc is not None:
            span.record_exception(rec.exc, timestamp=rec.end_time)
        if rec.status is not None:
            span.set_status(Status(StatusCode.ERROR, rec.status))
        span.end(end_time=rec.end_time)

    def flush_records(self) -> None:
        """Every record waiting, made into spans now (in the caller's thread)."""
        self._batcher.flush()

    # ---- SpanProcessor --------------------------------------------------------------------------------------
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: Any) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush_records()
        return True

    def shutdown(self) -> None:
        self._batcher.close()
