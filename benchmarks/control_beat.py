"""The control for a driver loop's stall: a plain Python process, no Ray and no jr2ray, whose asyncio loop only
sleeps 10 ms at a time and notes how late it woke. Run beside a benchmark's driver, its longest stall is what the
box's load alone does to a loop that has no work of its own; the driver's longest stall above it is the driver's.

It says "beating" on its standard error once its first beat is done, beats until its standard input closes, then
prints one JSON line: its longest stall, how many beats were late by more than 50 ms, and how many beats there were.

    python3 benchmarks/control_beat.py < <a pipe the benchmark closes>
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

BEAT_S = 0.01
LATE_S = 0.05  # the bound for a driver loop's stall


async def beat(stop: threading.Event) -> dict[str, float | int]:
    """Sleep a beat at a time until `stop`; how late each wake-up came is the stall the box put on this loop.
    Late is counted from the wake-up before, not from the sleep's start, so a stall anywhere in the step counts
    (one that came while it said "beating" was missed, and the test that stops it then failed)."""
    worst, late, beats = 0.0, 0, 0
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(BEAT_S)
        now = time.perf_counter()
        over, last = now - last - BEAT_S, now
        worst, beats = max(worst, over), beats + 1
        late += over > LATE_S
        if beats == 1:  # whoever started it may now count on it beating
            print("beating", file=sys.stderr, flush=True)
    return {"longest_stall_ms": round(worst * 1000, 1), "beats_late_over_50ms": late, "beats": beats}


def main() -> int:
    stop = threading.Event()

    def until_closed() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_closed, daemon=True).start()
    print(json.dumps(asyncio.run(beat(stop))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
