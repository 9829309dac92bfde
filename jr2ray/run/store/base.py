"""The journal store's interface, the same for every backend: the plain data a Run hands over and reads back, a
per-run journal handle (`Journal`) and the store of all runs (`JournalStore`). The Run knows only these; the
store knows no chart.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, Field

from ..models import Lifecycle

RETENTION_S = 7 * 24 * 3600.0  # finished runs are kept this long by default


class LedgerKind(StrEnum):
    """Every kind of ledger entry. Replay has one handler for each (jr2ray.run.replay)."""

    START = "start"  # how the run was started: its env without secrets, and its launcher
    ADMISSION = "admission"  # a pick or Gate event admitted to the chart, keyed by its scoped delivery id
    RECEIPT = "receipt"  # a pick's receipt, keyed by its scoped delivery id
    OUTSTANDING = "outstanding"  # progress of a pick that waits for Rest: moved, answers, Chain so far
    NOTICE = "notice"  # text a continued Turn reads on its next surface
    NOTICE_READ = "notice_read"
    EFFECT_STARTED = "effect_started"
    EFFECT_FINISHED = "effect_finished"
    STATUS = "status"  # cancelled or stopped by a caller
    TELEMETRY = "telemetry"
    FEED = "feed"  # one event of the run's feed (SSE), keyed by its number
    TRANSCRIPT = "transcript"  # messages a Harness sent or received, keyed by conversation (jr2ray.run.transcripts)
    MIGRATION = "migration"  # the run was moved to another Workflow version on purpose (jr2ray.run.migration)


Entry = tuple[str, str | None, dict[str, Any]]


class LedgerEntry(BaseModel):
    seq: int
    kind: str
    key: str | None
    digest: str
    data: dict[str, Any]
    at: float


class RunRow(BaseModel):
    id: str
    workflow: str
    digest: str
    input: Any
    status: str
    created_at: float
    updated_at: float


class RunListing(BaseModel):
    """One line of the run list. A run whose journal cannot be read lists too: `corrupt` or `lost`, with the reason."""

    id: str
    workflow: str = ""
    digest: str = ""
    version: str = Field(default="", description="The Workflow version the run is pinned to (see jr2ray.run.versions).")
    input: Any = None
    status: str
    lifecycle: Lifecycle
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    value: Any = Field(default=None, description="A finished or parked run's last value, from the index.")
    waiting: dict[str, Any] | None = Field(
        default=None, description="A parked run's gates, open Turns (seat -> Allowed picks) and next timer.")


class NewRun(BaseModel):
    """One start, as `create_runs` writes it: the run's row and the ledger entries of its first transaction."""

    id: str
    workflow: str
    digest: str
    input: Any = None
    status: str = "queued"
    version: str = ""  # the Workflow version it is pinned to, "" for a workflow given as a machine
    entries: list[tuple[str, str | None, dict[str, Any]]] = Field(default_factory=list)


class VersionRow(BaseModel):
    """One Workflow version: the source of the module that defines the workflow, keyed by its sha256. Any node
    loads a run's code from here (jr2ray.run.versions), never from the file as it is now."""

    workflow: str
    version: str
    target: str  # what the catalog imported: `module` or `module:attr`
    source: str
    created_at: float = 0.0


class Loaded(BaseModel):
    """All a Run needs to rebuild itself: its row, its latest snapshot, and its whole ledger."""

    row: RunRow | None
    snapshot: tuple[str, dict[str, Any]] | None
    ledger: list[LedgerEntry]


class SnapshotRow(BaseModel):
    """One kept snapshot of a run, as written."""

    digest: str
    status: str
    data: dict[str, Any]
    at: float


class RunImage(BaseModel):
    """A run's whole journal as plain data: its row, its kept snapshots (oldest first) and its whole ledger (in
    order; Agents' transcripts are ledger entries too). What `jr2ray store copy` reads from one store and writes to
    another; the times are kept as they were."""

    row: RunRow
    snapshots: list[SnapshotRow]
    ledger: list[LedgerEntry]


