"""Many virtual runs driven from one script through the public API only, as the README's driving example does.

The notes workflow: this script plays the writer (`ask`, then `done`) with `ScriptedAgent` and answers every Gate
(`client.until_gates`, then every reply in one `send_many_async`). Nothing here reaches a private name: `benchmarks/` is
checked for that by `tests/unit/test_benchmarks_public.py`. For N runs (the issue asks for 10,000) it measures,
in one run:
1. starts journaled through `start_many` a second (it returns once every start is journaled and listed);
2. the time until all N are parked at their Gate, and the instance's memory then beyond the idle instance;
3. full wakes a second: every Gate answered at once, reply until the run is `published` (its writer's `done` sent
   as soon as its Turn is at Rest again);
4. activations per run (the registry's count, from `client.stats()`), and every journal checked: each run admitted
   ask, reply, done exactly once;
5. the driver's own memory per run, and the longest stall of the driver's event loop (a heartbeat every 10 ms),
   with the time the script's own loops over every run held it (`script_own_loops_ms`: making a task per run, and
   handing every reply to `send_many_async`), which a stall spanning them includes; beside it, the same heartbeat
   in a plain process of its own (`control_beat.py`, no Ray), through the same phases: what the box's load alone
   does to a loop (`control_longest_stall_ms`); and where the script loop's thread was in the longest stall's
   window and in all late beats' windows together, as Linux counts it (`longest_loop_stall_window_ms`,
   `late_beats_windows_ms`: running, waiting for a CPU, or asleep, which is each beat's own 10 ms sleep or a wait
   for the GIL; `Heartbeat`);
6. hot: a pick on a live run against a bare Ray actor ping, alternating, in this same script (p50 ratio); beside
   it the floor under that figure, from actors as warm as the runs' hosts (`Floor`): a ping, a call that only hands
   back a copy of the pick's receipt, and one that first commits one SQLite row, as the journal must before a
   receipt (`--hot-only` measures just this, on a fresh instance).
The pool is warmed first with `client.warm_pool()` (what `jr2ray up` does in the background). The 1-minute load
average is sampled throughout: each row says how loaded the box was.

Before the timed start, one warm-up run is started and taken until its writer's Turn is open, then cancelled, so
no arm times a process's first start (its own start returns in about 50 ms: `first_start_s`). It did not explain
why off arms started fewer runs a second: the traces-only rows of 2026-12-02 04:05-04:34 had off at 300-470/s and
on at 640-1130/s, in either order, and the first all-on/off row with the warm-up had off at 765 and 256/s, on at 802
and 656/s. The start of a few hundred runs lasts under a second on a box whose load average swung from 21 to 99 in
that run, so the start-rate ratio is noise there; read the pick figures, and the start rate only at a larger N.

`--overhead` (or `--traces`): what the observability costs, in one run of this script. The same measurement runs as
arms, each in its own process with its own private Ray, in pairs (`--arms`; off first, then on first, in turn). On is
everything on: metrics (`ray.util.metrics`), the JSON logs (`JR2RAY_TELEMETRY=on`) and traces exported over OTLP/HTTP
to a receiver in this script (`OTEL_EXPORTER_OTLP_ENDPOINT`); off is all of them off (`JR2RAY_TELEMETRY=off`, no
endpoint). Each arm reports the log lines its instance wrote, and the row the spans received, so an arm that was not
what it says shows. First, in a process of its own, the pick figure with the load divided out (`--interleaved`): one
instance, everything on, and hot runs of two pools, one whose env switches everything off again (a host serves one
env); each round picks on an on run, then an off run, then pings. Arms apart in time see different loads on a box
shared with other work; picks interleaved in one script see the same. The row's `overhead` gives that ratio, then
the arms' on/off ratios of the start rate and of the pick p50 (medians over the pairs), and of each arm's pick p50
over its own bare-actor ping p50.

    RAY_ADDRESS=local PYTHONPATH=$PWD python3 benchmarks/runs_scale.py [--n 10000] [--hot 20]
    PYTHONPATH=$PWD python3 benchmarks/runs_scale.py --n 300 --overhead [--arms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from control_beat import BEAT_S, LATE_S  # noqa: E402 - beside this script: one beat, one bound, both loops
from load_watch import LoadWatch  # noqa: E402 - beside this script

import jr2ray  # noqa: E402
from jr2ray.run import gcfreeze  # noqa: E402
from jr2ray.settings import load_settings  # noqa: E402
from jr2ray.testing import ScriptedAgent  # noqa: E402

GATE = "notes.writing.asking"
IDLE_S = 1.0
SETTLE_S = 4.0  # after all parked, before the settled memory figure: past the hosts' 2 s quiet spell, then their trim


def instance_uss() -> int:
    """Unique memory of every process below this driver: the Ray instance with its hosts."""
    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            total += p.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def driver_uss() -> int:
    return int(psutil.Process().memory_full_info().uss)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else float("nan")


class _ThreadSched:
    """The calling thread's time on a CPU and waiting for one, in ns, as Linux counts them; None where it does not."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def read(self) -> tuple[int, int] | None:
        if self.fd is None:
            return None
        running, waiting, *_ = os.pread(self.fd, 128, 0).split()
        got = int(running), int(waiting)
        return None if got == (0, 0) else got  # a kernel without scheduler statistics

    @staticmethod
    def split(was: tuple[int, int] | None, got: tuple[int, int] | None, window_s: float) -> dict[str, float] | None:
        """A beat's window (its sleep included) in ms: running, waiting for a CPU, and the rest (asleep)."""
        if was is None or got is None:
            return None
        running, waiting = (got[0] - was[0]) / 1e6, (got[1] - was[1]) / 1e6
        return {"running": running, "waiting_for_a_cpu": waiting,
                "asleep": max(0.0, window_s * 1000 - running - waiting)}


