"""OpenTelemetry traces of runs: one trace per run, with spans for its steps, Turns, model requests, picks, Gate
events and Effects.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set when this module is imported (or a test calls `install`). Off, every
hook here is one check of a module global and returns: no SDK object is made, and the SDK is not even imported.

On, the hooks on a run's paths (its root, steps, Turns, picks, Gate events, Effects, and a Harness's model requests)
record `SpanRecord`s, which the SDK makes into spans later, in a batch, off the caller's path (`trace_batch`).

Sampling is by run: the provider's sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) decides at the run's
root, and every other span of the run follows its parent, so a run's spans are all kept or all dropped. A run not
sampled carries its traceparent with the sampled flag off, and every hook returns for it after one check.

How a run's spans find one another across processes:
- The run's root span is made when its journal is created (`rooted`); its W3C traceparent goes in the journal's
  `start` entry, so every later activation, on any host or node, continues that trace (`carried`).
- A Turn's span context travels to its Harness actor in `TurnSpec.traceparent`; the Harness's model-request spans
  are its children.
- A Gate event's caller (an HTTP request with a `traceparent` header, through the API) hands its context along with
  the call (`caller`). The Gate event span stays in the run's trace, a child of the run's root, and carries a *link*
  to the caller's span: one trace per run, and the caller's trace still points at what it caused.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from jr2ray.settings import tracing_env

ENDPOINT_VAR = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACER_NAME = "jr2ray"

_tracer: Any = None  # an opentelemetry Tracer while tracing is on; None means off
_provider: Any = None
_shipper: Any = None  # the provider's `trace_batch.Shipper`: what the recorded spans are handed to
_batch: Any = None  # the `trace_batch` module, once imported (`_start`): no import statement on a hot path
_trace_api: Any = None  # the `opentelemetry.trace` module, once imported (`_api`)
_from_env = False  # the tracer was started from the environment (not installed by a test)
# A Gate event's caller, as a span context (set by `caller` around the call into the engine).
_caller: ContextVar[Any] = ContextVar("jr2ray_trace_caller", default=None)
# The pick or Gate event this task is delivering, as a span record (set by `traced_pick` and `gate_event` around the
# call into the engine): the parent of the steps it causes.
_picking: ContextVar[Any] = ContextVar("jr2ray_trace_picking", default=None)

T = TypeVar("T")


def enabled() -> bool:
    return _tracer is not None


def _start(processor: Any) -> None:
    global _tracer, _provider, _shipper, _batch
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from jr2ray.run import trace_batch

    if _provider is not None:
        _provider.shutdown()
    _batch = trace_batch
    ids = trace_batch.PresetIds()
    _provider = TracerProvider(resource=Resource.create({"service.name": tracing_env()[1],
                                                         "process.pid": os.getpid()}), id_generator=ids)
    _shipper = trace_batch.Shipper(ids)
    _provider.add_span_processor(_shipper)  # first: a flush or shutdown makes its records into spans first
    _provider.add_span_processor(processor)
    _tracer = _shipper.tracer = _provider.get_tracer(TRACER_NAME)


def configure_from_env() -> bool:
    """Turn tracing on with the OTLP/HTTP exporter when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the exporter reads
    the endpoint and its headers from the standard variables), or off again when the environment no longer asks
    for it (`OTEL_SDK_DISABLED=true`, say: a host applies its pool's env, which may switch tracing off as it may
    switch the telemetry off). A tracer a test installed is left alone. Returns whether tracing is on."""
    global _from_env
    wanted = tracing_env()[0] is not None
    if not wanted and _from_env:
        uninstall()
    if _tracer is not None or not wanted:
        return _tracer is not None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    _start(BatchSpanProcessor(OTLPSpanExporter()))
    _from_env = True
    return True


def install(exporter: Any) -> None:
    """Tracing on in this process, each span handed to `exporter` as it ends (a test's in-memory exporter)."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    _start(SimpleSpanProcessor(exporter))


def uninstall() -> None:
    """Tracing off again, after the spans still queued are exported."""
    global _tracer, _provider, _from_env, _shipper
    if _provider is not None:
        _provider.shutdown()
    _tracer, _provider, _from_env, _shipper = None, None, False, None


def flush(timeout_ms: int = 5000) -> None:
    """The spans recorded so far, made and exported now (a test reads them; a Harness about to end sends them)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


# ---- contexts ------------------------------------------------------------------------------------------------
def _parse(traceparent: str | None) -> Any:
    """The span context a W3C traceparent names, or None."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    trace = _api()
    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


def traceparent_of(span_context: Any) -> str:
    """The W3C traceparent of a span context or a span record."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The traceparent of the span current here (an API request's, say), to hand along with a call; None when off."""
    if _tracer is None:
        return None
    trace = _api()
    sc = trace.get_current_span().get_span_context()
    return traceparent_of(sc) if sc.is_valid else None


def _api() -> Any:
    """`opentelemetry.trace`, imported once: an import statement on every span was a measurable part of a pick."""
    global _trace_api
    if _trace_api is None:
        from opentelemetry import trace

        _trace_api = trace
    return _trace_api


def _ctx(sc: Any) -> Any:
    trace = _api()
    return trace.set_span_in_context(trace.NonRecordingSpan(sc)) if sc is not None else None


class _RunTrace:
    """What one engine keeps of its run's trace: the root's context, the step being committed, its Turns' spans."""

    __slots__ = ("root", "sampled", "step", "turns")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.sampled = bool(root.trace_flags.sampled)  # the run's root was sampled: all its spans are kept
        self.step: Any = None
        self.turns: dict[str, Any] = {}


def _run_trace(engine: Any) -> _RunTrace | None:
    """The run's trace, or None when it has none or its root was not sampled (then no span of it is recorded)."""
    engine = getattr(engine, "state", engine)  # one trace per run: kept on the RunState its engine and parts share
    rt: _RunTrace | None = engine.__dict__.get("_trace")
    if rt is None:
        root = _parse((getattr(engine, "origin", None) or {}).get("traceparent"))
        if root is None:
            return None
        rt = engine.__dict__["_trace"] = _RunTrace(root)
    return rt if rt.sampled else None


def _record(name: str, parent: Any, attributes: dict[str, Any], **kw: Any) -> Any:
    """A span record of the run's trace under `parent` (a span context or another record), flags as its parent's."""
    return _batch.SpanRecord(_shipper, name, parent.trace_id, int(parent.trace_flags), parent, attributes, **kw)


def _parent(rt: _RunTrace, fallback: Any = None) -> Any:
    """The parent of a new span of this run: the step being committed, else the pick, the Gate event or the span
    current in this task when it is of this run's trace, else `fallback` (a Turn's span), else the run's root."""
    if rt.step is not None:
        return rt.step
    picking = _picking.get()
    if picking is not None and picking.trace_id == rt.root.trace_id:
        return picking
    cur = _api().get_current_span().get_span_context()
    if cur.is_valid and cur.trace_id == rt.root.trace_id:
        return cur
    return fallback if fallback is not None else rt.root


def _base(engine: Any) -> dict[str, Any]:
    engine = getattr(engine, "state", engine)
    return {"jr2ray.run.id": engine.run_id, "jr2ray.workflow": engine.workflow_name}


# ---- the run and its steps -----------------------------------------------------------------------------------
def rooted(origin: dict[str, Any], run_id: str, workflow: str) -> dict[str, Any]:
    """`origin` (the journal's start entry) with the traceparent of the run's new root span, when tracing is on."""
    if _tracer is None:
        return origin
    b = _batch
    name, attributes = f"run {workflow}", {"jr2ray.run.id": run_id, "jr2ray.workflow": workflow}
    trace_id = b.new_trace_id()
    keep = _provider.sampler.should_sample(None, trace_id, name, attributes=attributes).decision.is_sampled()
    root = b.SpanRecord(_shipper, name, trace_id, (b.SAMPLED if keep else 0) | b.RANDOM_ID, None, attributes)
    root.end()
    return {**origin, "traceparent": traceparent_of(root)}


def carried(origin: dict[str, Any], journaled: dict[str, Any]) -> dict[str, Any]:
    """`origin` with the run's traceparent from its journaled start entry: a wake continues the run's trace."""
    tp = journaled.get("traceparent")
    return {**origin, "traceparent": tp} if tp and _tracer is not None else origin


def step_begin(engine: Any, event: Any) -> None:
    """A macrostep is being committed: its span lasts until `step_end`, and what it starts (Turns, Effects) is
    under it."""
    if _tracer is None or (rt := _run_trace(engine)) is None:
        return
    if rt.step is not None:
        rt.step.end()
    etype = getattr(event, "type", None) or "xstate.init"
    rt.step = _record("step", _parent(rt), {**_base(engine), "jr2ray.event": etype,
                                            "jr2ray.timer": etype.startswith("xstate.after.")})


def step_end(engine: Any) -> None:
    if _tracer is None or (rt := _run_trace(engine)) is None or rt.step is None:
        return
    rt.step.end()
    rt.step = None


# ---- Turns and picks -----------------------------------------------------------------------------------------
def turn_begin(engine: Any, iid: str, slot: str, state: str) -> str | None:
    """Open the Turn's span; its traceparent goes to the Harness with the TurnSpec."""
    if _tracer is None or (rt := _run_trace(engine)) is None:
        return None
    span = _record(f"turn {slot}", _parent(rt), {**_base(engine), "jr2ray.turn.iid": iid, "jr2ray.seat": slot,
                                                  "jr2ray.state": state})
    old = rt.turns.pop(iid, None)
    if old is not None:
        old.end()
    rt.turns[iid] = span
    return traceparent_of(span)


def turn_end(engine: Any, iid: str) -> None:
    if _tracer is None or (rt := _run_trace(engine)) is None:
        return
    span = rt.turns.pop(iid, None)
    if span is not None:
        span.end()


def traced_pick(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A pick's span, from its arrival to its receipt, under its Turn's span; the receipt's verdict on it."""

    @functools.wraps(fn)
    async def pick(self: Any, address: str, name: str, args: Any, delivery_id: str | None = None) -> T:
        if _tracer is None or (rt := _run_trace(self)) is None:
            return await fn(self, address, name, args, delivery_id)
        turn = rt.turns.get(address) or next((s for i, s in rt.turns.items() if address in i), None)
        span = _record(f"pick {name}", _parent(rt, turn),
                       {**_base(self), "jr2ray.pick": name, "jr2ray.address": address})
        # The pick's span is the parent of the steps it causes through `_picking`, a plain context variable: making
        # it OpenTelemetry's current span (attach, detach) cost a pick as much again as the span itself.
        token = _picking.set(span)
        try:
            receipt = await fn(self, address, name, args, delivery_id)
            span.set_attributes({"jr2ray.verdict": getattr(receipt, "refused", None) or "delivered",
                                 "jr2ray.moved": bool(getattr(receipt, "moved", False))})
            return receipt
        except BaseException as exc:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            _picking.reset(token)
            span.end()

    return pick


# ---- Gate events ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def caller(traceparent: str | None) -> Iterator[None]:
    """Around a call into the engine: the caller's span context (from its traceparent), for the span it causes."""
    if _tracer is None or not traceparent:
        yield
        return
    token = _caller.set(_parse(traceparent))
    try:
        yield
    finally:
        _caller.reset(token)


@contextlib.contextmanager
def gate_event(engine: Any, gate_id: str, name: str) -> Iterator[None]:
    """A Gate event's span: a child of the run's root, linked to its caller's span when it came with one."""
    if _tracer is None or (rt := _run_trace(engine)) is None:
        yield
        return
    who = _caller.get()
    links = [who] if who is not None and who.trace_id != rt.root.trace_id else None
    parent = who if who is not None and who.trace_id == rt.root.trace_id else rt.root
    span = _record(f"gate {name}", parent, {**_base(engine), "jr2ray.gate": gate_id, "jr2ray.event": name},
                   links=links)
    token = _picking.set(span)  # the parent of the step it causes, as a pick's span is
    try:
        yield
    except Exception as exc:  # as the SDK's `use_span` records it
        span.record_exception(exc)
        span.set_error(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        _picking.reset(token)
        span.end()


# ---- Effects -------------------------------------------------------------------------------------------------
def effect_begin(engine: Any, effect_id: str, kind: str) -> Any:
    """An Effect's span, from its start to its result (`effect_end`); None when off."""
    if _tracer is None or (rt := _run_trace(engine)) is None:
        return None
    return _record(f"effect {kind}", _parent(rt),
                   {**_base(engine), "jr2ray.effect": effect_id, "jr2ray.effect.kind": kind})


def effect_end(span: Any, error: dict[str, Any] | None = None) -> None:
    if span is None:
        return
    if error is not None:
        span.set_error(str(error.get("message", ""))[:200])
    span.end()


# ---- model requests (in the Harness) -------------------------------------------------------------------------
# The OpenTelemetry GenAI semantic conventions' names (opentelemetry-semantic-conventions, gen_ai_attributes).
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_MODEL = "gen_ai.request.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"


def model_request(traceparent: str | None, model: str, latency_s: float, usage: dict[str, Any] | None,
                  error: str | None = None, *, iid: str = "", step: int = 0) -> None:
    """One model request's span, recorded when it is over (it started `latency_s` ago), under its Turn's span."""
    if _tracer is None or (parent := _parse(traceparent)) is None or not parent.trace_flags.sampled:
        return
    provider, _, served = model.partition("/")
    attrs: dict[str, Any] = {GEN_AI_OPERATION: "chat", GEN_AI_PROVIDER: provider or model,
                             GEN_AI_MODEL: served or model, "jr2ray.turn.iid": iid, "jr2ray.step": step}
    for key, field in ((GEN_AI_INPUT_TOKENS, "prompt_tokens"), (GEN_AI_OUTPUT_TOKENS, "completion_tokens"),
                       (GEN_AI_CACHED_TOKENS, "cached_tokens")):
        if usage and usage.get(field) is not None:
            attrs[key] = int(usage[field])
    end = time.time_ns()
    span = _record(f"chat {served or model}", parent, attrs, start=end - int(latency_s * 1e9))
    if error is not None:
        span.set_attribute("error.type", "provider_error")
        span.set_error(error[:200])
    span.end(end_time=end)


# ---- HTTP ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def server_span(name: str, traceparent: str | None, attributes: dict[str, Any]) -> Iterator[None]:
    """An API request's span, a child of the request's own `traceparent` header when it has one; current while
    the request is served, so a Gate event it sends carries it (`current_traceparent`)."""
    if _tracer is None:
        yield
        return
    trace = _api()
    span = _tracer.start_span(name, context=_ctx(_parse(traceparent)), kind=trace.SpanKind.SERVER,
                              attributes=attributes)
    with trace.use_span(span, end_on_exit=True):
        yield


configure_from_env()
