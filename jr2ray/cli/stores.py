"""`jr2ray store copy` (moving runs to another store) and `up`'s word about runs left in another store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jr2ray.cli import errors
from jr2ray.cli.errors import EXIT_OK
from jr2ray.cli.format import out, say
from jr2ray.instance_record import read_instance
from jr2ray.settings import is_url, printable_store


def _same(a: str, b: str) -> bool:
    if is_url(a) or is_url(b):
        return a == b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _location(given: str) -> str:
    """A store as a setting names it: a database URL as it is, a directory made absolute."""
    return given if is_url(given) else str(Path(given).expanduser().resolve())


def cmd_store_copy(args: argparse.Namespace) -> int:
    """Copy every run of the store (`--from`, else the instance's) to `--to`, then verify it; refused while this
    home's instance is up on either store, since a live instance keeps writing the source."""
    from jr2ray.run.head import head_state
    from jr2ray.run.store import open_store
    from jr2ray.run.store.copy import CopyRefused, copy_store

    settings = args.settings
    home = settings.home_dir()
    source = _location(args.source) if args.source else settings.store_location()
    target = _location(args.to)
    if _same(source, target):
        raise errors.copy_onto_itself(printable_store(source) or source)
    inst = read_instance(home)
    kept = settings.kept_config()
    serving = kept.store if kept is not None and kept.store else settings.store_location()
    if inst is not None and head_state(inst).state != "gone" and any(_same(serving, s) for s in (source, target)):
        raise errors.copy_while_up(printable_store(serving) or serving, home)
    try:
        src, dst = open_store(source), open_store(target)
    except Exception as exc:  # noqa: BLE001 - a database that does not answer; its URL is masked below
        raise errors.bad_store(f"cannot open the stores: {type(exc).__name__}: {exc}") from None
    say(f"copying runs from {printable_store(source)} to {printable_store(target)}")
    try:
        report = copy_store(src, dst, progress=say)
    except CopyRefused as exc:
        raise errors.copy_refused(str(exc)) from None
    summary: dict[str, Any] = {"from": printable_store(source), "to": printable_store(target),
                               "copied": len(report.copied), "already_there": len(report.already),
                               "lost": len(report.lost), "not_readable": report.unreadable,
                               "runs_by_status": report.counts, "store_parts": report.store_parts,
                               "verified": "counts and a hash per journal"}
    if args.json:
        summary["hashes"] = report.hashes
    out(summary)
    say(f"to serve them: `jr2ray up --store {printable_store(target)}` (once the instance is down)")
    return EXIT_OK


def left_behind(current: str, stores: list[str]) -> list[str]:
    """What `up` says for each other store this home served that still holds active runs the current one lacks:
    those runs are served by no instance (their Gates take nothing, their timers never fire)."""
    from jr2ray.run.store import open_store
    from jr2ray.run.store.copy import active_elsewhere

    notes: list[str] = []
    here: Any = None
    for other in stores:
        if _same(other, current) or (not is_url(other) and not Path(other).is_dir()):
            continue
        try:
            here = here or open_store(current)
            ids = active_elsewhere(here, open_store(other))
        except Exception as exc:  # noqa: BLE001 - a store that is gone or does not answer: say so, go on
            notes.append(f"could not check the store {printable_store(other)} this home served before "
                         f"({type(exc).__name__})")
            continue
        if ids:
            notes.append(f"warning: the store {printable_store(other)} (served by an earlier `up` of this home) still "
                         f"holds {len(ids)} active run(s) that {printable_store(current)} does not; nothing serves "
                         f"them there. Move them with `jr2ray down` then `jr2ray store copy --from "
                         f"{printable_store(other)} --to {printable_store(current)}` and `jr2ray up`")
    return notes
