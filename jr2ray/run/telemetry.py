"""Observability: one function per product event, each updating Ray metrics and writing one JSON log line.

Why one facade: call sites stay one line (`telemetry.run_parked(engine, early)`), so the engine, the hosts and the
registry say *what happened* and this module alone decides which series and which log fields that is.

- Metrics go through `ray.util.metrics`, so Ray's metrics agent exports them on every node beside Ray's own series
  (Ray prefixes them `ray_`). They are created lazily, once per process, and only in a process connected to Ray
  (elsewhere, `LocalRun` in a test, only the log line is written). Labels are bounded: workflow, seat, verdict,
  kind, outcome (and status/where on the run gauges); never a run id.
- Log lines are JSON objects, one a line, in `$JR2RAY_HOME/logs/<component>-<pid>.jsonl` (`setup(component)`, called
  from each actor's constructor and the API's), with `ts`, `level`, `event`, `component`, `run`, `iid`,
  `workflow` and the event's own fields. `jr2ray logs` reads them.
- Both can be switched off (`JR2RAY_TELEMETRY=off`): each entry point passes its settings' `telemetry` to `setup`,
  and every event below then returns after one check of `_on`, touching no metric, clock or log.
- Neither is done on the event's path: an event hands its log line and its metric records to this process's writer
  thread (`Batcher`, a deque append each), which writes the lines and records the metrics in batches, when the
  events pause for `WRITE_DELAY_S` and at most 2 s after one (a counter's increments of a batch summed into one
  record per series). `flush` does it at once; it runs at exit too.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from jr2ray.run.batcher import Batcher

T = TypeVar("T")

LOGGER = "jr2ray.events"
LOG_DIR = "logs"
LOG_SUFFIX = ".jsonl"
_log = logging.getLogger(LOGGER)
_log.propagate = False  # never into Ray's worker logs or a driver's stderr: the file is the one place
_log.setLevel(logging.INFO)
_component = "process"
_on = True  # set by `setup` from the entry point's settings (`Settings.telemetry`); off, every event is one check

# Seconds; from a fast pick on a live run (a few ms) to a slow model request or a long Gate wait.
LATENCY_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]
LONG_BOUNDS = [0.1, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0]  # Turn durations, Effect runs
LAG_BOUNDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]
COMMIT_BOUNDS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0]
# Every status a run can have (the run gauges are zero-filled with these, so an alert on `drifted` has a series).
STATUSES = ("queued", "active", "done", "error", "cancelled", "stopped", "drifted", "lost", "corrupt")
WHERES = ("live", "parked", "queued")

# name -> (type, description, tag keys, histogram bounds). The one list of jr2ray's series (docs/design.md).
SERIES: dict[str, tuple[str, str, tuple[str, ...], list[float] | None]] = {
    "jr2ray_runs": ("gauge", "Runs by workflow and status, from the run index.", ("workflow", "status"), None),
    "jr2ray_runs_where": ("gauge", "Active and queued runs by where they are: live, parked or queued.",
                          ("workflow", "where"), None),
    "jr2ray_queue_length": ("gauge", "Runs waiting in line for a live-run slot.", (), None),
    "jr2ray_live_slots": ("gauge", "The most runs that may be live at once.", (), None),
    "jr2ray_timers_overdue_seconds": ("gauge", "How far past its due time the most overdue timer of a parked run "
                                               "is (0: none overdue).", (), None),
    "jr2ray_runs_started": ("counter", "Runs started (journaled).", ("workflow",), None),
    "jr2ray_activations": ("counter", "Runs taken by a host: kind first (its first activation) or wake.",
                           ("workflow", "kind"), None),
    "jr2ray_parks": ("counter", "Runs parked: kind idle, early (a queued run needed the slot) or finished.",
                     ("workflow", "kind"), None),
    "jr2ray_runs_ended": ("counter", "Runs that reached an end, by outcome (done, error, cancelled).",
                          ("workflow", "outcome"), None),
    "jr2ray_runs_broken": ("counter", "Activations that found a run drifted, lost or corrupt.",
                           ("workflow", "kind"), None),
    "jr2ray_picks": ("counter", "Picks by verdict (delivered, or the refusal reason).",
                     ("workflow", "seat", "verdict"), None),
    "jr2ray_gate_events": ("counter", "Gate events by verdict (accepted, or the refusal).",
                           ("workflow", "verdict"), None),
    "jr2ray_effects_started": ("counter", "Effects started.", ("workflow", "kind"), None),
    "jr2ray_effects": ("counter", "Effects finished, by outcome (ok, error, interrupted, cancelled, replayed).",
                       ("workflow", "kind", "outcome"), None),
    "jr2ray_timers_fired": ("counter", "Parked runs woken by the timer service for a due timer.", (), None),
    "jr2ray_turns_opened": ("counter", "Turns opened.", ("workflow", "seat"), None),
    "jr2ray_turns_closed": ("counter", "Turns closed.", ("workflow", "seat"), None),
    "jr2ray_model_requests": ("counter", "Model requests, by outcome (ok, error).", ("workflow", "seat", "outcome"),
                              None),
    "jr2ray_prompt_tokens": ("counter", "Prompt tokens of model requests.", ("workflow", "seat"), None),
    "jr2ray_cached_tokens": ("counter", "Prompt tokens the provider's prefix cache served.", ("workflow", "seat"),
                             None),
    "jr2ray_prefilled_tokens": ("counter", "Prompt tokens prefilled (prompt minus cached).", ("workflow", "seat"),
                                None),
    "jr2ray_store_errors": ("counter", "Journal commits that failed: kind fenced, lost or corrupt.",
                            ("workflow", "kind"), None),
    "jr2ray_refusals": ("counter", "Requests the API refused, by kind (the HTTP status).", ("kind",), None),
    "jr2ray_wake_seconds": ("histogram", "A run's activation in its host: journal load, lease, restore, start.",
                            ("workflow", "kind"), LATENCY_BOUNDS),
    "jr2ray_pick_seconds": ("histogram", "A pick, from reaching its run to its receipt (a pick that opens work "
                                         "waits for Rest).", ("workflow", "seat"), LATENCY_BOUNDS),
    "jr2ray_gate_event_seconds": ("histogram", "A Gate event, from reaching its run to its answer.",
                                  ("workflow",), LATENCY_BOUNDS),
    "jr2ray_timer_lag_seconds": ("histogram", "How late the timer service woke a parked run for its timer.",
                                 (), LAG_BOUNDS),
    "jr2ray_turn_seconds": ("histogram", "A Turn, from open to close (within one activation).",
                            ("workflow", "seat"), LONG_BOUNDS),
    "jr2ray_effect_seconds": ("histogram", "An Effect's run.", ("workflow", "kind", "outcome"), LONG_BOUNDS),
    "jr2ray_model_request_seconds": ("histogram", "A model request's latency.", ("workflow", "seat"),
                                     LATENCY_BOUNDS),
    "jr2ray_journal_commit_seconds": ("histogram", "One journal transaction.", ("workflow",), COMMIT_BOUNDS),
}

_metrics: dict[str, Any] = {}
_ray_ok: bool | None = None


def _metric(name: str) -> Any | None:
    """The process's one metric object of `name`, created on first use; None where Ray is not connected."""
    global _ray_ok
    m = _metrics.get(name)
    if m is not None:
        return m
    if _ray_ok is None or not _ray_ok:
        # A process that never imported Ray is not connected to one: it is not imported here, where the writer's
        # thread could be doing it while the interpreter shuts down (a LocalRun script's exit then printed a trace).
        ray = sys.modules.get("ray")
        _ray_ok = ray is not None and bool(ray.is_initialized())
        if not _ray_ok:
            _ray_ok = None  # asked again next time: this process may join Ray later
            return None
    from ray.util import metrics as rm

    kind, desc, tags, bounds = SERIES[name]
    if kind == "counter":
        m = rm.Counter(name, desc, tag_keys=tags)
    elif kind == "gauge":
        m = rm.Gauge(name, desc, tag_keys=tags)
    else:
        m = rm.Histogram(name, desc, boundaries=bounds or LATENCY_BOUNDS, tag_keys=tags)
    _metrics[name] = m
    return m


