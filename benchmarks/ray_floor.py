"""The floor Ray itself puts under N idle live actors on this box: what "200 runs live at once" costs before jr2ray
does anything.

Every Ray worker process runs a periodic signal check on its task-execution (main) thread every 10 ms, hard-coded in
Ray's core worker ("CoreWorker.CheckSignal"), so an idle actor wakes about 100 times a second. Alone that is cheap;
N of them on 2 cores are not, and a round trip to any one of them then waits behind the others' wakeups. This
script shows it with actors that hold nothing and do nothing (async, num_cpus=0, high max_concurrency, like a
RunHost), on a private local Ray, one size after another in ONE run. For each N (default 1, 50, 100, 200) it:
1. starts N actors and waits for all of them, then lets the instance settle (`--settle-s`);
2. over `--window-s` measures the CPU cores the N idle actors use (and per actor), the whole instance, the whole box
   (other engineers' load included), and the wakeups per second of the actors' main threads (the kernel's
   voluntary context switches of /proc/<pid>/task/<pid>, a median over a few actors), with one actor's busiest
   threads by name;
3. times passes of one `ping` per actor (`ray.get` round trip; at least 3 passes and `--min-pings` pings);
4. kills the N actors and waits for their processes to end before the next N.
Each row carries the 1-minute load average. Numbers are counts and ratios; nothing is asserted.

    PYTHONPATH=$PWD RAY_ADDRESS=local python3 benchmarks/ray_floor.py [--sizes 1,50,100,200] \
        [--settle-s 20] [--window-s 10] [--min-pings 200] [--out benchmarks/results/ray_floor.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from any directory
from benchmarks.load_watch import LoadWatch  # noqa: E402
from jr2ray.run.ray_start import STARTUP_VAR, TASK_EVENTS_VAR, with_instance_ray_env  # noqa: E402
from jr2ray.settings import load_settings  # noqa: E402

COMMAND = "cd <checkout> && PYTHONPATH=$PWD RAY_ADDRESS=local python3 benchmarks/ray_floor.py"
WAKE_SAMPLE = 5  # actors whose main-thread wakeups are read (the median is reported)


class Idle:
    """An actor that holds nothing: whatever it costs while idle is Ray's, not jr2ray's."""

    async def ping(self) -> int:
        return os.getpid()


# As a RunHost is declared: no CPU reserved (so N is not capped by num_cpus), async, many calls at once.
IdleActor: Any = ray.remote(num_cpus=0, max_concurrency=10000)(Idle)  # type: ignore[call-overload]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else float("nan")


def _cpu_s(procs: list[psutil.Process]) -> float:
    """User+system CPU seconds of these processes so far (one that ended counts nothing)."""
    total = 0.0
    for p in procs:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def _box_busy_s() -> float:
    """CPU seconds the whole box has been busy: the share of the cores that other programs take is in it too."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _threads(pid: int) -> dict[int, tuple[str, int]]:
    """tid -> (thread name, voluntary context switches): each one is the thread going to sleep, so a count of
    wakeups."""
    out: dict[int, tuple[str, int]] = {}
    base = Path(f"/proc/{pid}/task")
    for d in base.iterdir():
        try:
            name = (d / "comm").read_text().strip()
            status = (d / "status").read_text()
        except OSError:
            continue
        line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches:"))
        out[int(d.name)] = (name, int(line.split()[1]))
    return out