class Journal(Protocol):
    """One run's journal: every backend's handle offers these (SQLite's `RunJournal`, PostgreSQL's
    `PgRunJournal`). Only the run's one writer calls the writes; a handle that claimed is fenced by a later claim."""

    broken: Any
    epoch: int | None

    def create(self, run_id: str, workflow: str, digest: str, input: Any, status: str = "active") -> None: ...

    def claim(self, holder: str) -> int: ...

    def commit(self, digest: str, status: str, snapshot: dict[str, Any] | None, entries: list[Entry]) -> None: ...

    def load(self) -> Loaded: ...

    def run(self) -> RunRow | None: ...

    def latest_snapshot(self) -> tuple[str, dict[str, Any]] | None: ...

    def ledger(self, kind: str | LedgerKind | None = None) -> list[LedgerEntry]: ...

    def feed(self, since: int = 0) -> list[dict[str, Any]]: ...

    def counts(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class TimerIndex(Protocol):
    """run id -> the earliest due time (epoch ms) of a parked run's timers, kept in the store beside the journals."""

    def set(self, run_id: str, due_ms: float | None) -> None: ...

    def due(self, before_ms: float, limit: int = 1000) -> list[tuple[str, float]]: ...

    def fired(self, run_id: str, due_ms: float) -> None: ...

    def close(self) -> None: ...


class JournalStore(Protocol):
    """The narrow interface every backend offers: one journal per run, a list of runs, and retention.

    `location` is the setting that names the store (a directory or a database URL): what an actor on another
    process (or node) is given to open the same store. `shared` says whether that works from any node."""

    location: str
    shared: bool

    def timer_index(self) -> TimerIndex: ...

    def open(self, run_id: str, *, create: bool = False) -> Journal: ...

    def exists(self, run_id: str) -> bool: ...

    def list_runs(self, limit: int | None = None, after: str | None = None,
                  status: str | list[str] | None = None) -> list[RunListing]:
        """Runs newest first from an index (no journal is read in full): at most `limit`, after the cursor `after`
        (from `cursor`), with a status in `status` when given."""
        ...

    def cursor(self, line: RunListing) -> str:
        """The opaque cursor that pages on after `line`."""
        ...

    def queued_runs(self) -> list[str]:
        """The ids of `queued` runs, oldest start first: admission's line, rebuilt after a restart."""
        ...

    def run_states(self) -> list[tuple[str, str, str]]:
        """(id, workflow, status) of every run, from the index alone: no journal or file is looked at, and no line
        is built. What the registry's run gauges count every few seconds (with 10,000 runs, `list_runs` read 10,000
        file headers and built 10,000 lines for that). A damaged journal counts as the index last saw it."""
        ...

    def indexed(self, run_id: str) -> RunListing | None:
        """The run's line as the index holds it, even when its journal is gone or damaged; None if it has none."""
        ...

    def set_parked(self, run_id: str, parked: bool, standing: dict[str, Any] | None = None) -> None:
        """Record whether a virtual run is parked (only in its journal) or hosted; a parked one with how it stood
        when it parked (a `Standing`'s dict), so reads of it need not wake it."""
        ...

    def standing(self, run_id: str) -> dict[str, Any] | None:
        """How a parked run stood when it parked (what `set_parked` kept); None when it is hosted, or unknown."""
        ...

    def create_runs(self, runs: list[NewRun]) -> None:
        """Create many runs' journals, each with its first transaction, in as few transactions as the backend
        allows (one for the whole batch on a database). A run that exists already is left as it is."""
        ...

    def awake_runs(self) -> list[str]:
        """Active runs that were hosted (not parked) when last seen: `up` wakes these, oldest first."""
        ...

    def mark_lost(self, run_id: str, reason: str) -> None: ...

    def run_ids(self) -> list[str]: ...

    def listing(self, run_id: str) -> RunListing: ...

    def purge_finished(self, older_than_s: float = RETENTION_S, now: float | None = None) -> list[str]: ...

    # ---- Workflow versions (jr2ray.run.versions) -------------------------------------------------------------
    def put_version(self, row: VersionRow) -> None:
        """Record a version once: a version already there is left as it is (its bytes are its name)."""
        ...

    def get_version(self, workflow: str, version: str) -> VersionRow | None: ...

    def versions(self, workflow: str | None = None, version: str | None = None) -> list[VersionRow]:
        """Every recorded version (of one workflow, and that version, when given), oldest first."""
        ...

    def drop_version(self, workflow: str, version: str) -> bool:
        """Forget a version's source (gc); True if there was one."""
        ...

    def set_run_version(self, run_id: str, version: str) -> None:
        """The version the index lists a run on (a migrated run changes it; its journal says why)."""
        ...

    def version_counts(self) -> dict[tuple[str, str], dict[str, int]]:
        """(workflow, version) -> run count by status, from the index."""
        ...

    def export_run(self, run_id: str) -> RunImage:
        """The run's whole journal (RunLost when it has none, RunCorrupt when it does not read)."""
        ...

    def import_run(self, image: RunImage) -> bool:
        """Write a run's whole journal as `export_run` gave it, times kept, and list it in the index (status,
        value); False, writing nothing, when the run exists here already."""
        ...