def _inc(name: str, tags: dict[str, str] | None = None, value: float = 1.0) -> None:
    if value > 0:
        _writer.put((_INC, name, tags, value))


def _observe(name: str, value: float, tags: dict[str, str] | None = None) -> None:
    _writer.put((_OBSERVE, name, tags, max(0.0, value)))


def _set(name: str, value: float, tags: dict[str, str] | None = None) -> None:
    _writer.put((_SET, name, tags, value))


# ---- the writer thread --------------------------------------------------------------------------------------------
WRITE_DELAY_S = 0.2  # lines are written, metrics recorded, once events pause this long (at most 2 s after one)
_LOG, _INC, _OBSERVE, _SET = range(4)


def _record(m: Any, kind: int, value: float, tags: dict[str, str] | None) -> None:
    if kind == _INC:
        m.inc(value, tags=tags or None)
    elif kind == _OBSERVE:
        m.observe(value, tags=tags or None)
    else:
        m.set(value, tags=tags or None)


def _write(items: list[tuple[Any, ...]]) -> None:
    """A batch of events: their log lines through the logger, then their metric records (a counter's increments
    summed per series: one record where a burst of picks made hundreds)."""
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[dict[str, str] | None, float]] = {}
    logged = False
    for item in items:
        kind = item[0]
        if kind == _LOG:
            _, created, level, event, fields, component = item
            record = _log.makeRecord(LOGGER, level, "", 0, event, (), None)
            record.created, record.msecs = created, (created - int(created)) * 1000
            record.fields, record.component = fields, component
            _log.handle(record)
            logged = True
        elif kind == _INC:
            _, name, tags, value = item
            key = (name, tuple(tags.items()) if tags else ())
            sums[key] = (tags, sums.get(key, (None, 0.0))[1] + value)
        elif (m := _metric(item[1])) is not None:
            _record(m, kind, item[3], item[2])
    for (name, _key), (tags, value) in sums.items():
        if (m := _metric(name)) is not None:
            _record(m, _INC, value, tags)
    if logged:
        for h in _log.handlers:
            h.flush()


