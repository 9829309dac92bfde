"""How `jr2ray runs` shows many runs: the table with its WHERE column, the `--summary` counts, and `--watch`.

WHERE says what a run waits for, from the row `GET /runs` gives: a parked run's `waiting` (its open Gates, its open
Turns with their Allowed picks, its next timer), a queued run's `place` in line, `live` for a hosted run with the
Gates and active Turns its host told the listing (`live: gate …`, `live: turn writer [ask|done]`; a Turn at work has
no picks shown), nothing for a finished one.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

SHORT_PICKS = 24  # a Turn's Allowed picks are shown beside its seat when they fit in this many characters
CLEAR = "\x1b[H\x1b[2J"


def _span(seconds: float) -> str:
    s = int(round(abs(seconds)))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def where_text(row: dict[str, Any], now: float | None = None, grouped: bool = False) -> str:
    """What a run waits for, in a few words; '' for a run that waits for nothing (finished, lost, damaged).
    `grouped`: without what differs from run to run at one place (a queued run's number, a timer's time left), so
    `--summary` counts the runs at one Gate, one seat's Turn or one timer together."""
    presence = row.get("presence")
    if presence == "queued" or (presence is None and row.get("status") == "queued"):
        place = row.get("place")
        return f"queued #{place}" if isinstance(place, int) and not grouped else "queued"
    if presence == "live":
        return _live_where(row)
    return _parked_where(row.get("waiting") or {}, now, grouped) if presence == "parked" else ""


def _live_where(row: dict[str, Any]) -> str:
    parts = [f"gate {g.get('id')}" for g in row.get("gates") or []]
    parts += [_turn(t.get("slot"), t.get("allowed")) for t in row.get("turns") or [] if t.get("active")]
    return "live: " + ", ".join(parts) if parts else "live"


def _parked_where(waiting: dict[str, Any], now: float | None, grouped: bool) -> str:
    parts = [f"gate {g}" for g in waiting.get("gates") or []]
    parts += [_turn(seat, picks) for seat, picks in (waiting.get("turns") or {}).items()]
    due = waiting.get("timer_due")
    if isinstance(due, (int, float)) and grouped:
        parts.append("timer")
    elif isinstance(due, (int, float)):
        left = due - (time.time() if now is None else now)
        parts.append(f"timer in {_span(left)}" if left >= 0.5 else f"timer due {_span(left)} ago")
    return ", ".join(parts) or "parked"


def _turn(seat: Any, picks: list[str] | None) -> str:
    shown = "|".join(picks or [])
    return f"turn {seat}" + (f" [{shown}]" if picks and len(shown) <= SHORT_PICKS else "")


def state_text(value: Any) -> str:
    """A state value as dotted paths: "drafting", {"writing": "asking"} -> writing.asking; parallel regions joined
    by ','."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        paths = []
        for k, v in value.items():
            inner = state_text(v) if v not in (None, {}) else ""
            paths += [f"{k}.{p}" for p in inner.split(",")] if inner else [str(k)]
        return ",".join(paths) or "-"
    return json.dumps(value)


def runs_table(runs: list[dict[str, Any]], now: float | None = None) -> str:
    if not runs:
        return "no runs"
    cells = [(str(r["id"]), str(r["workflow"]), str(r["status"]), where_text(r, now),
              time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"])), json.dumps(r.get("value")))
             for r in runs]
    return _table(("ID", "WORKFLOW", "STATUS", "WHERE", "CREATED", "VALUE"), cells)


def _table(head: tuple[str, ...], cells: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(head)]
    widths[-1] = 0
    fmt = "".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*line).rstrip() for line in [head, *cells])


def summary(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs counted by status x where x state value, biggest first. Where is WHERE's text grouped (`where_text`):
    the Gates' ids, the open Turns' seats with their Allowed picks, `timer`, `queued`, `live` (with its Gates and
    active Turns), bare `parked`, or '' for a run that waits for nothing."""
    counts: dict[tuple[str, str, str], int] = {}
    for r in runs:
        key = (str(r.get("status")), where_text(r, grouped=True), state_text(r.get("value")))
        counts[key] = counts.get(key, 0) + 1
    return [{"status": s, "where": w, "state": v, "count": n}
            for (s, w, v), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def summary_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no runs"
    cells = [(str(r["status"]), str(r["where"] or "-"), str(r["state"]), str(r["count"])) for r in rows]
    total = sum(r["count"] for r in rows)
    return _table(("STATUS", "WHERE", "STATE", "RUNS"), cells) + f"\n{total} run(s)"


def watch(render: Callable[[], str], interval_s: float, count: int | None = None, stream: TextIO | None = None,
          sleep: Callable[[float], None] | None = None) -> None:
    """Print `render()` every `interval_s` until Ctrl-C (or `count` times). On a terminal each refresh clears the
    screen and redraws; otherwise (a pipe, a file) each is printed once, after a blank line."""
    stream = stream or sys.stdout
    sleep = sleep or time.sleep
    tty = stream.isatty()
    shown = 0
    try:
        while count is None or shown < count:
            text = render()
            if tty:
                stream.write(f"{CLEAR}every {interval_s:g}s, {time.strftime('%H:%M:%S')} (Ctrl-C to stop)\n\n")
            elif shown:
                stream.write("\n")
            stream.write(text + "\n")
            stream.flush()
            shown += 1
            if count is None or shown < count:
                sleep(interval_s)
    except KeyboardInterrupt:
        stream.write("\n")