def measure_idle(pids: list[int], window_s: float) -> dict[str, Any]:
    """CPU and wakeups of N idle actors over one window. The main thread's tid is the pid (Linux)."""
    actors = [psutil.Process(p) for p in pids]
    instance = psutil.Process().children(recursive=True)  # GCS, raylet, idle workers, the actors
    sample = pids[:WAKE_SAMPLE]
    th0 = {p: _threads(p) for p in sample}
    a0, i0, b0, t0 = _cpu_s(actors), _cpu_s(instance), _box_busy_s(), time.perf_counter()
    time.sleep(window_s)
    a1, i1, b1, t1 = _cpu_s(actors), _cpu_s(instance), _box_busy_s(), time.perf_counter()
    th1 = {p: _threads(p) for p in sample}
    dt = t1 - t0
    main_wakes = [(th1[p][p][1] - th0[p][p][1]) / dt for p in sample]
    first = sample[0]
    per_thread = sorted(((th1[first][t][0], (th1[first][t][1] - c) / dt) for t, (_, c) in th0[first].items()
                         if t in th1[first]), key=lambda x: -x[1])
    return {"idle_window_s": round(dt, 1), "actors_cores": round((a1 - a0) / dt, 3),
            "per_actor_pct": round(100 * (a1 - a0) / dt / len(pids), 3),
            "instance_cores": round((i1 - i0) / dt, 3), "instance_processes": len(instance),
            "box_busy_cores": round((b1 - b0) / dt, 2),
            "main_thread_wakes_per_s": round(statistics.median(main_wakes), 1),
            "main_thread_wakes_sampled": len(sample), "main_thread_name": th1[first][first][0],
            "one_actor_threads": len(th1[first]),
            "one_actor_wakes_per_s_all_threads": round(sum(w for _, w in per_thread), 1),
            "one_actor_busiest_threads": {f"{n} #{i}": round(w, 1) for i, (n, w) in enumerate(per_thread[:4])},
            "load_avg_1m_at_window_end": round(os.getloadavg()[0], 1)}


def time_pings(actors: list[Any], min_pings: int) -> dict[str, Any]:
    """One `ray.get(actor.ping.remote())` after another, pass after pass over all actors: the wait for a reply from
    an idle actor, which is what a pick to a live run's host waits for too."""
    passes = max(3, math.ceil(min_pings / len(actors)))
    lat: list[float] = []
    for _ in range(passes):
        for a in actors:
            t = time.perf_counter()
            ray.get(a.ping.remote())
            lat.append((time.perf_counter() - t) * 1000)
    return {"ping_passes": passes, "pings": len(lat), "ping_p50_ms": _pct(lat, 0.5),
            "ping_p99_ms": _pct(lat, 0.99), "ping_max_ms": round(max(lat), 2)}


def one_size(n: int, settle_s: float, window_s: float, min_pings: int) -> dict[str, Any]:
    """Start N idle actors, settle, measure them idle, time pings, kill them and wait for their processes to go."""
    watch = LoadWatch(every_s=1.0)
    t0 = time.perf_counter()
    actors = [IdleActor.remote() for _ in range(n)]
    pids: list[int] = ray.get([a.ping.remote() for a in actors], timeout=1800)
    row: dict[str, Any] = {"n": n, "start_s": round(time.perf_counter() - t0, 1), "settle_s": settle_s}
    time.sleep(settle_s)
    row.update(measure_idle(pids, window_s))
    row.update(time_pings(actors, min_pings))
    watch.stop()
    row["load_avg_1m"] = watch.summary()
    procs = [psutil.Process(p) for p in pids if psutil.pid_exists(p)]
    for a in actors:
        ray.kill(a, no_restart=True)
    _, alive = psutil.wait_procs(procs, timeout=120)
    row["left_alive_after_kill"] = len(alive)
    return row


def _init_ray() -> None:
    """A private local Ray (address="local": never another engineer's cluster), with the Ray settings `jr2ray up`
    gives an instance, so the floor measured is the one an instance stands on."""
    os.environ.update(with_instance_ray_env(dict(os.environ), load_settings().live_run_slots()))
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)


def _empty_instance(window_s: float) -> dict[str, Any]:
    """What the private instance costs with no actor at all (GCS, raylet, any idle workers): the floor under the
    floor."""
    time.sleep(10)
    instance = psutil.Process().children(recursive=True)
    c0, t0 = _cpu_s(instance), time.perf_counter()
    time.sleep(window_s)
    dt = time.perf_counter() - t0
    return {"instance_cores": round((_cpu_s(instance) - c0) / dt, 3), "instance_processes": len(instance),
            "load_avg_1m": round(os.getloadavg()[0], 1)}