_writer = Batcher("jr2ray-telemetry-writer", _write, WRITE_DELAY_S)


def flush() -> None:
    """Every event so far written and recorded now (a test reads the file; the process is about to end)."""
    _writer.flush()


atexit.register(flush)  # after logging's own exit hook was registered, so it runs before the files are closed


# ---- logs ---------------------------------------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (ISO-8601 UTC, ms), level, event, component, then the record's fields."""

    def __init__(self) -> None:
        super().__init__()
        # One encoder, and the second's text kept: `json.dumps` with options makes an encoder a call, and a batch's
        # lines mostly share their second.
        self._encode = json.JSONEncoder(default=str, separators=(",", ":")).encode
        self._second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        sec = int(record.created)
        if sec != self._second[0]:
            self._second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
        ts = f"{self._second[1]}.{int(record.msecs):03d}Z"
        line: dict[str, Any] = {"ts": ts, "level": record.levelname.lower(), "event": record.getMessage(),
                                "component": getattr(record, "component", _component), "pid": record.process}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if v is not None})
        return self._encode(line)


class BatchedFileHandler(logging.FileHandler):
    """A log file written a batch at a time: the writer thread flushes it once a batch (`_write`), not once a line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(self.format(record) + self.terminator)
        except Exception:  # noqa: BLE001 - as logging's own handlers: a line that cannot be written is reported
            self.handleError(record)


def log_dir(home: str | Path) -> Path:
    """`$JR2RAY_HOME/logs`: every process of an instance writes its log file here (the caller's settings name the
    home: settings are read at entry points only)."""
    return Path(home).expanduser().resolve() / LOG_DIR


def enabled() -> bool:
    """Whether this process records metrics and logs (`setup`'s `on`)."""
    return _on


def setup(component: str, home: str | Path, on: bool = True) -> Path | None:
    """Send this process's event log to `<home>/logs/<component>-<pid>.jsonl` (once per process; a later call only
    renames the component). Returns the file, or None when the home cannot be written (events are then dropped:
    logging never stops a run). `on=False` (the setting `telemetry` off): no file, no metric, every event a no-op."""
    global _component, _on
    _component = component
    _on = on
    if not on:
        flush()  # what was logged while it was on
        for h in list(_log.handlers):
            _log.removeHandler(h)
            h.close()
        return None
    for h in _log.handlers:
        if isinstance(h, logging.FileHandler):
            return Path(h.baseFilename)
    try:
        where = log_dir(home)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{component}-{os.getpid()}{LOG_SUFFIX}"
        handler = BatchedFileHandler(path, encoding="utf-8", delay=True)  # a pooled host that never hosts: no file
    except (OSError, ValueError):
        return None
    handler.setFormatter(JsonFormatter())
    _log.addHandler(handler)
    return path


def setup_in_actor(component: str, home: str | Path, on: bool = True) -> Path | None:
    """`setup`, but only inside a Ray actor (a class also used in-process, in tests, writes no file then)."""
    try:
        import ray

        if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
            return None
    except ImportError:
        return None
    return setup(component, home, on=on)


def log(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """One structured line (a no-op until `setup` gave this process a file), handed to the writer thread."""
    if _on and _log.handlers and _log.isEnabledFor(level):
        _writer.put((_LOG, time.time(), level, event, fields, _component))


# ---- what an engine tells about itself ----------------------------------------------------------------------------
def _ids(engine: Any) -> dict[str, Any]:
    return {"run": getattr(engine, "run_id", None), "workflow": getattr(engine, "workflow_name", None),
            "version": getattr(engine, "workflow_version", None)}


def _wf(engine: Any) -> str:
    return str(getattr(engine, "workflow_name", None) or "")


def _seat_of(engine: Any, address: str) -> tuple[str, str | None]:
    """(seat, iid) of a Turn address (an iid or a seat name)."""
    turn = getattr(engine, "turns", {}).get(address)
    if turn is not None:
        return str(turn.slot), str(turn.iid)
    return address, None


# ---- the events ---------------------------------------------------------------------------------------------------
def runs_started(starts: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """Runs journaled `queued` by the registry (one door for every start by name)."""
    if not _on:
        return
    by_wf: dict[str, int] = {}
    for rid, spec in starts:
        wf = str(spec.get("workflow") if isinstance(spec.get("workflow"), str) else "")
        by_wf[wf] = by_wf.get(wf, 0) + 1
        log("run.started", run=rid, workflow=wf)
    for wf, n in by_wf.items():
        _inc("jr2ray_runs_started", {"workflow": wf}, n)


def run_created(engine: Any) -> None:
    """A run whose journal its engine created (one actor per run, `LocalRun`): its start."""
    if not _on:
        return
    _inc("jr2ray_runs_started", {"workflow": _wf(engine)})
    log("run.started", **_ids(engine))


def run_activated(engine: Any, since: float, first: bool) -> None:
    """A host took the run (`since`: `time.perf_counter()` when its adopt began)."""
    if not _on:
        return
    seconds = time.perf_counter() - since
    kind = "first" if first else "wake"
    tags = {"workflow": _wf(engine), "kind": kind}
    _inc("jr2ray_activations", tags)
    _observe("jr2ray_wake_seconds", seconds, tags)
    log("run.activated" if first else "run.woken", **_ids(engine), status=engine.status_name(),
        seconds=round(seconds, 6))


def run_parked(engine: Any, early: bool, due_ms: float | None = None) -> None:
    if not _on:
        return
    status = engine.status_name()
    kind = "early" if early else ("idle" if status == "active" else "finished")
    _inc("jr2ray_parks", {"workflow": _wf(engine), "kind": kind})
    log("run.parked", **_ids(engine), kind=kind, status=status, next_timer_ms=due_ms)


def run_ended(engine: Any, outcome: str) -> None:
    if not _on:
        return
    _inc("jr2ray_runs_ended", {"workflow": _wf(engine), "outcome": outcome})
    log("run.ended", **_ids(engine), outcome=outcome, error=getattr(engine, "broken", None))


def run_broken(engine: Any, kind: str, reason: str) -> None:
    """The run's journal is of another chart (drifted), gone (lost) or damaged (corrupt)."""
    if not _on:
        return
    _inc("jr2ray_runs_broken", {"workflow": _wf(engine), "kind": kind})
    log(f"run.{kind}", logging.WARNING, **_ids(engine), reason=reason)


async def picked(engine: Any, address: str, name: str, pick: Awaitable[T]) -> T:
    """Await a pick on the engine; count its verdict and time it to its receipt."""
    if not _on:
        return await pick
    t0 = time.perf_counter()
    receipt = await pick
    seconds = time.perf_counter() - t0
    seat, iid = _seat_of(engine, address)
    refused = getattr(receipt, "refused", None)
    verdict = str(refused or "delivered")
    tags = {"workflow": _wf(engine), "seat": seat}
    _inc("jr2ray_picks", {**tags, "verdict": verdict})
    _observe("jr2ray_pick_seconds", seconds, tags)
    log("pick.refused" if refused else "pick", **_ids(engine), iid=iid, seat=seat, pick=name, verdict=verdict,
        seconds=round(seconds, 6))
    return receipt


def gate_refused(engine: Any, gate_id: str, name: str, exc: BaseException) -> None:
    """A Gate event refused (also one refused before its parked run was taken): counted by the refusal's kind."""
    if not _on:
        return
    verdict = _refusal_kind(exc)
    _inc("jr2ray_gate_events", {"workflow": _wf(engine), "verdict": verdict})
    log("gate.refused", **_ids(engine), gate=gate_id, name=name, verdict=verdict, reason=str(exc)[:300])


def gate_event(engine: Any, gate_id: str, name: str, send: Callable[[], T]) -> T:
    """Send a Gate event through `send()`; count its verdict (accepted, or the refusal's kind) and time it."""
    if not _on:
        return send()
    t0 = time.perf_counter()
    try:
        result = send()
    except Exception as exc:
        gate_refused(engine, gate_id, name, exc)
        raise
    seconds = time.perf_counter() - t0
    _inc("jr2ray_gate_events", {"workflow": _wf(engine), "verdict": "accepted"})
    _observe("jr2ray_gate_event_seconds", seconds, {"workflow": _wf(engine)})
    log("gate.event", **_ids(engine), gate=gate_id, name=name, seconds=round(seconds, 6))
    return result


def gate_opened(engine: Any, gate_id: str, state: str) -> None:
    """A Gate slot started: the run waits there for a person or a webhook (again at each wake, as `turn.opened`)."""
    if not _on:
        return
    log("gate.opened", **_ids(engine), gate=gate_id, state=state)


def gate_closed(engine: Any, gate_id: str) -> None:
    """A Gate slot stopped: its state was left (an event it took, a timer, a cancel)."""
    if not _on:
        return
    log("gate.closed", **_ids(engine), gate=gate_id)


def run_migrated(run_id: str, workflow: str, from_version: str, to_version: str, value: Any, mapped: Any,
                 mapping: dict[str, str]) -> None:
    """`jr2ray migrate` moved a waiting run to another Workflow version, on purpose."""
    if not _on:
        return
    log("run.migrated", run=run_id, workflow=workflow, version=to_version, from_version=from_version, value=value,
        mapped=mapped, map=mapping or None)


def _refusal_kind(exc: BaseException) -> str:
    """A refusal's kind from its exception class (UnknownGate -> unknown_gate)."""
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


def effect_started(engine: Any, effect_id: str, kind: str) -> float:
    """An Effect journaled as started and about to run; returns its start (for `effect_finished`)."""
    if not _on:
        return 0.0
    _inc("jr2ray_effects_started", {"workflow": _wf(engine), "kind": kind})
    log("effect.started", **_ids(engine), effect=effect_id, kind=kind)
    return time.perf_counter()


def effect_finished(engine: Any, effect_id: str, kind: str, outcome: str, since: float | None = None,
                    error: Any = None) -> None:
    """An Effect ended: ok, error, cancelled, interrupted (a restart found it started and not idempotent) or
    replayed (a restart found its result journaled)."""
    if not _on:
        return
    tags = {"workflow": _wf(engine), "kind": kind, "outcome": outcome}
    _inc("jr2ray_effects", tags)
    seconds = None if since is None else time.perf_counter() - since
    if seconds is not None:
        _observe("jr2ray_effect_seconds", seconds, tags)
    level = logging.WARNING if outcome in ("error", "interrupted") else logging.INFO
    log("effect.finished", level, **_ids(engine), effect=effect_id, kind=kind, outcome=outcome,
        seconds=None if seconds is None else round(seconds, 6), error=error)


_opened: dict[tuple[str, str], float] = {}  # (run id, iid) -> when its Turn opened here; dropped at its close


def turn_opened(engine: Any, turn: Any) -> None:
    if not _on:
        return
    _opened[(engine.run_id, turn.iid)] = time.perf_counter()
    if len(_opened) > 100_000:  # Turns of runs that parked open (an external seat) are dropped, oldest first
        for key in list(_opened)[:50_000]:
            del _opened[key]
    _inc("jr2ray_turns_opened", {"workflow": _wf(engine), "seat": str(turn.slot)})
    log("turn.opened", **_ids(engine), iid=turn.iid, seat=turn.slot, state=turn.state)


def turn_closed(engine: Any, turn: Any) -> None:
    if not _on:
        return
    since = _opened.pop((engine.run_id, turn.iid), None)
    seconds = None if since is None else time.perf_counter() - since
    tags = {"workflow": _wf(engine), "seat": str(turn.slot)}
    _inc("jr2ray_turns_closed", tags)
    if seconds is not None:
        _observe("jr2ray_turn_seconds", seconds, tags)
    log("turn.closed", **_ids(engine), iid=turn.iid, seat=turn.slot, state=turn.state,
        seconds=None if seconds is None else round(seconds, 6))


def model_request(engine: Any, row: dict[str, Any]) -> None:
    """One model request a Harness reported (`RequestTelemetry`): its tokens and latency."""
    if not _on:
        return
    seat = str(row.get("slot") or "")
    tags = {"workflow": _wf(engine), "seat": seat}
    outcome = "error" if row.get("error") else "ok"
    _inc("jr2ray_model_requests", {**tags, "outcome": outcome})
    prompt, cached = int(row.get("prompt_tokens") or 0), int(row.get("cached_tokens") or 0)
    _inc("jr2ray_prompt_tokens", tags, prompt)
    _inc("jr2ray_cached_tokens", tags, cached)
    _inc("jr2ray_prefilled_tokens", tags, max(0, prompt - cached))
    if row.get("latency_s") is not None:
        _observe("jr2ray_model_request_seconds", float(row["latency_s"]), tags)
    log("model.request", **_ids(engine), iid=row.get("iid"), seat=seat, model=row.get("model"), outcome=outcome,
        prompt_tokens=prompt, cached_tokens=cached, prefilled_tokens=max(0, prompt - cached),
        seconds=row.get("latency_s"), error=row.get("error"), kv_wait_s=row.get("kv_wait_s"))


def journal_committed(engine: Any, since: float) -> None:
    if not _on:
        return
    _observe("jr2ray_journal_commit_seconds", time.perf_counter() - since, {"workflow": _wf(engine)})


def store_error(engine: Any, exc: BaseException) -> None:
    if not _on:
        return
    kind = {"RunFenced": "fenced", "RunLost": "lost", "RunCorrupt": "corrupt"}.get(type(exc).__name__, "other")
    _inc("jr2ray_store_errors", {"workflow": _wf(engine), "kind": kind})
    log("store.error", logging.ERROR, **_ids(engine), kind=kind, reason=str(exc)[:300])


def timer_fired(run_id: str, due_ms: float) -> None:
    """The timer service woke a parked run for its timer due at `due_ms` (epoch ms)."""
    if not _on:
        return
    lag = max(0.0, time.time() - due_ms / 1000.0)
    _inc("jr2ray_timers_fired")
    _observe("jr2ray_timer_lag_seconds", lag)
    log("timer.fired", run=run_id, due_ms=due_ms, lag_s=round(lag, 6))


def timers_overdue(earliest_due_ms: float | None) -> None:
    """The timer service's view after each poll: how late its most overdue timer is (0 when none is)."""
    if not _on:
        return
    late = 0.0 if earliest_due_ms is None else max(0.0, time.time() - earliest_due_ms / 1000.0)
    _set("jr2ray_timers_overdue_seconds", late)


def refusal(status: int, reason: str, path: str = "", run_id: str | None = None) -> None:
    """The API refused a request (4xx): its status is the kind."""
    if not _on:
        return
    _inc("jr2ray_refusals", {"kind": str(status)})
    log("api.refused", run=run_id, kind=str(status), reason=reason[:300], path=path)


def run_counts(by_status: dict[tuple[str, str], int], by_where: dict[tuple[str, str], int], queue: int,
               max_live: int) -> None:
    """The registry's gauges: runs by (workflow, status) and (workflow, where), zero-filled for every known status
    and where of each workflow seen, so alerts always have their series."""
    if not _on:
        return
    workflows = {wf for wf, _ in by_status} | {wf for wf, _ in by_where}
    for wf in workflows:
        for status in STATUSES:
            _set("jr2ray_runs", float(by_status.get((wf, status), 0)), {"workflow": wf, "status": status})
        for where in WHERES:
            _set("jr2ray_runs_where", float(by_where.get((wf, where), 0)), {"workflow": wf, "where": where})
    _set("jr2ray_queue_length", float(queue))
    _set("jr2ray_live_slots", float(max_live))


def component_started(component: str, **fields: Any) -> None:
    if not _on:
        return
    log(f"{component}.started", **fields)
