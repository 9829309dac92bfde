"""Where a full wake's CPU goes: seconds of CPU per wake, by process role and by thread, in one run of this script.

A full wake is what `runs_scale.py` times: N notes runs parked at their Gate, every Gate answered at once, each run
taken until it finishes (its writer, played by this script with `ScriptedAgent`, sends `done` as soon as its Turn
is at Rest again). This script reads the CPU time of every process of its private Ray before and after that phase
(psutil), and sums it by role: the driver (this process), the registry, the pooled run hosts, Ray's own processes.
For the hosts and the registry it also sums by thread name, which separates Ray's task threads from ours. A figure
taken while other work runs is a lower bound for the rate, but CPU seconds per wake are less load-sensitive.

Public names only (`tests/unit/test_benchmarks_public.py` checks it).

    PYTHONPATH=$PWD python3 benchmarks/wake_cpu.py [--n 1000] [--idle 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import ray

import jr2ray
from benchmarks.rows import append_row
from jr2ray.settings import load_settings
from jr2ray.testing import ScriptedAgent

GATE = "notes.writing.asking"
IDLE_S = 1.0  # runs park 1 s after they rest, as in runs_scale.py


def _role(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "driver"
    for mark, role in (("gcs_server", "gcs"), ("raylet", "raylet"), ("RunRegistry", "registry"),
                       ("RunHost", "hosts"), ("TimerService", "timers")):
        if mark in cmd:
            return role
    if "ray::" in cmd:
        return "ray " + cmd.split("ray::")[1].split()[0][:24]
    return "ray other"


def cpu_by_role() -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds so far, by role, and for hosts and registry by thread name (`H:`/`R:` + the thread's comm). Only
    this process and those below it (its private Ray): other work on a shared box is not counted as ours."""
    roles: collections.defaultdict[str, float] = collections.defaultdict(float)
    threads: collections.defaultdict[str, float] = collections.defaultdict(float)
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            ct = p.cpu_times()
            role = _role(p.pid, " ".join(p.cmdline()))
            roles[role] += ct.user + ct.system
            if role in ("hosts", "registry"):
                for t in p.threads():
                    comm = Path(f"/proc/{p.pid}/task/{t.id}/comm")
                    name = comm.read_text().strip() if comm.exists() else "?"
                    threads[f"{role[0].upper()}:{name}"] += t.user_time + t.system_time
        except (psutil.Error, OSError):
            continue
    return roles, threads


def _per_wake(after: dict[str, float], before: dict[str, float], n: int) -> dict[str, float]:
    got = {k: round((v - before.get(k, 0.0)) / n * 1000, 2) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in got.items() if v > 0.05), key=lambda kv: -kv[1]))


async def full_wakes(client: Any, n: int) -> dict[str, Any]:
    runs = await client.start_many_async("notes", [{"changes": f"change {i}"} for i in range(n)])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which change first?"}), ("done", {"notes": "# Notes"})])
    played = [asyncio.ensure_future(writer.play_async(r)) for r in runs]
    await asyncio.gather(*(r.until_gate(GATE) for r in runs))
    while (await client.stats_async())["live"]:  # every run parked
        await asyncio.sleep(0.5)
    stats0 = await client.stats_async()
    roles0, threads0 = cpu_by_role()
    t0 = time.perf_counter()
    for r in runs:
        r.send_async(GATE, "reply", {"text": "the first one"}, f"rep-{r.id}")
    finals = await asyncio.gather(*(r.finished() for r in runs))
    wall = time.perf_counter() - t0
    roles1, threads1 = cpu_by_role()
    stats1 = await client.stats_async()
    await asyncio.gather(*played)
    per_role = _per_wake(roles1, roles0, n)
    return {"n": n, "full_wakes_per_s": round(n / wall, 1), "done": sum(f.status == "done" for f in finals),
            "activations_per_wake": round((stats1["activations"] - stats0["activations"]) / n, 2),
            "cpu_ms_per_wake": round(sum(per_role.values()), 1), "cpu_ms_per_wake_by_role": per_role,
            "cpu_ms_per_wake_by_thread": _per_wake(threads1, threads0, n), "load_avg_after": os.getloadavg()[0]}


def idle_pool(seconds: float) -> dict[str, Any]:
    """What the warm pool costs while nothing happens, per host, beside the rest of the instance."""
    roles0, _ = cpu_by_role()
    time.sleep(seconds)
    roles1, _ = cpu_by_role()
    return {k: round((v - roles0.get(k, 0.0)) / seconds * 100, 2) for k, v in roles1.items()
            if v - roles0.get(k, 0.0) > 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds to measure the idle warm pool first")
    ap.add_argument("--out", default="benchmarks/results/wake_cpu.json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    os.environ["JR2RAY_HOME"] = tempfile.mkdtemp(prefix="jr2ray_wake_cpu_")
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    settings = load_settings(idle_deactivate_s=IDLE_S)
    client = jr2ray.connect(launcher=None, settings=settings)
    hosts = client.warm_pool()
    time.sleep(10)  # the pool's processes settle
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label,
                           "cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()[0], "warm_hosts": hosts,
                           "telemetry": settings.telemetry, "max_live_runs": settings.live_run_slots()}
    row["idle_pool_percent_of_a_core"] = idle_pool(args.idle)
    row.update(asyncio.run(full_wakes(client, args.n)))
    ray.shutdown()
    print(json.dumps(row, indent=1), flush=True)
    append_row(Path(args.out), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
