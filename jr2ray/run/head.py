"""Is the Ray head an instance recorded still whole? Found from outside, without joining it (a join of a head whose
raylet is gone waits a minute and fails with a traceback), and never by process name alone: only the processes
that name the instance's own Ray temp dir count (`instance_pids`), so other Ray instances on the machine are
never touched or mistaken for this one.
"""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from jr2ray.instance_record import Instance

if TYPE_CHECKING:
    import psutil

# The two processes a head cannot live without: Ray's GCS and the node's raylet (when either dies the node dies,
# the raylet within about 1.5 s, or within 60 s of losing the GCS).
VITAL = ("gcs_server", "raylet")


def port_open(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return False
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def instance_pids(temp_dir: str, address: str | None = None) -> list[int]:
    """The processes of the Ray a home started: those naming its temp dir (as a whole path, or a path below it),
    and everything below them; never this process or its ancestors. With the head's GCS `address`, also its Ray
    Client server, which `ray start` leaves as an orphan naming only that address (it outlived `down` by a minute,
    and could serve the next head on the same port)."""
    import psutil

    names_dir = re.compile(r"(^|[=\s'\"])" + re.escape(temp_dir.rstrip("/")) + r"($|[/\s'\",;])")
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    roots: list[psutil.Process] = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.pid in mine:
                continue
            if any(names_dir.search(part) for part in cmd) or (
                    address and "ray.util.client.server" in cmd and f"--address={address}" in cmd):
                roots.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    pids = {p.pid for p in roots}
    for p in roots:
        try:
            pids.update(c.pid for c in p.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return sorted(pids - mine)


def vital_pids(temp_dir: str) -> dict[str, list[int]]:
    """The instance's GCS and raylet processes, by kind (an empty list: that one is gone)."""
    import psutil

    found: dict[str, list[int]] = {name: [] for name in VITAL}
    for pid in instance_pids(temp_dir):
        try:
            proc = psutil.Process(pid)
            name = proc.name()
        except psutil.Error:
            continue
        if not running(proc):
            continue
        if name in found:
            found[name].append(pid)
    return found


def running(proc: psutil.Process) -> bool:
    """Still running: a zombie (dead, not yet reaped by its parent, which for a head's orphans may take a while) is
    gone all the same, and so is a pid another process has taken since."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class HeadState(BaseModel):
    """`up`: the head answers and (for a head this home started) its GCS and raylet run. `gone`: its GCS does not
    answer. `broken`: the GCS answers but a vital process of the head is gone (the node is dead or dying)."""

    state: Literal["up", "gone", "broken"]
    reason: str = ""


def head_state(inst: Instance) -> HeadState:
    """How the recorded instance's Ray stands, seen from this machine without joining it."""
    if not inst.ray_address or not port_open(inst.ray_address):
        return HeadState(state="gone", reason=f"its GCS at {inst.ray_address or '?'} does not answer")
    if inst.started_ray and inst.temp_dir:
        missing = [name for name, pids in vital_pids(inst.temp_dir).items() if not pids]
        if missing:
            return HeadState(state="broken", reason=f"its {' and '.join(missing)} process(es) are gone")
    return HeadState(state="up")


__all__ = ["VITAL", "HeadState", "head_state", "instance_pids", "port_open", "running", "vital_pids"]