class Heartbeat:
    """The driver loop's longest stall: a task that sleeps 10 ms and records how late it woke. Beside it, the
    longest full (generation 2) garbage collection of this process, in wall and in CPU time, the objects the
    collector tracks (`tracked`) and those frozen (`frozen`) with every run parked at its Gate, and the cyclic
    garbage the freezing left (`garbage_left`, counted once all finished). Measured, the longest stalls were these
    collections, whose cost grows with the objects a driver holds for its waiting runs, until the driver froze
    what outlives its middle-generation passes too (`jr2ray.run.gcfreeze`). The longest young and middle passes are
    kept as well: a backlog in those held the loop as long, until the driver paced them (`gcfreeze._pace`).

    Each beat's window (from the wake-up before, its own 10 ms sleep included) is also split by where the script
    loop's thread was, from Linux's own count for it (`/proc/thread-self/schedstat`): running (the loop's own work,
    a GC pass included), waiting for a CPU (runnable, while other threads had both cores: other processes', or the
    driver's own, such as its `jr2ray-driver` loop and Ray's threads), or neither (asleep: the beat's sleep, or a
    wait for the GIL while another thread of the driver holds it). Linux updates a thread's running time at a tick
    or a switch, so about a tick of running may show as asleep. A kernel without these counts gives nothing."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.late = 0  # beats late by more than 50 ms
        self.beats = 0
        self.stop = False
        self.gc_wall = 0.0
        self.gc_cpu = 0.0
        self.gc_full = 0
        self.gc_younger: dict[int, tuple[float, float]] = {}  # generation 0 and 1 -> longest pass (wall, CPU)
        self.tracked = 0
        self.frozen = 0
        self.garbage_left = 0
        self._began: tuple[float, float] | None = None
        self.phases: list[str] = ["start"]  # what the script has done, in order: each phase's longest stall apart
        self.by_phase: dict[str, float] = {}
        self.late_by_phase: dict[str, int] = {}  # beats late by over 50 ms, by the phase they ended in
        self.own: set[str] = set()  # phases of the bench's own measuring (`at`)
        self.split_worst: dict[str, float] = {}  # the longest stall's window: ms running, waiting for a CPU, asleep
        self.split_late = {"running": 0.0, "waiting_for_a_cpu": 0.0, "asleep": 0.0}  # summed over late beats

    def at(self, phase: str, bench_own: bool = False) -> None:
        """The script enters `phase`. `bench_own`: work no driver script does, only this bench (counting every object
        the collector tracks, one call that holds the loop for tens of ms at N=10,000): a beat that overlaps it
        counts in its phase's figure, not in the loop's longest stall or its late beats."""
        self.phases.append(phase)
        if bench_own:
            self.own.add(phase)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = (time.perf_counter(), time.thread_time())
            return
        if self._began is None:
            return
        wall, cpu = time.perf_counter() - self._began[0], time.thread_time() - self._began[1]
        generation = info["generation"]
        if generation == 2:
            self.gc_full += 1
            self.gc_wall, self.gc_cpu = max(self.gc_wall, wall), max(self.gc_cpu, cpu)
        else:  # the young and middle passes: a backlog in them held the loop too (`gcfreeze._pace`)
            was = self.gc_younger.get(generation, (0.0, 0.0))
            self.gc_younger[generation] = (max(was[0], wall), max(was[1], cpu))

    async def run(self) -> None:
        gc.callbacks.append(self._on_gc)
        try:
            stat = _ThreadSched()
            last = time.perf_counter()
            was = stat.read()
            while not self.stop:  # late as the control counts it (control_beat.py): from the wake-up before
                first = len(self.phases) - 1
                await asyncio.sleep(BEAT_S)
                now = time.perf_counter()
                late, window, last = now - last - BEAT_S, now - last, now
                got = stat.read()
                split = stat.split(was, got, window)
                was = got
                self.beats += 1
                for phase in self.phases[first:]:  # a stall counts for every phase it overlapped
                    self.by_phase[phase] = max(self.by_phase.get(phase, 0.0), late)
                if self.own.intersection(self.phases[first:]):
                    continue  # the bench's own measuring held the loop, not the driver
                if late > self.worst and split is not None:
                    self.split_worst = split
                self.worst = max(self.worst, late)
                if late > LATE_S:
                    self.late += 1
                    self.late_by_phase[self.phases[-1]] = self.late_by_phase.get(self.phases[-1], 0) + 1
                    for k, v in (split or {}).items():
                        self.split_late[k] += v
        finally:
            gc.callbacks.remove(self._on_gc)

    def figures(self, n: int) -> dict[str, Any]:
        return {"longest_loop_stall_ms": round(self.worst * 1000, 1),
                "loop_beats_late_over_50ms": self.late, "loop_beats": self.beats,
                "loop_beats_late_over_50ms_by_phase": self.late_by_phase,
                "longest_loop_stall_ms_by_phase": {k: round(v * 1000, 1) for k, v in self.by_phase.items()},
                "longest_loop_stall_window_ms": {k: round(v, 1) for k, v in self.split_worst.items()},
                "late_beats_windows_ms": {k: round(v, 1) for k, v in self.split_late.items()},
                "longest_full_gc_ms": round(self.gc_wall * 1000, 1),
                "longest_full_gc_cpu_ms": round(self.gc_cpu * 1000, 1), "full_gcs": self.gc_full,
                **{f"longest_{name}_gc_{kind}ms": round(self.gc_younger.get(gen, (0.0, 0.0))[i] * 1000, 1)
                   for gen, name in ((0, "young"), (1, "middle")) for i, kind in ((0, ""), (1, "cpu_"))},
                "driver_gc_objects_per_run": round(self.tracked / n, 1),
                "driver_frozen_objects_per_run": round(self.frozen / n, 1),
                "cyclic_garbage_left_frozen": self.garbage_left,
                "full_gcs_whose_survivors_were_frozen": gcfreeze.frozen_passes,
                "middle_gcs_whose_survivors_were_frozen": gcfreeze.frozen_middle_passes}


def control_beat() -> subprocess.Popen[str]:
    """A plain process's loop beside the driver's (`control_beat.py`): what the box's load does to a loop alone."""
    script = Path(__file__).resolve().parent / "control_beat.py"
    return subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def control_figures(control: subprocess.Popen[str]) -> dict[str, Any]:
    """The control's figures once its input closes; a control that died or hangs costs its figures, not the row."""
    try:
        out, _ = control.communicate("", timeout=30)
        got = json.loads(out)
    except (subprocess.TimeoutExpired, ValueError) as exc:
        control.kill()
        return {"control_error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"control_longest_stall_ms": got["longest_stall_ms"],
            "control_beats_late_over_50ms": got["beats_late_over_50ms"], "control_beats": got["beats"]}


