"""Where a full wake's CPU goes: seconds of CPU per wake, by process role and by thread, in one run of this script.

A full wake is what `runs_scale.py` times: N notes runs parked at their Gate, every Gate answered at once, each run
taken until it finishes (its writer, played by this script with `ScriptedAgent`, sends `done` as soon as its Turn
is at Rest again). This script reads the CPU time of every process of its private Ray before and after that phase
(psutil), and sums it by role: the driver (this process), the registry, the pooled run hosts, Ray's own processes.
For the hosts and the registry it also sums by thread name, which separates Ray's task threads from ours. A figure
taken while other work runs is a lower bound for the rate, but CPU seconds per wake are less load-sensitive.

Then, in the same run, the control: bare Ray actor calls (an async actor that only answers, as many as the warm
pool's hosts, as many calls in flight as there are live-run slots), and the CPU one such call costs across the same
process tree (`bare_call`). Both figures are also given net of what the tree burns idle (each Ray worker polls),
measured just before each. A wake's net CPU over a call's (`wake_cpu_in_bare_calls`) says how many bare Ray calls'
worth of work a wake is, and `ceiling_wakes_per_s_at` what the cores would allow if a wake were only that many.
The same calls are then made once more, as many in flight, to a sixth as many actors (`bare_call_fewer_processes`):
what a call costs when the same load falls on fewer, busier processes (`bare_call_cpu_ratio_fewer_to_all`), which
is what several runs on one host would give the wakes' own calls.

Public names only (`tests/unit/test_benchmarks_public.py` checks it).

With `--count-calls`, Ray's own record of every actor task (its state API, which needs the dashboard, so the CPU
figures of such a run include the dashboard's) gives the Ray calls per wake by actor method
(`ray_calls_per_wake`), and those from the start until every run parked at its Gate (`ray_calls_per_run_to_park`).
Ray drops task records under a heavy burst: `ray_calls_complete` says whether every activation's adoption
and park was counted (at N=300 they were; at N=1,000, on 2026-12-06, a third of the hosts' records were missing).

    PYTHONPATH=$PWD python3 benchmarks/wake_cpu.py [--n 1000] [--idle 10] [--count-calls]
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
COUNT_SETTLE_S = 8.0
CALLS_KEPT = 200_000  # Ray's state API and its GCS keep this many task records (set below when counting)
IDLE_WINDOW_S = 5.0
BARE_CALLS_PER_WAKE = 5  # the control makes this many bare calls per wake measured, so it runs about as long
FEWER = 6  # the second control spreads the same calls over this many times fewer actors


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


def ray_calls() -> collections.Counter[str]:
    """Every actor task Ray has a record of, by its name (`Actor.method`), through Ray's state API."""
    from ray.util.state import list_tasks

    return collections.Counter(t.name for t in list_tasks(limit=CALLS_KEPT, raise_on_missing_output=False))


async def full_wakes(client: Any, n: int, count: bool = False) -> dict[str, Any]:
    before = await asyncio.to_thread(ray_calls) if count else None
    runs = await client.start_many_async("notes", [{"changes": f"change {i}"} for i in range(n)])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which change first?"}), ("done", {"notes": "# Notes"})])
    played = [asyncio.ensure_future(writer.play_async(r)) for r in runs]
    await asyncio.gather(*(r.until_gate(GATE) for r in runs))
    while (await client.stats_async())["live"]:  # every run parked
        await asyncio.sleep(0.5)
    if count:
        await asyncio.sleep(COUNT_SETTLE_S)  # Ray reports task events in batches: the parks' are all in
    calls0 = await asyncio.to_thread(ray_calls) if count else None
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
    made = stats1["activations"] - stats0["activations"]  # each adopted once and parked once
    counted: dict[str, Any] = {}
    if before is not None and calls0 is not None:
        to_park = calls0 - before
        counted["ray_calls_per_run_to_park"] = round(sum(to_park.values()) / n, 2)
        counted["ray_calls_per_run_to_park_by_method"] = {k: round(v / n, 2) for k, v in to_park.most_common()
                                                          if v >= n / 50}
        await asyncio.sleep(COUNT_SETTLE_S)  # the last runs' parks, and their task events
        calls = await asyncio.to_thread(ray_calls) - calls0
        by_method = {k: round(v / n, 2) for k, v in calls.most_common() if v >= n / 50}
        counted.update(ray_calls_per_wake=round(sum(calls.values()) / n, 2), ray_calls_per_wake_by_method=by_method,
                       ray_calls_complete=calls["RunHost.adopt"] == calls["RunRegistry.deactivate"] == made)
    return {**counted, "n": n, "full_wakes_per_s": round(n / wall, 1), "done": sum(f.status == "done" for f in finals),
            "activations_per_wake": round(made / n, 2),
            "cpu_ms_per_wake": round(sum(per_role.values()), 1), "cpu_ms_per_wake_by_role": per_role,
            "cpu_ms_per_wake_by_thread": _per_wake(threads1, threads0, n), "load_avg_after": os.getloadavg()[0]}


