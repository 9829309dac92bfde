"""`jr2ray migrate <workflow> [--from V] --to current [--map old.path=new.path ...] [--dry-run]`: move waiting runs to
the workflow's current version on purpose (jr2ray.run.migration). It works on the store itself; a run live on a host
now is refused (it parks when idle)."""

from __future__ import annotations

import argparse

from jr2ray.cli import errors
from jr2ray.cli.errors import EXIT_ERROR, EXIT_OK
from jr2ray.cli.format import out, say
from jr2ray.run import migration, telemetry, versions
from jr2ray.run.errors import UnknownWorkflow
from jr2ray.run.store import open_store
from jr2ray.settings import Settings


def cmd_migrate(args: argparse.Namespace) -> int:
    settings: Settings = args.settings
    try:
        mapping = migration.parse_map(args.map)
    except ValueError as exc:
        raise errors.bad_map(exc) from None
    store = open_store(settings.store_location())
    try:
        to_version, machine = versions.current(store, args.workflow, settings.catalog_modules())
    except UnknownWorkflow as exc:  # a name the catalog here does not offer: say which, change nothing
        raise errors.bad_workflows(exc) from None
    plan, snaps = migration.plan(store, args.workflow, to_version, machine, mapping, args.from_version)
    if args.json:
        out({**plan.model_dump(), "dry_run": bool(args.dry_run), "moved": not plan.refused and not args.dry_run})
    if plan.refused:
        if not args.json:
            say(str(migration.MigrationRefused(plan)))
        return EXIT_ERROR
    if not args.dry_run:
        telemetry.setup("migrate", settings.home_dir(), on=settings.telemetry)  # one `run.migrated` line a run
        migration.apply(store, plan, snaps, machine, mapping)
    if not args.json:
        verb = "would move" if args.dry_run else "moved"
        print(f"{verb} {len(plan.moves)} run(s) of {args.workflow} to version {versions.short(to_version)}" +
              "".join(f"\n  {m.id} from {versions.short(m.from_version)}" +
                      (f": {m.value} -> {m.mapped}" if m.value != m.mapped else "") for m in plan.moves))
    return EXIT_OK