def _saturation(rows: list[dict[str, Any]]) -> str:
    """A sentence for the rows where the whole box was busy: there each actor got less CPU than it asks for, so the
    per-actor cost and the wakeups read low, and the demand is larger than what was measured."""
    cores = os.cpu_count() or 1
    full = [r for r in rows if r["box_busy_cores"] >= 0.9 * cores]
    if not full:
        return ""
    lone = min(rows, key=lambda r: r["n"])
    return (" At N=" + ", ".join(str(r["n"]) for r in full) + " the box was saturated (busy "
            + ", ".join(f"{r['box_busy_cores']}" for r in full) + f" of {cores} cores), so the actors were starved: "
            "their per-actor cost and main-thread wakes read below the smallest row's "
            f"({lone['per_actor_pct']}%, {lone['main_thread_wakes_per_s']}/s), and what they would take unstarved "
            "is about N times that (an estimate from the rows below saturation, not a measurement).")


def _note(rows: list[dict[str, Any]]) -> str:
    """What the floor is, in words, with the largest row's numbers."""
    big = max(rows, key=lambda r: r["n"])
    return (
        "Every Ray worker process (each actor is one) wakes its main thread about every 10 ms even when it has "
        "nothing to do: Ray's core worker schedules a periodic signal check ('CoreWorker.CheckSignal', a 10 ms "
        "period fixed in CoreWorker::RunTaskExecutionLoop, not an environment setting) on the task-execution "
        "thread. One idle actor costs little, but the cost is per process, so it grows with the number of live "
        f"actors: here {big['n']} empty actors kept {big['actors_cores']} of {os.cpu_count()} cores busy "
        f"({big['per_actor_pct']}% each, main thread ~{big['main_thread_wakes_per_s']} wakes/s) and a bare "
        f"ping round trip took p50 {big['ping_p50_ms']} ms / p99 {big['ping_p99_ms']} ms, because the reply "
        "waits for a core behind the other actors' wakeups."
        + _saturation(rows)
        + " The actors hold no jr2ray code, so this is a floor "
        "under any design that keeps one Ray actor per live run on a small box, outside jr2ray; the ways past it "
        "are fewer processes or more cores. Tried by hand beside this script, Ray's env settings for its other "
        "periodic timers (event-loop lag collection, task-event reports, core-worker heartbeat, metrics reports, "
        "raylet death check) and renicing the actors to 19 did not change it. The box was shared "
        "while this ran: see each row's load_avg_1m and box_busy_cores. Reproduce: "
        + COMMAND
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="1,50,100,200", help="comma-separated actor counts, measured in this order")
    ap.add_argument("--settle-s", type=float, default=20.0, help="wait after the actors are up, before measuring")
    ap.add_argument("--window-s", type=float, default=10.0, help="the idle measuring window")
    ap.add_argument("--min-pings", type=int, default=200, help="timed pings per size at least (3 passes at least)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "ray_floor.json"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    _init_ray()
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "ray_version": ray.__version__, "cores": os.cpu_count(),
                              "ray_init": "address=local, num_cpus=4, include_dashboard=False, log_to_driver=False",
                              "ray_env": {k: os.environ[k] for k in (TASK_EVENTS_VAR, STARTUP_VAR, "RAY_ADDRESS")
                                          if k in os.environ},
                              "empty_instance": _empty_instance(args.window_s), "rows": []}
    print(json.dumps(report["empty_instance"]), flush=True)
    for n in sizes:
        row = one_size(n, args.settle_s, args.window_s, args.min_pings)
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    ray.shutdown()
    rows: list[dict[str, Any]] = report["rows"]
    small = min(rows, key=lambda r: r["n"])
    report["ratios_to_smallest"] = {
        str(r["n"]): {"n": round(r["n"] / small["n"], 1),
                      "actors_cores": round(r["actors_cores"] / max(small["actors_cores"], 1e-9), 1),
                      "per_actor_pct": round(r["per_actor_pct"] / max(small["per_actor_pct"], 1e-9), 2),
                      "ping_p50": round(r["ping_p50_ms"] / small["ping_p50_ms"], 1),
                      "ping_p99": round(r["ping_p99_ms"] / small["ping_p99_ms"], 1)} for r in rows}
    report["note"] = _note(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"ratios_to_smallest": report["ratios_to_smallest"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
