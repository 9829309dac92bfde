"""The journal: embedded SQLite in WAL mode, one file per run so that each file has exactly one writer.

A narrow plain-data interface (Burr-style persister): the Run hands over JSON; the store knows no chart. `JournalStore`
is that interface (open a run's journal, list runs, purge finished ones); `RunJournal` is one run's journal (load it,
append a macrostep, read its feed); both are declared in `base`, and `postgresql` is the other backend.

After every macrostep the snapshot (with its pending timers) and the ledger entries staged since the last one are
written in one transaction, before the next side effect runs. A file that is gone or damaged is never silently
recreated: opening it raises `RunLost` or `RunCorrupt`, and a live journal checks its file before every commit.

`synchronous=NORMAL` in WAL mode: a commit is in the WAL, handed to the OS, before `commit` returns, so it survives
any crash of the process (a killed actor, the failures the kill suite plays); only a power cut or kernel crash can
drop the last few commits, and never damages the file. FULL would add an fsync to every macrostep of every run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import RunCorrupt, RunFenced, RunLost
from ..models import FINISHED, Lifecycle, lifecycle
from .backends import DIRECTORY
from .base import (
    RETENTION_S,
    Entry,
    LedgerEntry,
    LedgerKind,
    Loaded,
    NewRun,
    RunImage,
    RunListing,
    RunRow,
    SnapshotRow,
    VersionRow,
)
from .index import RunIndex, encode_cursor, run_index
from .timer_index import INDEX_FILE, SqliteTimerIndex

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
  id TEXT PRIMARY KEY, workflow TEXT NOT NULL, digest TEXT NOT NULL, input TEXT, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshot (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, key TEXT, digest TEXT NOT NULL, data TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_kind_key ON ledger(kind, key);
"""
_HEADER = b"SQLite format 3\x00"
_KEPT_OPEN: list[tuple[sqlite3.Connection, int]] = []  # broken journals' handles, never closed (see close)
_EMPTY: list[bytes] = []  # an empty journal's image (its schema), made once per process: see `_journal_image`