async def scale(client: Any, n: int, idle_uss: int) -> dict[str, Any]:
    beat = Heartbeat()
    control = control_beat()  # the same beat in a process of its own, through the same phases
    beating = asyncio.ensure_future(beat.run())
    t = time.perf_counter()
    warm = (await client.start_many_async("notes", [{"changes": "warm-up"}]))[0]
    first_start_s = time.perf_counter() - t
    await warm.until_turn("writer")  # taken by a host, its Turn open: every first-time cost paid
    await warm.cancel_async()
    d0, frozen0 = driver_uss(), gc.get_freeze_count()
    t0 = time.perf_counter()
    beat.at("start_many")
    runs = await client.start_many_async("notes", [{"changes": f"change {i}"} for i in range(n)])
    start_s = time.perf_counter() - t0
    beat.at("listing the runs")
    listed = len(await client.runs_async(status=["queued", "active"]))
    stats0 = await client.stats_async()
    beat.at("the script making a task per run (its own loop)")
    writer = ScriptedAgent("writer", [("ask", {"question": "Which change first?"}), ("done", {"notes": "# Notes"})])
    t_own = time.perf_counter()
    played = await jr2ray.create_tasks(writer.play_async(r) for r in runs)  # in stretches, the loop served between
    own = {"making a task per run": time.perf_counter() - t_own}  # the script's own loops, which hold its loop
    beat.at("asks, until all parked at the Gate")
    await client.until_gates(runs, GATE)  # one wait for all: no task or standing per run on this loop
    at_gate_s = time.perf_counter() - t0
    while (await client.stats_async())["live"]:  # the registry's view: every run parked
        await asyncio.sleep(0.5)
    parked_s = time.perf_counter() - t0
    beat.at("the bench counting memory and the driver's objects", bench_own=True)
    mem = await asyncio.to_thread(instance_uss) - idle_uss
    driver_per_run = (await asyncio.to_thread(driver_uss) - d0) / n
    beat.tracked, beat.frozen = len(gc.get_objects()), gc.get_freeze_count() - frozen0
    load_parked = os.getloadavg()[0]
    beat.at("all parked at the Gate")
    await asyncio.sleep(SETTLE_S)  # a host gives a burst's memory back once quiet for 2 s after its last park
    mem_settled = await asyncio.to_thread(instance_uss) - idle_uss

    t1 = time.perf_counter()
    beat.at("sending every reply (send_many_async)")
    # every Gate answered at once, each a wake: one call hands them all over, in chunks with this loop served between
    sent = asyncio.ensure_future(client.send_many_async(  # a generator: taken a chunk at a time, not built first
        (r, GATE, "reply", {"text": "the first one"}, f"rep-{r.id}") for r in runs))
    own["calling send_many_async"] = time.perf_counter() - t1
    beat.at("wakes, until all published")
    finished, unfinished = await client.wait_async(runs)  # each `final` set as its run finishes, no task per run
    assert not unfinished, f"{len(unfinished)} runs did not finish"
    finals = [r.final for r in finished]
    replied = sum(res.ok for res in await sent)
    wake_s = time.perf_counter() - t1
    receipts = [await p for p in played]  # most are done by now: a done task answers without a step of the loop
    beat.stop = True
    await beating
    controlled = control_figures(control)
    # What freezing left: every frozen object back in the collector's care, one full pass, and what it found
    # unreachable (cycles frozen before they became garbage, never reclaimed while frozen), then frozen again.
    gc.collect()  # first what the collector would find anyway
    gc.unfreeze()
    beat.garbage_left = gc.collect()
    gc.freeze()
    stats = await client.stats_async()
    wrong = [r.id for r in runs if _admissions(client, r.id) != ["ask", "reply", "done"]]
    return {"n": n, "first_start_s": round(first_start_s, 3), "listed_when_start_many_returned": listed,
            "start_per_s": round(n / start_s, 1),
            "all_at_gate_s": round(at_gate_s, 1), "all_parked_at_gate_s": round(parked_s, 1),
            "memory_beyond_idle_gb": round(mem / 2**30, 3),
            "memory_beyond_idle_gb_settled": round(mem_settled / 2**30, 3),
            "driver_memory_per_run_kb": round(driver_per_run / 1024, 1),
            "full_wakes_per_s": round(n / wake_s, 1), "published": sum(f.value == "published" for f in finals),
            "replies_ok": replied,
            "receipts": sum(len(x) for x in receipts), "journals_wrong": len(wrong),
            "activations_per_run": round((stats["activations"] - stats0["activations"]) / n, 2),
            "peak_live": stats["peak_live"], **beat.figures(n), **controlled,
            "load_avg_when_parked": round(load_parked, 2),
            "script_own_loops_ms": {k: round(v * 1000, 1) for k, v in own.items()}}


