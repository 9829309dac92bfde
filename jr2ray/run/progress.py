"""A progress bar for a driver that holds many runs: how many have finished, and how many stand in each status.

    with Progress(len(runs), desc="notes") as bar:
        bar.update({"queued": 10, "active": 80, "done": 10}, done=10)

prints (on stderr, redrawn in place) `notes:  10%|█         | 10/100 [00:04<00:36, queued 10 active 80 done 10]`.
It is tqdm underneath. `enabled=None` turns it on only when its stream is a terminal, so CI logs and pipes get
nothing; when off it imports nothing, prints nothing and each call returns at once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

# Statuses in the order a run goes through them (jr2ray.run.models.RunStatusName, with `parked`/`live` presence);
# any other key follows, sorted.
ORDER = ("queued", "parked", "live", "active", "done", "error", "cancelled", "stopped", "drifted", "lost", "corrupt")
MIN_INTERVAL_S = 0.2  # at most five redraws a second, however often `update` is called


def format_counts(counts: Mapping[str, int]) -> str:
    """`queued 10 active 80 done 10`: each status with runs in it, in ORDER, then any other, sorted."""
    keys = [k for k in ORDER if k in counts] + sorted(k for k in counts if k not in ORDER)
    return " ".join(f"{k} {counts[k]}" for k in keys if counts[k])


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


class Progress:
    """A bar of `total` runs: `update(counts, done)` sets how many have finished and the counts by status.

    `enabled`: True or False forces it; None (the default) means on only when `file` (default stderr) is a
    terminal. `close()` (or leaving the `with` block) draws the last counts and ends the line."""

    def __init__(self, total: int, enabled: bool | None = None, desc: str = "", file: TextIO | None = None) -> None:
        self.total = total
        self.counts: dict[str, int] = {}
        self.done = 0
        self._bar: tqdm[NoReturn] | None = None  # a bar that is only told numbers, never iterates
        self._drawn = 0.0
        stream = file if file is not None else sys.stderr
        self.enabled = is_terminal(stream) if enabled is None else enabled
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc or None, file=stream, unit="run", dynamic_ncols=True,
                             mininterval=MIN_INTERVAL_S, smoothing=0, leave=True)

    def update(self, counts: Mapping[str, int], done: int | None = None) -> None:
        """The runs' counts by status now, and how many have finished (`done`; default: the sum of the finished
        statuses in `counts`). Cheap to call often: the bar redraws at most every MIN_INTERVAL_S."""
        bar = self._bar
        if bar is None:
            return
        self.counts = dict(counts)
        self.done = done if done is not None else sum(counts.get(k, 0) for k in ("done", "error", "cancelled"))
        bar.set_postfix_str(format_counts(self.counts), refresh=False)
        now = time.monotonic()
        if now - self._drawn >= MIN_INTERVAL_S:
            self._draw(now)

    def _draw(self, now: float) -> None:
        if self._bar is None:
            return
        self._bar.n = self.done  # absolute, not a step: `done` is what the caller counted, never a delta
        self._bar.refresh()
        self._drawn = now

    def close(self) -> None:
        """Draw the last counts and end the bar's line; closing twice (or a bar that is off) does nothing."""
        bar, self._bar = self._bar, None
        if bar is None:
            return
        bar.set_postfix_str(format_counts(self.counts), refresh=False)
        bar.n = self.done
        bar.refresh()
        bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


__all__ = ["Progress", "format_counts"]
