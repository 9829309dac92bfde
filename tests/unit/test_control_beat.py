"""The scale bench's control heartbeat (`benchmarks/control_beat.py`): a plain process whose loop only beats. It
must stop when its input closes and count a stall the box puts on it, or the driver's stall has nothing to be
compared with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "control_beat.py"


@contextmanager
def beating() -> Iterator[subprocess.Popen[str]]:
    """The control, once it says its first beat is done (however slowly a loaded box starts it); killed after."""
    proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "beating"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _figures(proc: subprocess.Popen[str]) -> dict[str, int | float]:
    out, _ = proc.communicate("", timeout=10)  # what the bench does: its input closes, it stops and says what it saw
    got: dict[str, int | float] = json.loads(out)
    assert proc.returncode == 0
    return got


def test_it_beats_until_its_input_closes_and_says_what_it_saw() -> None:
    with beating() as proc:
        time.sleep(0.2)
        got = _figures(proc)
    assert set(got) == {"longest_stall_ms", "beats_late_over_50ms", "beats"}
    assert got["beats"] >= 1


def test_a_stall_the_box_puts_on_it_is_counted() -> None:
    with beating() as proc:
        os.kill(proc.pid, signal.SIGSTOP)  # what a box too busy to run it does, only longer and for sure
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.1)
        got = _figures(proc)
    assert got["longest_stall_ms"] >= 250
    assert got["beats_late_over_50ms"] >= 1
