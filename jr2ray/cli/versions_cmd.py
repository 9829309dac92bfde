"""The CLI's view of Workflow versions (jr2ray.run.versions): `jr2ray workflows`, `jr2ray reload`, what `up` says
about runs on older versions and runs that cannot be loaded, and the version half of `jr2ray gc`. They all work on
the store itself, so they need no instance up."""

from __future__ import annotations

import argparse
import time
from typing import Any

from jr2ray.cli.errors import EXIT_OK
from jr2ray.cli.format import out, say
from jr2ray.run import versions
from jr2ray.run.catalog import catalog
from jr2ray.run.store import JournalStore, open_store
from jr2ray.settings import Settings

WAITING = ("active", "queued", "drifted")


def _store(settings: Settings) -> JournalStore:
    return open_store(settings.store_location())


def current_versions(store: JournalStore, modules: list[str], record: bool) -> dict[str, str | Exception]:
    """Each catalog workflow's current version (recorded in the store when `record`), or why it has none."""
    got: dict[str, str | Exception] = {}
    for name, entry in sorted(catalog(modules).items()):
        try:
            row = versions.capture(name, entry.target)
            if record:
                versions.record(store, row)
            got[name] = row.version
        except Exception as exc:  # noqa: BLE001 - one workflow that cannot be captured must not hide the others
            got[name] = exc
    return got


def table(store: JournalStore, modules: list[str]) -> list[dict[str, Any]]:
    """One row per (workflow, version): whether it is current, when recorded, and its runs by status."""
    counts = store.version_counts()
    now = current_versions(store, modules, record=False)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for kept in store.versions():
        rows[(kept.workflow, kept.version)] = {"workflow": kept.workflow, "version": kept.version,
                                               "recorded_at": kept.created_at, "in_store": True}
    for (w, v), by_status in counts.items():
        row = rows.setdefault((w, v), {"workflow": w, "version": v, "recorded_at": None, "in_store": False})
        row["runs"] = dict(sorted(by_status.items()))
    for w, cur in now.items():
        if isinstance(cur, str):
            rows.setdefault((w, cur), {"workflow": w, "version": cur, "recorded_at": None, "in_store": False})
    for (w, v), row in rows.items():
        row.setdefault("runs", {})
        row["current"] = now.get(w) == v
    return sorted(rows.values(), key=lambda r: (r["workflow"], r["recorded_at"] or float("inf"), r["version"]))


def cmd_workflows(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    rows = table(_store(settings), settings.catalog_modules())
    if args.json:
        out(rows)
        return EXIT_OK
    for r in rows:
        if not r["version"]:
            label = "(no version: started before versions)"
        else:
            label = versions.short(r["version"]) + ("  current" if r["current"] else "") + \
                ("" if r["in_store"] else "  NOT IN STORE")
        runs = ", ".join(f"{n} {s}" for s, n in r["runs"].items()) or "no runs"
        print(f"{r['workflow']:<16} {label:<34} {runs}")
    return EXIT_OK


def up_lines(store: JournalStore, modules: list[str]) -> list[str]:
    """What `up` says per workflow: its current version, how many waiting runs are on older versions, and a warning
    for runs whose version cannot be loaded (drifted)."""
    now = current_versions(store, modules, record=True)
    counts = store.version_counts()
    lines: list[str] = []
    for w, v in now.items():
        if isinstance(v, Exception):
            lines.append(f"warning: workflow {w!r} has no version: {v}")
            continue
        older = sum(n for (cw, cv), by in counts.items() if cw == w and cv != v
                    for s, n in by.items() if s in ("active", "queued"))
        lines.append(f"workflow {w}: new runs start on version {versions.short(v)}" +
                     (f"; {older} waiting run(s) on older versions finish on theirs" if older else ""))
    have = {(r.workflow, r.version) for r in store.versions()}
    lost = [(w, v, sum(n for s, n in by.items() if s in WAITING)) for (w, v), by in counts.items()
            if v and (w, v) not in have]
    for w, v, n in lost:
        if n:
            lines.append(f"warning: {n} run(s) of {w} are on version {versions.short(v)}, which is not in the store: "
                         f"they are drifted (jr2ray runs --status drifted) until it is recorded again")
    return lines


def print_up(settings: Settings, modules: list[str]) -> None:
    """`up` (and `reload`): never fails `up` itself; a store it cannot read is one warning."""
    try:
        for line in up_lines(_store(settings), modules):
            say(line)
    except Exception as exc:  # noqa: BLE001 - versions are news here, not a reason to stop `up`
        say(f"warning: could not read Workflow versions: {exc}")


def cmd_reload(args: argparse.Namespace) -> int:
    """Record each workflow's current file as its version for new runs, and say which it is. Running and waiting
    runs stay on their own versions; hosts load by version, so there is nothing to restart."""
    settings: Settings = args.settings
    print_up(settings, settings.catalog_modules())
    return EXIT_OK


def gc_versions(store: JournalStore, older_than_s: float, modules: list[str], now: float | None = None) -> list[str]:
    """Drop versions recorded more than `older_than_s` ago that no run in the store uses and that are no workflow's
    current version. Returns `workflow@short` of each."""
    cutoff = (time.time() if now is None else now) - older_than_s
    used = {k for k, by in store.version_counts().items() if sum(by.values())}
    current = {(w, v) for w, v in current_versions(store, modules, record=False).items() if isinstance(v, str)}
    dropped: list[str] = []
    for v in store.versions():
        key = (v.workflow, v.version)
        if v.created_at < cutoff and key not in used and key not in current and store.drop_version(*key):
            versions.forget(*key)
            dropped.append(f"{v.workflow}@{versions.short(v.version)}")
    return dropped