class Nothing:
    """Declared as a run host is (no CPU reserved, async, many calls at once), and does nothing: Ray's part alone."""

    async def ping(self) -> None:
        return None


Bare: Any = ray.remote(num_cpus=0, max_concurrency=10000)(Nothing)  # type: ignore[call-overload]


def _total(after: dict[str, float], before: dict[str, float]) -> float:
    return sum(v - before.get(k, 0.0) for k, v in after.items())


async def bare_calls(actors: int, calls: int, in_flight: int) -> dict[str, Any]:
    """CPU per bare Ray actor call across this bench's process tree, with `in_flight` calls at a time spread over
    `actors` actors: the per-call cost a wake's own calls pay on top of what jr2ray does in them. What the tree
    burns idle meanwhile (the warm pool and these actors, each Ray worker polling) is measured just before and taken
    out (`cpu_ms_per_call`); the gross figure is kept beside it."""
    pool = [Bare.remote() for _ in range(actors)]
    try:
        await asyncio.gather(*(a.ping.remote() for a in pool))
        await asyncio.sleep(5)  # their processes settle
        idle0, _ = cpu_by_role()
        await asyncio.sleep(IDLE_WINDOW_S)
        idle_cores = _total(cpu_by_role()[0], idle0) / IDLE_WINDOW_S
        room = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            async with room:
                await pool[i % actors].ping.remote()

        roles0, _ = cpu_by_role()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        wall = time.perf_counter() - t0
        roles1, _ = cpu_by_role()
    finally:
        for a in pool:
            ray.kill(a)
    gross = _total(roles1, roles0)
    return {"actors": actors, "calls": calls, "in_flight": in_flight, "calls_per_s": round(calls / wall, 1),
            "idle_cores": round(idle_cores, 3),
            "cpu_ms_per_call": round((gross - idle_cores * wall) / calls * 1000, 2),
            "cpu_ms_per_call_gross": round(gross / calls * 1000, 2),
            "cpu_ms_per_call_by_role": _per_wake(roles1, roles0, calls), "load_avg_after": os.getloadavg()[0]}


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
    ap.add_argument("--count-calls", action="store_true", help="count Ray calls per wake (starts the dashboard)")
    args = ap.parse_args()
    os.environ["JR2RAY_HOME"] = tempfile.mkdtemp(prefix="jr2ray_wake_cpu_")
    if args.count_calls:  # Ray's settings for how many task records its GCS keeps and its state API hands out
        os.environ["RAY_task_events_max_num_task_in_gcs"] = os.environ["RAY_MAX_LIMIT_FROM_API_SERVER"] = \
            str(CALLS_KEPT)
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=args.count_calls, log_to_driver=False)
    settings = load_settings(idle_deactivate_s=IDLE_S)
    client = jr2ray.connect(launcher=None, settings=settings)
    hosts = client.warm_pool()
    time.sleep(10)  # the pool's processes settle
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label,
                           "cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()[0], "warm_hosts": hosts,
                           "telemetry": settings.telemetry, "max_live_runs": settings.live_run_slots(),
                           "runs_per_host": settings.runs_per_host,
                           "dashboard_for_counting_calls": args.count_calls}
    row["idle_pool_percent_of_a_core"] = idle_pool(args.idle)
    row.update(asyncio.run(full_wakes(client, args.n, args.count_calls)))
    idle_cores = sum(row["idle_pool_percent_of_a_core"].values()) / 100
    wake_s = args.n / row["full_wakes_per_s"]  # the same idle spending taken out of the wakes' CPU as of the calls'
    row["cpu_ms_per_wake_net_of_idle"] = round(row["cpu_ms_per_wake"] - idle_cores * wake_s * 1000 / args.n, 1)
    bare = asyncio.run(bare_calls(hosts, args.n * BARE_CALLS_PER_WAKE, row["max_live_runs"]))
    row["bare_call"] = bare
    per_call = bare["cpu_ms_per_call"]
    row["wake_cpu_in_bare_calls"] = round(row["cpu_ms_per_wake_net_of_idle"] / per_call, 1)
    cores = os.cpu_count() or 1
    row["ceiling_wakes_per_s_at"] = {f"{k}_bare_calls_a_wake": round(cores * 1000 / (k * per_call), 1)
                                     for k in (1, 3, 5, 6.3, 9)}
    fewer = asyncio.run(bare_calls(max(1, hosts // FEWER), args.n * BARE_CALLS_PER_WAKE, row["max_live_runs"]))
    row["bare_call_fewer_processes"] = fewer
    row["bare_call_cpu_ratio_fewer_to_all"] = round(fewer["cpu_ms_per_call"] / per_call, 2)
    ray.shutdown()
    print(json.dumps(row, indent=1), flush=True)
    append_row(Path(args.out), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
