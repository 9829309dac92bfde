"""A third journal store, in this process's memory, known to the product only through the store seam: conftest.py
registers it under `memory://` and the whole store suite runs on it as on SQLite and PostgreSQL. It proves a backend
is one module and one `register_backend` call (nothing outside jr2ray/run/store/ names a backend).

Payloads are kept as the JSON text the Run handed over, as on the other backends, so a test can damage one. One
store per location in the process: opening `memory://name` again (what an actor is handed) reaches the same runs.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from jr2ray.run.errors import RunCorrupt, RunFenced, RunLost
from jr2ray.run.models import FINISHED, lifecycle
from jr2ray.run.store import (
    RETENTION_S,
    Entry,
    LedgerEntry,
    LedgerKind,
    Loaded,
    NewRun,
    RunListing,
    RunRow,
    VersionRow,
)
from jr2ray.run.store.index import decode_cursor, encode_cursor

SNAPSHOTS_KEPT = 50


@dataclass
class _Run:
    id: str
    workflow: str
    digest: str
    input: str  # JSON text
    status: str
    created_at: float
    updated_at: float
    epoch: int = 0
    snapshots: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, digest, JSON text)
    ledger: list[tuple[int, str, str | None, str, str, float]] = field(default_factory=list)
    parked: bool = False
    standing: str | None = None  # JSON text of how it stood when it parked
    version: str = ""  # the Workflow version the index lists it on


def _kind(kind: Any) -> str:
    return str(getattr(kind, "value", kind))


def _json(run_id: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RunCorrupt(f"the journal of run {run_id} is damaged (a payload is not JSON: {exc})") from None


class MemoryStore:
    """Every run of one `memory://` location, behind one lock."""

    shared = False  # only this process sees it

    def __init__(self, location: str) -> None:
        self.location = location
        self.lock = threading.RLock()
        self.runs: dict[str, _Run] = {}
        self.lost: dict[str, str] = {}
        self.timers: dict[str, float] = {}
        self.seq = itertools.count(1)
        self.sources: dict[tuple[str, str], VersionRow] = {}  # Workflow versions, in the order first recorded

    def timer_index(self) -> MemoryTimerIndex:
        return MemoryTimerIndex(self)

    def open(self, run_id: str, *, create: bool = False) -> MemoryJournal:
        if not run_id:
            raise ValueError(f"bad run id {run_id!r}")
        return MemoryJournal(self, run_id, create=create)

    def exists(self, run_id: str) -> bool:
        with self.lock:
            return run_id in self.runs or run_id in self.lost

    def run_ids(self) -> list[str]:
        with self.lock:
            return sorted(set(self.runs) | set(self.lost))

    def mark_lost(self, run_id: str, reason: str) -> None:
        with self.lock:
            self.lost[run_id] = reason

    def _line(self, r: _Run) -> RunListing:
        try:
            data = json.loads(r.input)
        except ValueError as exc:
            return RunListing(id=r.id, status="corrupt", lifecycle="corrupt",
                              error=f"the journal of run {r.id} is damaged (its input is not JSON: {exc})")
        life = lifecycle(r.status)
        standing = json.loads(r.standing) if life == "active" and r.parked and r.standing else None
        if life == "finished" and r.snapshots:  # a finished run lists with its last value
            standing = {"status": {"value": json.loads(r.snapshots[-1][2]).get("value")}}
        return RunListing(id=r.id, workflow=r.workflow, digest=r.digest, version=r.version, input=data,
                          status=r.status, lifecycle=life,
                          created_at=r.created_at, updated_at=r.updated_at,
                          value=((standing or {}).get("status") or {}).get("value") if standing else None,
                          waiting=standing.get("waiting") if standing else None)

    def listing(self, run_id: str) -> RunListing:
        with self.lock:
            r = self.runs.get(run_id)
            if r is not None:
                return self._line(r)
            reason = self.lost.get(run_id, f"the journal of run {run_id} is gone")
        return RunListing(id=run_id, status="lost", lifecycle="lost", error=reason)

    def list_runs(self, limit: int | None = None, after: str | None = None,
                  status: str | list[str] | None = None) -> list[RunListing]:
        want = None if status is None else ({status} if isinstance(status, str) else set(status))
        with self.lock:
            rows = sorted(self.runs.values(), key=lambda r: (r.created_at, r.id), reverse=True)
            lost = sorted(rid for rid in self.lost if rid not in self.runs)
        if after is not None:
            at, rid = decode_cursor(after)
            rows = [r for r in rows if (r.created_at, r.id) < (at, rid)]
        if want is not None:
            rows = [r for r in rows if r.status in want]
        lines = [] if after is not None or (want is not None and "lost" not in want) else [
            RunListing(id=rid, status="lost", lifecycle="lost", error=self.lost[rid]) for rid in lost]
        lines += [self._line(r) for r in rows[:limit]]
        return lines if limit is None else lines[:limit]

    def cursor(self, line: RunListing) -> str:
        return encode_cursor(line.created_at, line.id)

    def _oldest(self, pick: Any) -> list[str]:
        with self.lock:
            return [r.id for r in sorted(self.runs.values(), key=lambda r: (r.created_at, r.id)) if pick(r)]

    def queued_runs(self) -> list[str]:
        return self._oldest(lambda r: r.status == "queued")

    def awake_runs(self) -> list[str]:
        return self._oldest(lambda r: r.status == "active" and not r.parked)

    def indexed(self, run_id: str) -> RunListing | None:
        line = self.listing(run_id)
        return None if not line.workflow else line

    def set_parked(self, run_id: str, parked: bool, standing: dict[str, Any] | None = None) -> None:
        with self.lock:
            r = self.runs.get(run_id)
            if r is not None:
                r.parked = parked
                r.standing = json.dumps(standing) if parked and standing is not None else None

    def standing(self, run_id: str) -> dict[str, Any] | None:
        with self.lock:
            r = self.runs.get(run_id)
            return json.loads(r.standing) if r is not None and r.parked and r.standing else None

    # ---- Workflow versions ------------------------------------------------------------------------------------
    def put_version(self, row: VersionRow) -> None:
        with self.lock:
            self.sources.setdefault((row.workflow, row.version),
                                    row.model_copy(update={"created_at": row.created_at or time.time()}))

    def get_version(self, workflow: str, version: str) -> VersionRow | None:
        got = self.versions(workflow, version)
        return got[0] if got else None

    def versions(self, workflow: str | None = None, version: str | None = None) -> list[VersionRow]:
        with self.lock:
            return [row for (w, v), row in self.sources.items()
                    if (workflow is None or w == workflow) and (version is None or v == version)]

    def drop_version(self, workflow: str, version: str) -> bool:
        with self.lock:
            return self.sources.pop((workflow, version), None) is not None

    def set_run_version(self, run_id: str, version: str) -> None:
        with self.lock:
            r = self.runs.get(run_id)
            if r is not None:
                r.version = version

    def run_states(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return [(r.id, r.workflow, r.status) for r in self.runs.values()] + \
                [(rid, "", "lost") for rid in self.lost if rid not in self.runs]

    def version_counts(self) -> dict[tuple[str, str], dict[str, int]]:
        out: dict[tuple[str, str], dict[str, int]] = {}
        with self.lock:
            for r in self.runs.values():
                by = out.setdefault((r.workflow, r.version), {})
                by[r.status] = by.get(r.status, 0) + 1
        return out

    def create_runs(self, runs: list[NewRun]) -> None:
        now = time.time()
        made = [(new, json.dumps(new.input), [(k, key, json.dumps(d, default=str)) for k, key, d in new.entries])
                for new in runs]  # every payload as text first: a batch that cannot be written writes nothing
        with self.lock:
            for new, text, entries in made:
                if new.id in self.runs:
                    continue
                r = self.runs[new.id] = _Run(new.id, new.workflow, new.digest, text, new.status, now, now,
                                             version=new.version)
                r.ledger += [(next(self.seq), _kind(k), key, new.digest, d, now) for k, key, d in entries]

    def purge_finished(self, older_than_s: float = RETENTION_S, now: float | None = None) -> list[str]:
        cutoff = (time.time() if now is None else now) - older_than_s
        with self.lock:
            gone = sorted(rid for rid, r in self.runs.items() if r.status in FINISHED and r.updated_at < cutoff)
            for rid in gone:
                del self.runs[rid]
                self.timers.pop(rid, None)
        return gone


class MemoryJournal:
    """One run's journal: a view on its record in the store, fenced by the record's epoch as on PostgreSQL."""

    def __init__(self, store: MemoryStore, run_id: str, *, create: bool = True) -> None:
        self.store = store
        self.run_id = run_id
        self.broken: RunLost | RunCorrupt | None = None
        self.epoch: int | None = None
        with store.lock:
            there, lost = run_id in store.runs, store.lost.get(run_id)
        if not there and (not create or lost is not None):
            raise RunLost(f"{lost or f'the journal of run {run_id} is gone'}; it is not re-run from its input")

    def close(self) -> None:
        """Nothing to release."""

    def _record(self) -> _Run | None:
        return self.store.runs.get(self.run_id)

    def create(self, run_id: str, workflow: str, digest: str, input: Any, status: str = "active") -> None:
        now = time.time()
        text = json.dumps(input)
        with self.store.lock:
            if run_id in self.store.runs:
                raise ValueError(f"run {run_id} exists")
            self.store.runs[run_id] = _Run(run_id, workflow, digest, text, status, now, now)

    def claim(self, holder: str) -> int:
        with self.store.lock:
            r = self._record()
            if r is None:
                raise RunLost(f"the journal of run {self.run_id} is gone; it is not re-run from its input")
            r.epoch += 1
            self.epoch = r.epoch
            return r.epoch

    def commit(self, digest: str, status: str, snapshot: dict[str, Any] | None, entries: list[Entry]) -> None:
        if self.broken is not None:
            raise self.broken
        now = time.time()
        rows = [(_kind(k), key, json.dumps(d, default=str)) for k, key, d in entries]  # may raise: nothing written
        snap = None if snapshot is None else json.dumps(snapshot, default=str)
        with self.store.lock:
            r = self._record()
            if r is None:
                self.broken = RunLost(f"the journal of run {self.run_id} was removed while the run was live; "
                                      "the run stopped writing")
                raise self.broken
            if self.epoch is not None and r.epoch != self.epoch:
                raise RunFenced(f"run {self.run_id}: another activation holds the lease (epoch {r.epoch}, this one "
                                f"{self.epoch}); this one stopped writing")
            r.ledger += [(next(self.store.seq), k, key, digest, d, now) for k, key, d in rows]
            if snap is not None:
                r.snapshots = [*r.snapshots, (next(self.store.seq), digest, snap)][-SNAPSHOTS_KEPT:]
            r.status, r.updated_at = status, now

    def load(self) -> Loaded:
        with self.store.lock:
            return Loaded(row=self.run(), snapshot=self.latest_snapshot(), ledger=self.ledger())

    def run(self) -> RunRow | None:
        with self.store.lock:
            r = self._record()
            if r is None:
                return None
            return RunRow(id=r.id, workflow=r.workflow, digest=r.digest, input=_json(r.id, r.input), status=r.status,
                          created_at=r.created_at, updated_at=r.updated_at)

    def latest_snapshot(self) -> tuple[str, dict[str, Any]] | None:
        with self.store.lock:
            r = self._record()
            if r is None or not r.snapshots:
                return None
            _, digest, text = r.snapshots[-1]
            return digest, _json(r.id, text)

    def ledger(self, kind: str | LedgerKind | None = None) -> list[LedgerEntry]:
        with self.store.lock:
            r = self._record()
            rows = list(r.ledger) if r is not None else []
        want = None if kind is None else _kind(kind)
        return [LedgerEntry(seq=seq, kind=k, key=key, digest=d, data=_json(self.run_id, text), at=at)
                for seq, k, key, d, text, at in rows if want is None or k == want]

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        return [{**e.data, "seq": int(e.key or 0)} for e in self.ledger("feed") if int(e.key or 0) >= since]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.store.lock:
            r = self._record()
            for _, k, *_rest in (r.ledger if r is not None else []):
                out[k] = out.get(k, 0) + 1
        return out


class MemoryTimerIndex:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def set(self, run_id: str, due_ms: float | None) -> None:
        with self.store.lock:
            if due_ms is None:
                self.store.timers.pop(run_id, None)
            else:
                self.store.timers[run_id] = due_ms

    def due(self, before_ms: float, limit: int = 1000) -> list[tuple[str, float]]:
        with self.store.lock:
            got = sorted(((d, r) for r, d in self.store.timers.items() if d <= before_ms))
        return [(r, d) for d, r in got[:limit]]

    def fired(self, run_id: str, due_ms: float) -> None:
        with self.store.lock:
            if self.store.timers.get(run_id) == due_ms:
                del self.store.timers[run_id]

    def close(self) -> None:
        """Nothing to release."""


class MemoryBackend:
    """The `StoreBackend` of `memory://<name>` settings: one `MemoryStore` per name in this process."""

    name = "memory"
    schemes = ("memory",)
    shared = MemoryStore.shared

    def __init__(self) -> None:
        self.stores: dict[str, MemoryStore] = {}
        self.lock = threading.Lock()

    def open(self, location: str, settings: Any) -> MemoryStore:
        with self.lock:
            got = self.stores.get(location)
            if got is None:
                got = self.stores[location] = MemoryStore(location)
            return got

    def ping(self, location: str, timeout_s: float) -> None:
        """Memory always answers."""
