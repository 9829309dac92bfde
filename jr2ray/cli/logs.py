"""`jr2ray logs [run] [--follow]`: the instance's structured event logs, read from `$JR2RAY_HOME/logs/`.

Every jr2ray process of an instance (registry, hosts, timer service, Harnesses, the API) writes JSON lines to its own
file there (`jr2ray.run.telemetry`); this merges them in time order and keeps a run's lines when one is named.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jr2ray.cli import errors
from jr2ray.cli.errors import EXIT_OK
from jr2ray.run.telemetry import LOG_SUFFIX, log_dir

MIN_PREFIX = 4
FOLLOW_POLL_S = 0.5
_SHOWN_FIRST = ("ts", "level", "component", "event", "run", "iid")


class LogFiles:
    """The log files of one home, read on from where each was left (new files are picked up as they appear)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.offsets: dict[Path, int] = {}

    def new_lines(self) -> list[dict[str, Any]]:
        """Every complete line written since the last call, parsed, in time order (a torn last line waits)."""
        out: list[dict[str, Any]] = []
        for path in sorted(self.where.glob(f"*{LOG_SUFFIX}")):
            at = self.offsets.get(path, 0)
            try:
                with path.open("rb") as fh:
                    fh.seek(at)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            self.offsets[path] = at + end
            for raw in data[:end].splitlines():
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    out.append(line)
        out.sort(key=lambda line: str(line.get("ts", "")))
        return out


def run_of(line: dict[str, Any]) -> str | None:
    """The run a line is about: its `run`, else the run part of its Turn's iid (`<run id>.t<seq>`)."""
    run = line.get("run")
    if isinstance(run, str) and run:
        return run
    iid = line.get("iid")
    return iid.rpartition(".t")[0] or None if isinstance(iid, str) else None


def resolve(prefix: str, lines: list[dict[str, Any]]) -> str:
    """A run id from an id or an unambiguous prefix (4+ characters) among the runs the logs name."""
    runs = {r for line in lines if (r := run_of(line))}
    if prefix in runs:
        return prefix
    if len(prefix) < MIN_PREFIX:
        raise errors.prefix_too_short(prefix, MIN_PREFIX)
    hits = sorted(r for r in runs if r.startswith(prefix))
    if not hits:
        raise errors.no_run_matches(prefix)
    if len(hits) > 1:
        raise errors.prefix_ambiguous(prefix, hits)
    return hits[0]


def text(line: dict[str, Any]) -> str:
    """One line for a terminal: time, level, component, event, run and Turn, then the other fields as key=value."""
    head = [str(line.get(k)) for k in _SHOWN_FIRST if line.get(k) not in (None, "")]
    rest = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in line.items()
            if k not in _SHOWN_FIRST and k != "pid"]
    return " ".join(head + rest)


def stream(files: LogFiles, run: str | None, follow: bool, poll_s: float = FOLLOW_POLL_S,
           rounds: int | None = None) -> Iterator[dict[str, Any]]:
    """The lines (of `run` only, when given), then with `follow` every new one as it is written."""
    done = 0
    while True:
        for line in files.new_lines():
            if run is None or run_of(line) == run:
                yield line
        done += 1
        if not follow or (rounds is not None and done >= rounds):
            return
        time.sleep(poll_s)


def cmd_logs(args: argparse.Namespace) -> int:
    where = log_dir(args.settings.home_dir(create=False))
    if not where.is_dir():
        raise errors.no_logs(where)
    files = LogFiles(where)
    first = files.new_lines()
    run = resolve(args.run, first) if args.run else None
    try:
        for line in first:
            if run is None or run_of(line) == run:
                _show(line, args.json)
        if args.follow:
            for line in stream(files, run, True, rounds=args.rounds):
                _show(line, args.json)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _show(line: dict[str, Any], as_json: bool) -> None:
    print(json.dumps(line, separators=(",", ":")) if as_json else text(line), flush=True)
