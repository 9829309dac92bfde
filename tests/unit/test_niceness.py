"""`niceness.even_out`: a thread started before its process lowered its priority is lowered too (Ray's core-worker
threads of a run host, which otherwise outbid the driver). Run in a child process: a raised nice cannot be undone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import json, os, threading
from jr2ray.run import niceness
ready, stop = threading.Event(), threading.Event()
tid = []
def early():  # started at the process's priority, as Ray's io threads are
    tid.append(threading.get_native_id()); ready.set(); stop.wait()
threading.Thread(target=early, daemon=True).start()
ready.wait()
os.nice(5)  # this thread only, as Ray's worker_niceness does
before = niceness.thread_nices()[tid[0]]
changed = niceness.even_out()
after = niceness.thread_nices()
print(json.dumps({"mine": os.getpriority(os.PRIO_PROCESS, 0), "before": before, "after": after[tid[0]],
                  "changed": changed, "all": sorted(set(after.values())), "again": niceness.even_out()}))
stop.set()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are read from /proc (Linux)")
def test_a_thread_started_before_the_process_lowered_its_priority_is_lowered_too() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["before"] == got["mine"] - 5  # it ran ahead of the thread that lowered itself
    assert got["after"] == got["mine"] and got["all"] == [got["mine"]]
    assert got["changed"] >= 1 and got["again"] == 0  # once evened out, nothing is left to change