def _journal_image(new: NewRun, now: float) -> bytes:
    """A new run's whole journal file, made in memory: its schema, its row and its first entries. Writing these
    bytes is a start's only disk work (running the schema's statements in each new file, then checkpointing its
    WAL on close, cost ten times more). Bytes 18-19 of the header say WAL, so every later open writes in WAL mode."""
    if not _EMPTY:
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.executescript(SCHEMA)
        _EMPTY.append(db.serialize())
        db.close()
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db.deserialize(_EMPTY[0])
        db.execute("BEGIN")
        db.execute("INSERT INTO run (id, workflow, digest, input, status, created_at, updated_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (new.id, new.workflow, new.digest, json.dumps(new.input), new.status, now, now))
        db.executemany("INSERT INTO ledger (kind, key, digest, data, at) VALUES (?, ?, ?, ?, ?)",
                       [(kind, key, new.digest, json.dumps(data, default=str), now) for kind, key, data in new.entries])
        db.execute("COMMIT")
        image = bytearray(db.serialize())
    finally:
        db.close()
    image[18:20] = b"\x02\x02"  # the file format's write and read versions: 2 is WAL
    return bytes(image)


def _copied_image(image: RunImage) -> bytes:
    """A journal file holding a whole copied run (`Store.import_run`), made in memory like `_journal_image`."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db.executescript(SCHEMA)
        db.execute("BEGIN")
        r = image.row
        db.execute("INSERT INTO run (id, workflow, digest, input, status, created_at, updated_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (r.id, r.workflow, r.digest, json.dumps(r.input), r.status, r.created_at, r.updated_at))
        db.executemany("INSERT INTO snapshot (digest, status, data, at) VALUES (?, ?, ?, ?)",
                       [(sn.digest, sn.status, json.dumps(sn.data, default=str), sn.at) for sn in image.snapshots])
        db.executemany("INSERT INTO ledger (kind, key, digest, data, at) VALUES (?, ?, ?, ?, ?)",
                       [(e.kind, e.key, e.digest, json.dumps(e.data, default=str), e.at) for e in image.ledger])
        db.execute("COMMIT")
        data = bytearray(db.serialize())
    finally:
        db.close()
    data[18:20] = b"\x02\x02"  # WAL, as every journal file
    return bytes(data)


def _corrupt(path: Path, exc: BaseException) -> RunCorrupt:
    return RunCorrupt(f"the journal of run {path.stem} is damaged ({path.name}: {type(exc).__name__}: {exc})")


class RunJournal:
    """The single writer of one run's file. `create=False` refuses to make a missing file: the run is lost."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        if not create and not path.exists():
            raise RunLost(f"the journal of run {path.stem} is gone ({path}); it is not re-run from its input")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.exists():
                self._check_header()
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if create:
                self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise _corrupt(path, exc) from None
        # One descriptor kept open for the header check: closing any descriptor of the file would drop this
        # process's POSIX locks on it, SQLite's included, and let a reader checkpoint under the writer.
        self._fd = os.open(str(path), os.O_RDONLY)
        st = os.fstat(self._fd)
        self._ident = (st.st_dev, st.st_ino)
        self._size = st.st_size
        self.broken: RunLost | RunCorrupt | None = None
        self.epoch: int | None = None  # the lease this journal writes under, once `claim` took one
        self._indexed: str | None = None  # the status this handle last wrote to the run index

    def close(self) -> None:
        if self.broken is not None:
            # A file that went bad is left exactly as it is: closing the last connection of a WAL database
            # checkpoints the WAL into the main file, which would write good pages over the damage. So the handle
            # of a broken journal is kept open (rare, and small) for as long as this process lives.
            _KEPT_OPEN.append((self._db, self._fd))
            return
        self._db.close()
        os.close(self._fd)

    def _check_header(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is None:  # before SQLite opens the file: no lock of ours to lose
            with open(self.path, "rb") as f:
                head = f.read(18)
        else:
            head = os.pread(fd, 18, 0)
        if head[:16] != _HEADER:
            raise RunCorrupt(f"the journal of run {self.path.stem} is damaged ({self.path.name}: not a journal "
                             f"file, header {head[:16]!r})")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        size = self.path.stat().st_size
        if page < 512 or size % page:
            raise RunCorrupt(f"the journal of run {self.path.stem} is damaged ({self.path.name}: truncated, "
                             f"{size} bytes is not a whole number of {page}-byte pages)")

    def check_file(self) -> None:
        """Is the file on disk still the one this journal writes? Gone, replaced, shrunk or overwritten: stop."""
        if self.broken is not None:
            raise self.broken
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.broken = RunLost(f"the journal of run {self.path.stem} was removed while the run was live "
                                  f"({self.path}); the run stopped writing")
            raise self.broken from None
        if (st.st_dev, st.st_ino) != self._ident:
            self.broken = RunCorrupt(f"the journal of run {self.path.stem} was replaced by another file while the "
                                     "run was live; the run stopped writing")
        elif st.st_size < self._size:
            self.broken = RunCorrupt(f"the journal of run {self.path.stem} shrank from {self._size} to "
                                     f"{st.st_size} bytes while the run was live; the run stopped writing")
        else:
            try:
                self._check_header()
            except RunCorrupt as exc:
                self.broken = RunCorrupt(f"{exc}; the run stopped writing")
        if self.broken is not None:
            raise self.broken

    # ---- writes --------------------------------------------------------------------------------------------
    def create(self, run_id: str, workflow: str, digest: str, input: Any, status: str = "active") -> None:
        now = time.time()
        self._db.execute("INSERT INTO run (id, workflow, digest, input, status, created_at, updated_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, workflow, digest, json.dumps(input), status, now, now))
        run_index(self.path.parent).put({"id": run_id, "workflow": workflow, "digest": digest, "input": input,
                                         "status": status, "created_at": now, "updated_at": now})
        self._indexed = status

    def claim(self, holder: str) -> int:
        """Take the run's write lease: the next epoch, recorded in the journal. From now on a commit succeeds only
        while the journal's epoch is still this one, so two activations of one run never both write."""
        cur = self._db.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS lease (one INTEGER PRIMARY KEY CHECK (one = 1), "
                    "epoch INTEGER NOT NULL, holder TEXT, at REAL NOT NULL)")
        cur.execute("BEGIN IMMEDIATE")
        try:
            row = cur.execute("SELECT epoch FROM lease WHERE one = 1").fetchone()
            epoch = (row[0] if row else 0) + 1
            cur.execute("INSERT OR REPLACE INTO lease (one, epoch, holder, at) VALUES (1, ?, ?, ?)",
                        (epoch, holder, time.time()))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        self.epoch = epoch
        return epoch

    def _check_lease(self, cur: sqlite3.Cursor) -> None:
        if self.epoch is None:
            return
        row = cur.execute("SELECT epoch FROM lease WHERE one = 1").fetchone()
        if row is None or row[0] != self.epoch:
            raise RunFenced(f"run {self.path.stem}: another activation holds the lease (epoch "
                            f"{row[0] if row else '?'}, this one {self.epoch}); this one stopped writing")

    def commit(self, digest: str, status: str, snapshot: dict[str, Any] | None, entries: list[Entry]) -> None:
        """Append one macrostep: the snapshot and the staged ledger entries, atomically, or raise and write nothing."""
        self.check_file()
        now = time.time()
        cur = self._db.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                self._check_lease(cur)
                for kind, key, data in entries:
                    cur.execute("INSERT INTO ledger (kind, key, digest, data, at) VALUES (?, ?, ?, ?, ?)",
                                (str(getattr(kind, "value", kind)), key, digest, json.dumps(data, default=str), now))
                if snapshot is not None:
                    cur.execute("INSERT INTO snapshot (digest, status, data, at) VALUES (?, ?, ?, ?)",
                                (digest, status, json.dumps(snapshot, default=str), now))
                    cur.execute("DELETE FROM snapshot WHERE seq < (SELECT MAX(seq) FROM snapshot) - 50")
                cur.execute("UPDATE run SET status = ?, updated_at = ? ", (status, now))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError:
            raise  # busy or out of disk: the transaction did not happen, and the file is not damaged
        except sqlite3.DatabaseError as exc:
            self.broken = _corrupt(self.path, exc)
            raise self.broken from None
        self._size = max(self._size, self.path.stat().st_size)
        if status != self._indexed:  # the index follows every status change, right after the commit
            run_index(self.path.parent).set_status(self.path.stem, status, now,
                                                   value=(snapshot or {}).get("value"))
            self._indexed = status

    # ---- reads ---------------------------------------------------------------------------------------------
    def load(self) -> Loaded:
        """The whole journal, checked: a damaged file raises RunCorrupt naming what is wrong."""
        try:
            bad = self._db.execute("PRAGMA quick_check").fetchone()
            if bad is None or bad[0] != "ok":
                raise RunCorrupt(f"the journal of run {self.path.stem} is damaged ({self.path.name}: "
                                 f"quick_check says {bad[0] if bad else 'nothing'})")
            return Loaded(row=self.run(), snapshot=self.latest_snapshot(), ledger=self.ledger())
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise _corrupt(self.path, exc) from None

    def run(self) -> RunRow | None:
        row = self._read("SELECT id, workflow, digest, input, status, created_at, updated_at FROM run").fetchone()
        if row is None:
            return None
        return RunRow(id=row[0], workflow=row[1], digest=row[2], input=json.loads(row[3]) if row[3] else None,
                      status=row[4], created_at=row[5], updated_at=row[6])

    def latest_snapshot(self) -> tuple[str, dict[str, Any]] | None:
        row = self._read("SELECT digest, data FROM snapshot ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def ledger(self, kind: str | LedgerKind | None = None) -> list[LedgerEntry]:
        q = "SELECT seq, kind, key, digest, data, at FROM ledger"
        args: tuple[Any, ...] = ()
        if kind is not None:
            q += " WHERE kind = ?"
            args = (str(getattr(kind, "value", kind)),)
        rows = self._read(q + " ORDER BY seq", args).fetchall()
        return [LedgerEntry(seq=r[0], kind=r[1], key=r[2], digest=r[3], data=json.loads(r[4]), at=r[5])
                for r in rows]

    def feed(self, since: int = 0) -> list[dict[str, Any]]:
        """The journaled feed from event number `since` on, each event with its number as `seq`."""
        rows = self._read("SELECT key, data FROM ledger WHERE kind = 'feed' AND CAST(key AS INTEGER) >= ? "
                          "ORDER BY seq", (since,)).fetchall()
        return [{**json.loads(d), "seq": int(k)} for k, d in rows]

    def counts(self) -> dict[str, int]:
        rows = self._read("SELECT kind, COUNT(*) FROM ledger GROUP BY kind").fetchall()
        return {k: n for k, n in rows}

    def _read(self, q: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(q, args)
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, exc) from None


class Store:
    """A directory of run journals. Readers may open any file; only the owning Run writes one."""

    shared = False  # the files are on one node's disk: every reader and writer must run there

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.location = str(self.directory)
        self._built = False  # the index was seen filled by this handle

    def timer_index(self) -> SqliteTimerIndex:
        return SqliteTimerIndex(self.directory)

    def path(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"bad run id {run_id!r}")
        return self.directory / f"{run_id}.sqlite"

    def _lost_path(self, run_id: str) -> Path:
        return self.directory / f"{run_id}.lost"

    def exists(self, run_id: str) -> bool:
        return self.path(run_id).exists() or self._lost_path(run_id).exists()

    def open(self, run_id: str, *, create: bool = False) -> RunJournal:
        """A run's journal. Readers open with the default; only a run's first start passes `create=True`."""
        return RunJournal(self.path(run_id), create=create)

    def run_ids(self) -> list[str]:
        return sorted({p.stem for p in self.directory.glob("*.sqlite")} |
                      {p.stem for p in self.directory.glob("*.lost")})

    def mark_lost(self, run_id: str, reason: str) -> None:
        """Remember a run whose journal is gone, so that it lists as `lost` (the file itself is never remade)."""
        at = time.time()
        self._lost_path(run_id).write_text(json.dumps({"id": run_id, "error": reason, "at": at}))
        index = self.index()
        if run_id in index.ids():
            index.set_status(run_id, "lost", at, reason)
        else:
            index.put({"id": run_id, "status": "lost", "error": reason, "created_at": at, "updated_at": at})

    def index(self) -> RunIndex:
        """The store's run index; a fresh one (a store from before it, or one deleted) is rebuilt from the files."""
        idx = run_index(self.directory)
        if not self._built:
            if not idx.built():
                have = idx.ids()
                for rid in self.run_ids():
                    if rid not in have:
                        idx.put(self.listing(rid).model_dump())
                idx.mark_built()
            self._built = True
        return idx

    def listing(self, run_id: str) -> RunListing:
        """One run's line, read from its journal; never raises for a bad file: the line says `corrupt` or `lost`."""
        path = self.path(run_id)
        if not path.exists():
            return self._lost_line(run_id)
        try:
            j = RunJournal(path, create=False)
            try:
                row = j.run()
            finally:
                j.close()
            if row is None:
                raise RunCorrupt(f"the journal of run {run_id} has no run row")
        except (RunCorrupt, RunLost) as exc:
            name: Lifecycle = "lost" if isinstance(exc, RunLost) else "corrupt"
            return RunListing(id=run_id, status=name, lifecycle=name, error=str(exc))
        return RunListing(**row.model_dump(), lifecycle=lifecycle(row.status))

    def _lost_line(self, run_id: str, row: dict[str, Any] | None = None) -> RunListing:
        lost = self._lost_path(run_id)
        reason = (json.loads(lost.read_text()).get("error") if lost.exists()
                  else f"the journal of run {run_id} is gone")
        keep = {k: row[k] for k in ("workflow", "digest", "input", "created_at", "updated_at")} if row else {}
        return RunListing(id=run_id, status="lost", lifecycle="lost", error=reason, **keep)

    def _indexed_line(self, row: dict[str, Any]) -> RunListing:
        """A line from its index row, after a look at the file that opens no database: a file that is gone lists
        as `lost`, one whose header or size is wrong is read in full (and lists as `corrupt`)."""
        rid = row["id"]
        path = self.path(rid)
        try:
            head = _read_head(path)
        except FileNotFoundError:
            return self._lost_line(rid, row)
        if head is not None:  # read in full; it keeps its index place (a cursor pages on from it)
            line = self.listing(rid)
            return line.model_copy(update={k: row[k] for k in ("workflow", "digest", "input", "created_at",
                                                                 "updated_at", "version")})
        keep = {k: row[k] for k in ("id", "workflow", "digest", "input", "status", "created_at", "updated_at",
                                    "version")}
        life = lifecycle(row["status"])
        parked = life == "active" and bool(row["parked"])  # a live run's value changes without the index
        return RunListing(**keep, lifecycle=life, value=row["value"] if life == "finished" or parked else None,
                          waiting=row.get("waiting") if parked else None)

    def list_runs(self, limit: int | None = None, after: str | None = None,
                  status: str | list[str] | None = None) -> list[RunListing]:
        """Runs newest first, from the index: at most `limit`, after the cursor `after` (see `cursor`), with a
        status in `status` when given. No journal is opened unless its file looks damaged."""
        rows = self.index().page(limit, after, status)
        lines = [self._indexed_line(r) for r in rows]
        if status is None:
            return lines
        want = {status} if isinstance(status, str) else set(status)
        return [line for line in lines if line.status in want]  # a file found damaged lists as corrupt

    def queued_runs(self) -> list[str]:
        """The ids of `queued` runs, oldest start first (admission hands slots out in this order)."""
        return [r["id"] for r in self.index().page(None, status="queued", oldest_first=True)]

    def run_states(self) -> list[tuple[str, str, str]]:
        """(id, workflow, status) of every run, from the index database alone (no journal file is looked at)."""
        return self.index().states()

    def indexed(self, run_id: str) -> RunListing | None:
        """The run's line as the index last saw it (its workflow and input outlive a lost journal); None if none."""
        row = self.index().one(run_id)
        if row is None or not row["workflow"]:
            return None
        keep = {k: row[k] for k in ("id", "workflow", "digest", "input", "status", "created_at", "updated_at",
                                    "version")}
        return RunListing(**keep, lifecycle=lifecycle(row["status"]))

    def set_parked(self, run_id: str, parked: bool, standing: dict[str, Any] | None = None) -> None:
        """Whether the run is parked (only in its journal), with how it stood then; `up` wakes the active runs
        that were not."""
        self.index().set_parked(run_id, parked, standing if parked else None)

    def standing(self, run_id: str) -> dict[str, Any] | None:
        return self.index().standing(run_id)

    def create_runs(self, runs: list[NewRun]) -> None:
        """Each run's journal file is written whole, from an image made in memory (see `_journal_image`), under a
        name of its own, then linked to the run's name: the run's file either does not exist or is whole. The
        index gets the whole batch in one transaction. A run whose file exists is left alone, but listed as its
        journal says it stands if the index has no line for it: a batch retried after its first try wrote the
        files and died before the index (Ray sends the registry's call again) would leave them journaled and never
        listed."""
        made: list[dict[str, Any]] = []
        index = self.index()
        for new in runs:
            now = time.time()
            path = self.path(new.id)
            staged = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.new")  # not a *.sqlite
            fd = os.open(str(staged), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                try:
                    os.write(fd, _journal_image(new, now))
                finally:
                    os.close(fd)
                os.link(staged, path)  # fails if the run's file exists: never a half-written one under its name
            except FileExistsError:
                if index.one(new.id) is None:
                    made.append({**self.listing(new.id).model_dump(exclude={"lifecycle"}), "version": new.version})
                continue
            finally:
                staged.unlink(missing_ok=True)
            made.append({**new.model_dump(exclude={"entries"}), "created_at": now, "updated_at": now})
        if made:
            index.put_many(made)

    def awake_runs(self) -> list[str]:
        """Active runs that were not parked when last seen (live when the instance went down), oldest first."""
        rows = self.index().page(None, status="active", oldest_first=True)
        return [r["id"] for r in rows if not r["parked"] and self._indexed_line(r).lifecycle == "active"]

    def cursor(self, line: RunListing) -> str:
        """The cursor that pages on after `line`."""
        return encode_cursor(line.created_at, line.id)

    def purge_finished(self, older_than_s: float = RETENTION_S, now: float | None = None) -> list[str]:
        """Remove the journals of runs finished (done, error, cancelled) more than `older_than_s` ago."""
        removed: list[str] = []
        cutoff = (time.time() if now is None else now) - older_than_s
        index = self.index()
        for cand in index.page(None, status=sorted(FINISHED)):
            r = self.listing(cand["id"])  # the journal's own time is the truth
            if r.status in FINISHED and r.updated_at < cutoff:
                for suffix in ("", "-wal", "-shm"):
                    Path(str(self.path(r.id)) + suffix).unlink(missing_ok=True)
                index.delete(r.id)
                removed.append(r.id)
        if removed and (self.directory / INDEX_FILE).exists():  # no reminder outlives its run (as on PostgreSQL)
            timers = self.timer_index()
            for rid in removed:
                timers.set(rid, None)
            timers.close()
        return sorted(removed)


    # ---- Workflow versions (in the index database, beside the run list) --------------------------------------
    def put_version(self, row: VersionRow) -> None:
        self.index().put_version(row.workflow, row.version, row.target, row.source, row.created_at or time.time())

    def get_version(self, workflow: str, version: str) -> VersionRow | None:
        got = self.versions(workflow, version)
        return got[0] if got else None

    def versions(self, workflow: str | None = None, version: str | None = None) -> list[VersionRow]:
        return [VersionRow(workflow=w, version=v, target=t, source=src, created_at=at)
                for w, v, t, src, at in self.index().versions(workflow, version)]

    def drop_version(self, workflow: str, version: str) -> bool:
        return self.index().drop_version(workflow, version)

    def set_run_version(self, run_id: str, version: str) -> None:
        self.index().set_version(run_id, version)

    def version_counts(self) -> dict[tuple[str, str], dict[str, int]]:
        out: dict[tuple[str, str], dict[str, int]] = {}
        for w, v, status, n in self.index().version_counts():
            out.setdefault((w, v or ""), {})[status] = int(n)
        return out

    def export_run(self, run_id: str) -> RunImage:
        """The run's whole journal: row, kept snapshots and ledger (RunLost/RunCorrupt for a bad file)."""
        j = RunJournal(self.path(run_id), create=False)
        try:
            loaded = j.load()  # checked: a damaged file raises here
            rows = j._read("SELECT digest, status, data, at FROM snapshot ORDER BY seq").fetchall()
        finally:
            j.close()
        if loaded.row is None:
            raise RunCorrupt(f"the journal of run {run_id} has no run row")
        snaps = [SnapshotRow(digest=d, status=st, data=json.loads(x), at=at) for d, st, x, at in rows]
        return RunImage(row=loaded.row, ledger=loaded.ledger, snapshots=snaps)

    def import_run(self, image: RunImage) -> bool:
        """The copied run's file, written whole (never over an existing one), then its index line."""
        r = image.row
        try:
            fd = os.open(str(self.path(r.id)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, _copied_image(image))
        finally:
            os.close(fd)
        value = image.snapshots[-1].data.get("value") if image.snapshots else None
        self.index().put({**r.model_dump(), "value": value if lifecycle(r.status) == "finished" else None})
        return True


def _read_head(path: Path) -> str | None:
    """None when the file starts like a whole SQLite journal; else what is wrong. FileNotFoundError when gone."""
    with open(path, "rb") as f:
        head = f.read(18)
        size = os.fstat(f.fileno()).st_size
    if head[:16] != _HEADER:
        return "not a journal file"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    return None if page >= 512 and size % page == 0 else "truncated"


def journal_bytes(path: Path) -> bytes:
    """A journal's raw bytes (main file and WAL), read without SQLite: what refusal tests compare."""
    wal = Path(str(path) + "-wal")
    return (path.read_bytes() if path.exists() else b"") + b"|" + (wal.read_bytes() if wal.exists() else b"")


class SqliteBackend:
    """A plain directory: the embedded default (registered in the package's `__init__`)."""

    name = "sqlite"
    schemes = (DIRECTORY,)  # a setting with no scheme
    shared = Store.shared

    def open(self, location: str, settings: Any) -> Store:
        """`settings` is unused: a directory of files has nothing to size."""
        return Store(Path(location).expanduser())

    def ping(self, location: str, timeout_s: float) -> None:
        """The directory can be made and written."""
        path = Path(location).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"the store directory {path} is not writable")
