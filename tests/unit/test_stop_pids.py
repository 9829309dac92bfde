"""How `down` (and `up` on a dead head) stops an instance's processes: the GCS last, and a zombie counts as gone.

Stand-ins, not Ray: a process whose name is `gcs_server` (a symlink to this Python, so the kernel names it so) and
two others; each notes when its SIGTERM came, then exits. They are this test's children and are never reaped here,
so each becomes a zombie, as a dead head's processes do when their parent does not reap them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from jr2ray.cli.rayproc import _wait_gone, stop_pids

NOTE_ON_SIGTERM = """
import signal, sys, time
def bye(*_):
    with open(sys.argv[1], "a") as f:
        f.write(f"{sys.argv[2]} {time.monotonic_ns()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
open(sys.argv[1] + "." + sys.argv[2], "w").close()
while True:
    time.sleep(0.05)
"""


def _spawn(exe: str, notes: Path, name: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([exe, "-c", NOTE_ON_SIGTERM, str(notes), name])
    deadline = time.monotonic() + 60
    while not Path(f"{notes}.{name}").exists():  # its handler is set
        assert time.monotonic() < deadline and proc.poll() is None, f"{name} did not start"
        time.sleep(0.05)
    return proc


def test_the_gcs_is_signalled_only_once_the_others_are_gone(tmp_path: Path) -> None:
    gcs_exe = tmp_path / "gcs_server"
    os.symlink(sys.executable, gcs_exe)
    notes = tmp_path / "notes"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_spawn(str(gcs_exe), notes, "gcs"))
        procs += [_spawn(sys.executable, notes, f"worker{i}") for i in range(2)]
        assert psutil.Process(procs[0].pid).name() == "gcs_server"

        stop_pids([p.pid for p in procs], grace_s=30.0)  # the GCS first in the list given

        when = {name: int(ns) for name, ns in (line.split() for line in notes.read_text().splitlines())}
        assert set(when) == {"gcs", "worker0", "worker1"}  # each took SIGTERM (none needed SIGKILL)
        assert when["gcs"] > max(when["worker0"], when["worker1"])
        assert not _wait_gone([psutil.Process(p.pid) for p in procs], 0.0)
    finally:
        _reap(procs)


def _reap(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def test_a_zombie_counts_as_gone_and_a_running_process_does_not(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    dead, alive = _spawn(sys.executable, notes, "dead"), _spawn(sys.executable, notes, "alive")
    try:
        dead.terminate()
        deadline = time.monotonic() + 60
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.05)
        procs = [psutil.Process(dead.pid), psutil.Process(alive.pid)]
        assert [p.pid for p in _wait_gone(procs, 0.0)] == [alive.pid]
    finally:
        _reap([dead, alive])
