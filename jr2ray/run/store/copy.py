"""Moving runs between stores (`jr2ray store copy`): every run's journal, how a parked run stood, the timers, and
whatever else a store keeps, copied over the store interface's own reads and writes, then verified.

What is copied is a list of parts. A run part is read and written per run (its journal: row, snapshots, ledger with
the Agents' transcripts; how it stood when it parked, which the run index lists); a store part once for the whole
store (the timers of parked runs). Something new a store keeps joins with one line in `RUN_PARTS` or
`STORE_PARTS`, given the two store methods that read and write it.

The copy is checked before it writes (a run the target holds already must be the same run, byte for byte, or
nothing is written) and verified after: the same runs, the same counts, the same hash per journal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from ..errors import RunCorrupt, RunLost
from .base import JournalStore, RunImage

# ---- the parts ------------------------------------------------------------------------------------------------


class RunPart(BaseModel):
    """Something a store keeps per run: read from the source, written to the target (None: nothing to write)."""

    name: str
    read: Callable[[JournalStore, str], Any]
    write: Callable[[JournalStore, str, Any], Any]


class StorePart(BaseModel):
    """Something a store keeps once for all its runs."""

    name: str
    read: Callable[[JournalStore], Any]
    write: Callable[[JournalStore, Any], Any]


def _write_versions(store: JournalStore, rows: list[Any]) -> None:
    """Each Workflow version once (a version already there is the same bytes: its name is their hash)."""
    for row in rows:
        store.put_version(row)


def _write_standing(store: JournalStore, run_id: str, standing: dict[str, Any] | None) -> None:
    if standing is not None:
        store.set_parked(run_id, True, standing)


def _read_timers(store: JournalStore) -> list[tuple[str, float]]:
    timers = store.timer_index()
    try:
        return timers.due(float("inf"), limit=10**9)
    finally:
        timers.close()


def _write_timers(store: JournalStore, due: list[tuple[str, float]]) -> None:
    timers = store.timer_index()
    try:
        for run_id, due_ms in due:
            timers.set(run_id, due_ms)
    finally:
        timers.close()


# The journal first: every other part of a run hangs on it.
RUN_PARTS: list[RunPart] = [
    RunPart(name="journal", read=lambda s, rid: s.export_run(rid), write=lambda s, rid, image: s.import_run(image)),
    RunPart(name="standing", read=lambda s, rid: s.standing(rid), write=_write_standing),
    RunPart(name="version", read=lambda s, rid: getattr(s.indexed(rid), "version", ""),
            write=lambda s, rid, v: s.set_run_version(rid, v) if v else None),
]
STORE_PARTS: list[StorePart] = [
    StorePart(name="timers", read=_read_timers, write=_write_timers),
    StorePart(name="versions", read=lambda s: s.versions(), write=_write_versions),
]


# ---- verification ---------------------------------------------------------------------------------------------


def journal_hash(image: RunImage) -> str:
    """A hash of everything a run's journal holds (row, snapshots, ledger in order; not the backend's own row
    numbers), the same on either backend for the same run."""
    body = {"row": image.row.model_dump(),
            "snapshots": [s.model_dump() for s in image.snapshots],
            "ledger": [e.model_dump(exclude={"seq"}) for e in image.ledger]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def journal_counts(image: RunImage) -> dict[str, int]:
    counts: dict[str, int] = {"snapshots": len(image.snapshots)}
    for e in image.ledger:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    return counts


class CopyReport(BaseModel):
    """What a copy did and what its check found."""

    copied: list[str] = Field(default_factory=list, description="Runs written to the target.")
    already: list[str] = Field(default_factory=list, description="Runs the target held already, the same.")
    lost: list[str] = Field(default_factory=list, description="Runs the source lists as lost: marked lost there.")
    unreadable: dict[str, str] = Field(default_factory=dict, description="Runs whose journal does not read (not "
                                                                          "copied), with the reason.")
    counts: dict[str, int] = Field(default_factory=dict, description="Runs per status, the same in both stores.")
    store_parts: dict[str, int] = Field(default_factory=dict, description="Rows copied of each store part.")
    hashes: dict[str, str] = Field(default_factory=dict, description="Each copied run's journal hash.")


class CopyRefused(Exception):
    """The copy would overwrite other runs, or found the target different after writing: the reason says which."""


def _status_counts(store: JournalStore, ids: set[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in store.list_runs():
        if line.id in ids:
            counts[line.status] = counts.get(line.status, 0) + 1
    return counts


def copy_store(source: JournalStore, target: JournalStore,
               progress: Callable[[str], None] | None = None) -> CopyReport:
    """Copy every run of `source` into `target`, then verify. Raises CopyRefused, having written nothing, when the
    target holds a run of the same id that differs; raises it after writing when the check finds a difference."""
    say = progress or (lambda _m: None)
    report = CopyReport()
    images: dict[str, RunImage] = {}
    for line in source.list_runs():
        if line.status == "lost":
            report.lost.append(line.id)
            continue
        try:
            images[line.id] = source.export_run(line.id)
        except (RunLost, RunCorrupt) as exc:
            report.unreadable[line.id] = str(exc)
    for rid, image in images.items():  # checked before anything is written
        if not target.exists(rid):
            continue
        try:
            same = journal_hash(target.export_run(rid)) == journal_hash(image)
        except (RunLost, RunCorrupt):
            same = False
        if not same:
            raise CopyRefused(f"the target already holds a run {rid} that differs from the source's; nothing was "
                              "copied")
        report.already.append(rid)
    say(f"copying {len(images) - len(report.already)} run(s)")
    for rid, image in images.items():
        if rid in report.already:
            continue
        for part in RUN_PARTS:
            value = image if part.name == "journal" else part.read(source, rid)
            part.write(target, rid, value)
        report.copied.append(rid)
    for rid in report.lost:
        line = source.listing(rid)
        target.mark_lost(rid, line.error or f"the journal of run {rid} is gone")
    for spart in STORE_PARTS:
        rows = spart.read(source)
        spart.write(target, rows)
        report.store_parts[spart.name] = len(rows) if hasattr(rows, "__len__") else 1
    _verify(source, target, images, report)
    return report


def _verify(source: JournalStore, target: JournalStore, images: dict[str, RunImage], report: CopyReport) -> None:
    """Read the target back: every run there, with the same counts and the same hash per journal, the same
    standing, and the same runs per status as the source."""
    for rid, image in images.items():
        got = target.export_run(rid)
        if journal_counts(got) != journal_counts(image):
            raise CopyRefused(f"run {rid}: the copy holds {journal_counts(got)}, the source "
                              f"{journal_counts(image)}")
        digest = journal_hash(got)
        if digest != journal_hash(image):
            raise CopyRefused(f"run {rid}: the copy's journal hash differs from the source's")
        if target.standing(rid) != source.standing(rid):
            raise CopyRefused(f"run {rid}: the copy's parked standing differs from the source's")
        report.hashes[rid] = digest
    ids = set(images)
    want, got_counts = _status_counts(source, ids), _status_counts(target, ids)
    if want != got_counts:
        raise CopyRefused(f"runs per status differ: source {want}, copy {got_counts}")
    report.counts = want


def active_elsewhere(current: JournalStore, other: JournalStore) -> list[str]:
    """The active (or queued) runs `other` holds that `current` does not: runs a move to `current` left behind,
    which nothing serves (their Gates take nothing, their timers never fire)."""
    return [line.id for line in other.list_runs(status=["active", "queued"]) if not current.exists(line.id)]


__all__ = ["RUN_PARTS", "STORE_PARTS", "CopyRefused", "CopyReport", "RunPart", "StorePart", "active_elsewhere",
           "copy_store", "journal_counts", "journal_hash"]
