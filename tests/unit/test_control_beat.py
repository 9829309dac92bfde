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
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "control_beat.py"


def _started() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)  # its loop is beating
    return proc


def test_it_beats_until_its_input_closes_and_says_what_it_saw() -> None:
    proc = _started()
    time.sleep(0.3)
    out, _ = proc.communicate("", timeout=10)
    got = json.loads(out)
    assert proc.returncode == 0
    assert set(got) == {"longest_stall_ms", "beats_late_over_50ms", "beats"}
    assert got["beats"] >= 10  # ~80 beats of 10 ms in 0.8 s; a loaded box gives fewer, never a handful


def test_a_stall_the_box_puts_on_it_is_counted() -> None:
    proc = _started()
    os.kill(proc.pid, signal.SIGSTOP)  # what a box too busy to run it does, only longer and for sure
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGCONT)
    time.sleep(0.1)
    got = json.loads(proc.communicate("", timeout=10)[0])
    assert got["longest_stall_ms"] >= 250
    assert got["beats_late_over_50ms"] >= 1