@ray.remote(num_cpus=0)
class Ping:
    async def ping(self) -> None:
        return None


@ray.remote(num_cpus=0)
class Floor:
    """One per hot run, called as often as its run, so as warm as that run's host: what a pick would cost if Ray
    were all there is (`ping`), if the run only handed back a receipt for the pick's own arguments (`echo`), and if
    it first journaled the pick as one SQLite transaction, as the journal does (WAL, `synchronous=NORMAL`) and as a
    receipt must wait for (`commit`). The floor under a pick's figure on this box, measured beside it."""

    def __init__(self) -> None:
        self.receipt: Any = None  # a copy of a real pick's receipt, handed over once: a pick sends none in
        self.db = sqlite3.connect(str(Path(tempfile.mkdtemp(prefix="jr2ray_floor_")) / "floor.sqlite"),
                                  isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE ledger (seq INTEGER PRIMARY KEY, key TEXT, data TEXT, at REAL)")

    async def ping(self) -> None:
        return None

    async def keep(self, receipt: Any) -> None:
        self.receipt = receipt

    async def echo(self, args: list[Any]) -> Any:
        return self.receipt

    async def commit(self, args: list[Any]) -> Any:
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        cur.execute("INSERT INTO ledger (key, data, at) VALUES (?, ?, ?)",
                    (str(args[3]), json.dumps([args, self.receipt.model_dump(mode="json")]), time.time()))
        cur.execute("COMMIT")
        return self.receipt


async def hot(client: Any, k: int, rounds: int = 50) -> dict[str, Any]:
    """`k` runs live with their writer's Turn open; picks on them against a bare actor's ping, alternating. Beside
    them, `Floor` actors, one per run, each called once a round like its run's host (ping, echo and commit in
    turn), so the pick is also compared with a ping as warm as it, and with the floor a receipt stands on."""
    runs = await client.start_many_async("notes", [{"changes": f"hot {i}"} for i in range(k)])
    await asyncio.gather(*(r.until_turn("writer") for r in runs))
    ping = Ping.remote()  # type: ignore[attr-defined]
    floors = [Floor.remote() for _ in runs]  # type: ignore[attr-defined]
    first = await runs[0].pick_async("writer", "done", {"notes": "too soon"}, "hot-first")  # a receipt to copy
    await asyncio.gather(ping.ping.remote(), *(f.keep.remote(first) for f in floors))
    picks: list[float] = []
    pings: list[float] = []
    warm: dict[str, list[float]] = {"ping": [], "echo": [], "commit": []}
    for i in range(rounds):
        for j, (r, floor) in enumerate(zip(runs, floors, strict=True)):
            args = ["writer", "done", {"notes": "too soon"}, f"hot-{i}-{r.id}"]
            t = time.perf_counter()
            receipt = await r.pick_async(*args)
            picks.append((time.perf_counter() - t) * 1000)
            assert receipt.delivered and not receipt.moved, receipt
            t = time.perf_counter()
            await ping.ping.remote()
            pings.append((time.perf_counter() - t) * 1000)
            arm = ("ping", "echo", "commit")[(i + j) % 3]
            t = time.perf_counter()
            await (floor.ping.remote() if arm == "ping" else getattr(floor, arm).remote(args))
            warm[arm].append((time.perf_counter() - t) * 1000)
    await asyncio.gather(*(r.cancel_async() for r in runs))
    for f in floors:
        ray.kill(f)
    p50, ping50 = statistics.median(picks), statistics.median(pings)
    at = {arm: statistics.median(v) for arm, v in warm.items()}
    return {"hot_runs": k, "hot_picks": len(picks), "pick_p50_ms": round(p50, 3), "pick_p99_ms": _pct(picks, 0.99),
            "ping_p50_ms": round(ping50, 3), "pick_over_ping_p50": round(p50 / ping50, 2),
            "ping_p50_ms_as_warm_as_the_run": round(at["ping"], 3),
            "pick_over_ping_as_warm_p50": round(p50 / at["ping"], 2),
            "floor_echo_over_ping_as_warm_p50": round(at["echo"] / at["ping"], 2),
            "floor_commit_over_ping_as_warm_p50": round(at["commit"] / at["ping"], 2),
            "floor_p50_ms": {arm: round(v, 3) for arm, v in at.items()}}


# The pools of the interleaved pick measurement: a host serves one env, so these two groups of runs sit on hosts
# with everything on and everything off, in one instance (OTEL_SDK_DISABLED is OpenTelemetry's own off switch).
ON_ENV = {"JR2RAY_TELEMETRY": "on"}
OFF_ENV = {"JR2RAY_TELEMETRY": "off", "OTEL_SDK_DISABLED": "true"}


async def hot_interleaved(client: Any, k: int, rounds: int = 100) -> dict[str, Any]:
    """The pick cost of the observability, with the box's load divided out: `k` hot runs on hosts with metrics, logs
    and traces on, `k` on hosts with all of them off, in this one instance; each round picks on an on run, then an
    off run, then pings a bare actor. The runs' log lines are counted per group, so a group that was not what it
    says shows."""
    on = await client.start_many_async("notes", [{"changes": f"on {i}"} for i in range(k)], env=ON_ENV)
    off = await client.start_many_async("notes", [{"changes": f"off {i}"} for i in range(k)], env=OFF_ENV)
    await asyncio.gather(*(r.until_turn("writer") for r in [*on, *off]))
    ping = Ping.remote()  # type: ignore[attr-defined]
    await ping.ping.remote()
    times: dict[str, list[float]] = {"on": [], "off": [], "ping": []}
    for i in range(rounds):
        for a, b in zip(on, off, strict=True):
            for group, r in (("on", a), ("off", b)) if i % 2 == 0 else (("off", b), ("on", a)):
                t = time.perf_counter()
                receipt = await r.pick_async("writer", "done", {"notes": "too soon"}, f"hot-{i}-{r.id}")
                times[group].append((time.perf_counter() - t) * 1000)
                assert receipt.delivered and not receipt.moved, receipt
            t = time.perf_counter()
            await ping.ping.remote()
            times["ping"].append((time.perf_counter() - t) * 1000)
    await asyncio.gather(*(r.cancel_async() for r in [*on, *off]))
    p50 = {g: statistics.median(v) for g, v in times.items()}
    return {"hot_runs_per_group": k, "picks_per_group": len(times["on"]),
            "pick_p50_on_ms": round(p50["on"], 3), "pick_p50_off_ms": round(p50["off"], 3),
            "pick_p99_on_ms": _pct(times["on"], 0.99), "pick_p99_off_ms": _pct(times["off"], 0.99),
            "ping_p50_ms": round(p50["ping"], 3), "pick_p50_on_over_off": round(p50["on"] / p50["off"], 3),
            "run_ids": {"on": [r.id for r in on], "off": [r.id for r in off]}}


def pick_log_lines(home: Path, ids: dict[str, list[str]]) -> dict[str, int]:
    """The `pick` log lines of each group's runs: the on group's picks, and none of the off group's."""
    lines = [json.loads(x) for f in (home / "logs").glob("*.jsonl") for x in f.read_text().splitlines() if x]
    return {g: sum(1 for x in lines if x.get("run") in set(rs) and x.get("event") == "pick") for g, rs in ids.items()}


def _admissions(client: Any, run_id: str) -> list[str]:
    j = client.store.open(run_id)
    try:
        return [e.data["name"] for e in j.ledger("admission")]
    finally:
        j.close()


def _save(out: Path, row: dict[str, Any], key: str = "public_api") -> None:
    report = json.loads(out.read_text()) if out.exists() else {}
    report[key] = [*report.get(key, []), row]
    out.write_text(json.dumps(report, indent=2) + "\n")


class SpanSink:
    """An OTLP/HTTP receiver that takes every POST on /v1/traces and keeps only counts: the collector of the on arm."""

    def __init__(self) -> None:
        self.posts = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sink.posts += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def arm(args: argparse.Namespace, endpoint: str | None, interleaved: bool = False) -> dict[str, Any]:
    """One arm in its own process and private Ray: everything on (metrics, logs, traces exported to `endpoint`) or
    everything off; `interleaved`: the instance on, and hot runs on both kinds of host (`hot_interleaved`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["JR2RAY_TELEMETRY"] = "on" if endpoint else "off"
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env.pop("RAY_ADDRESS", None)
    out = Path(tempfile.mkdtemp(prefix="jr2ray_arm_")) / "arm.json"
    argv = [sys.executable, __file__, "--n", str(args.n), "--hot", str(args.hot), "--out", str(out),
            "--label", "interleaved" if interleaved else "all on" if endpoint else "all off"]
    if interleaved:
        argv += ["--interleaved"]
    if args.max_live is not None:
        argv += ["--max-live", str(args.max_live)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=7200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"broke": f"exit {proc.returncode}: {proc.stderr[-400:]}"}
    return dict(json.loads(lines[-1]))


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    """Arms off and on, alternating, `args.arms` pairs; the on/off ratios of the start rate and the pick p50."""
    sink = SpanSink()
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    watch = LoadWatch()

    def on_arm() -> dict[str, Any]:
        posts = sink.posts
        row = arm(args, sink.url)
        row["span_posts"] = sink.posts - posts
        return row

    posts = sink.posts
    mixed = arm(args, sink.url, interleaved=True)  # the pick figure: both kinds of host in one instance
    mixed["span_posts"] = sink.posts - posts
    for i in range(args.arms):  # the order alternates (off first, then on first): an arm's place in line cancels out
        if i % 2 == 0:
            off = arm(args, None)
            pairs.append((off, on_arm()))
        else:
            on = on_arm()
            pairs.append((arm(args, None), on))
    watch.stop()
    sink.server.shutdown()
    ok = [(off, on) for off, on in pairs if "broke" not in off and "broke" not in on]

    def ratio(key: str) -> float | None:
        vals = [on[key] / off[key] for off, on in ok if off.get(key) and on.get(key)]
        return round(statistics.median(vals), 3) if vals else None

    return {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label or "telemetry on/off",
            "n": args.n, "hot": args.hot, "pairs": len(pairs), "pairs_ok": len(ok),
            "overhead": {"pick_p50_on_over_off_interleaved": mixed.get("pick_p50_on_over_off"),
                         "start_rate_on_over_off": ratio("start_per_s"),
                         "pick_p50_on_over_off": ratio("pick_p50_ms"),
                         # each arm's pick p50 over its own bare-actor ping p50: the box's load divides out
                         "pick_over_ping_on_over_off": ratio("pick_over_ping_p50"),
                         "full_wakes_on_over_off": ratio("full_wakes_per_s"),
                         "what_is_on": "metrics (ray.util.metrics), JSON logs (JR2RAY_TELEMETRY=on) and OpenTelemetry "
                                       "traces (OTLP/HTTP to a local receiver); off: JR2RAY_TELEMETRY=off, no "
                                       "endpoint"},
            "checks": {"log_lines_on": [on.get("log_lines") for _, on in pairs],
                       "log_lines_off": [off.get("log_lines") for off, _ in pairs],
                       "span_posts_on": [on.get("span_posts") for _, on in pairs]},
            "spans_exported": {"posts": sink.posts, "bytes": sink.bytes},
            "load_avg": watch.summary(), "cores": os.cpu_count(),
            "interleaved": mixed, "arms": [{"off": off, "on": on} for off, on in pairs]}


def log_lines(home: Path) -> int:
    """The JSON event lines this arm's instance wrote (`$JR2RAY_HOME/logs`): 0 when telemetry is off."""
    return sum(len(p.read_bytes().splitlines()) for p in (home / "logs").glob("*.jsonl"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--hot", type=int, default=20)
    ap.add_argument("--max-live", type=int, default=None, help="default: the setting (sized from memory)")
    ap.add_argument("--out", default="benchmarks/results/runs_scale.json")
    ap.add_argument("--label", default="")
    ap.add_argument("--overhead", "--traces", dest="overhead", action="store_true",
                    help="measure metrics, logs and traces all on against all off (see the docstring)")
    ap.add_argument("--arms", type=int, default=2, help="with --overhead: pairs of arms (off, on)")
    ap.add_argument("--hot-only", action="store_true", help="only the hot pick figures and their floor")
    ap.add_argument("--interleaved", action="store_true",
                    help="only the interleaved pick measurement (`--overhead` runs it in its own process)")
    args = ap.parse_args()
    if args.overhead:
        row = overhead(args)
        print(json.dumps({k: v for k, v in row.items() if k != "arms"}), flush=True)
        _save(Path(args.out), row)
        return 0
    home = Path(tempfile.mkdtemp(prefix="jr2ray_scale_"))
    os.environ["JR2RAY_HOME"] = str(home)
    settings = load_settings(idle_deactivate_s=IDLE_S, max_live_runs=args.max_live)
    client = jr2ray.connect(launcher=None, settings=settings)
    time.sleep(2)
    idle_uss = instance_uss()
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label,
                           "max_live_runs": settings.live_run_slots(), "runs_per_host": settings.runs_per_host,
                           "idle_deactivate_s": IDLE_S,
                           "load_avg_at_start": os.getloadavg()[0], "cores": os.cpu_count()}
    if args.interleaved:
        watch = LoadWatch()
        row.update(asyncio.run(hot_interleaved(client, args.hot)))
        row["load_avg"] = watch.summary()
        watch.stop()
        ray.shutdown()  # its processes flush and close their log files
        row["pick_log_lines"] = pick_log_lines(home, row.pop("run_ids"))
        print(json.dumps(row), flush=True)
        return 0
    t = time.perf_counter()
    row["warmed_hosts"], row["warm_s"] = client.warm_pool(), round(time.perf_counter() - t, 1)
    watch = LoadWatch()
    try:
        if not args.hot_only:
            row.update(asyncio.run(scale(client, args.n, idle_uss)))
            row["load_avg_during_scale"] = watch.summary()
        if args.hot:
            row.update(asyncio.run(hot(client, args.hot)))
    except Exception as exc:  # noqa: BLE001 - the first thing that broke, in its own words
        traceback.print_exc()
        row["broke"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    watch.stop()
    row["telemetry"] = settings.telemetry
    ray.shutdown()  # its processes flush and close their log files
    row["log_lines"] = log_lines(home)
    print(json.dumps(row), flush=True)
    _save(Path(args.out), row, "hot_only" if args.hot_only else "public_api")  # a hot-only row has no scale figures
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
