"""Virtual runs at scale on one 2-core, 24 GB node, driven from one script (the notes workflow).

The writer is played by this script (its `ask`, then `done`); the editor answers every Gate. Runs are virtual:
pooled RunHosts hold them only while they work, at most `max_live_runs` at once; the rest are parked in their
journals. It measures, for N runs (the issue asks for 10,000):
1. start: the journal-first start rate, the time until all N are parked at the Gate, and the instance's memory then
   beyond the idle instance (goal < 3 GB);
2. wake: all N Gates answered as fast as the driver sends: wakes a second (goal >= 50), wake latency p50/p99 (send
   until the pick's receipt), the peak of live hosts, the time until all N are `published`, and each journal checked
   (no admission lost or applied twice);
3. hot: 200 runs live at once, each with an open Turn: pick p50/p99 through the host (goal p50 < 5 ms), timed
   after the 200 hosts' process starts, once the instance's CPU has settled; the load average of the timed part
   and the instance's CPU (settled, and during the picks) are reported beside it;
4. the idle cost of a parked run: bytes of memory (beyond the idle instance, less the warm pool's hosts, which wait
   for the next wake and do not grow with N) and bytes of journal.
The pool is warmed first (its process starts are counted apart, as `up` would do them). The 1-minute load average
is sampled throughout: the box is shared, and each row says how loaded it was. The old N=10..200 table (one live
actor per run) is kept as the baseline row in the results file. N=10,000 takes about 15-25 minutes on 2 cores.

    python benchmarks/runs_scale.py [--n 10000] [--hot 200] [--max-live N] [--out benchmarks/results/runs_scale.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_watch import LoadWatch  # noqa: E402 - beside this script

import jr2ray
from jr2ray.settings import load_settings

GATE = "notes.writing.asking"
IDLE_S = 1.0


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else float("nan")


def instance_uss(only: str | None = None) -> int:
    """Unique memory of this Ray instance: every process below this driver (GCS, raylet, workers, hosts), or only
    those whose command line holds `only` (e.g. the idle warm hosts, "ray::RunHost")."""
    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if only is None or only in " ".join(p.cmdline()):
                total += p.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


ROLES = {"gcs": "gcs_server", "raylet": "raylet", "registry": "ray::RunRegistry", "hosts": "ray::RunHost",
         "timers": "ray::TimerService"}


def memory_by_role() -> dict[str, Any]:
    """The instance's unique memory in MB by process role (GCS, raylet, registry, hosts, timer service, the rest),
    with the hosts' count and mean: where a parked run's bytes are."""
    mb: dict[str, float] = {k: 0.0 for k in [*ROLES, "other"]}
    hosts: list[int] = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd, uss = " ".join(p.cmdline()), p.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        role = next((k for k, marker in ROLES.items() if marker in cmd), "other")
        mb[role] += uss / 2**20
        if role == "hosts":
            hosts.append(uss)
    return {**{k: round(v, 1) for k, v in mb.items()}, "host_count": len(hosts),
            "host_mean": round(sum(hosts) / len(hosts) / 2**20, 1) if hosts else 0.0,
            "host_max": round(max(hosts, default=0) / 2**20, 1)}


def _stats(client: Any) -> dict[str, Any]:
    return ray.get(client.registry().stats.remote())


def _wait_parked(client: Any, ids: set[str], timeout_s: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        st = _stats(client)
        if not (set(st["live"]) | set(st["queued"])) & ids:
            return time.perf_counter() - t0
        time.sleep(0.5)
    raise RuntimeError(f"runs still live after {timeout_s:.0f}s: {len(_stats(client)['live'])}")


async def _ask_all(runs: list[Any]) -> list[Any]:
    """Each run, once admitted (its start activation returns), gets its writer's `ask`; the refs wait for Rest."""
    async def one(r: Any) -> Any:
        (host,) = await r.starting  # the host it was admitted to: the pick goes there with no blocking look-up
        r.host, r.starting = host, None  # (without it, each pick_async blocked this loop on a registry round trip)
        return r.pick_async("writer", "ask", {"question": "Which change first?"}, f"ask-{r.id}")
    return await asyncio.gather(*(one(r) for r in runs))


def phase_start_and_wake(client: Any, n: int, idle_uss: int) -> dict[str, Any]:
    tw = time.perf_counter()  # what `up` would do: the pool's process starts, once, before any run
    warmed = ray.get(client.registry().warm.remote(client.settings.live_run_slots()), timeout=1800)
    warm_s = time.perf_counter() - tw
    t0 = time.perf_counter()
    runs = client.start_many("notes", [{"changes": f"change {i}"} for i in range(n)])
    while sum(1 for r in runs if client.store.exists(r.id)) < n:  # journal-first: every run has its journal
        time.sleep(0.2)
    start_s = time.perf_counter() - t0
    asks = asyncio.run(_ask_all(runs))
    while any(not _has_gate_admission(client, r.id) for r in runs[-1:]):
        time.sleep(0.2)
    parked_s = _wait_parked(client, {r.id for r in runs}, 3600) + (time.perf_counter() - t0 - start_s)
    mem = instance_uss() - idle_uss
    roles = memory_by_role()  # MB by role, at the same moment (hosts: count, mean, max USS)
    load_when_parked = os.getloadavg()[0]
    pool_mem = instance_uss("ray::RunHost")  # the warm hosts waiting for the next wake: not a parked run's cost
    warm_hosts = _stats(client)["idle_hosts"]
    journal_bytes = sum(_journal_size(client, r.id) for r in runs)

    lat: list[float] = []
    t1 = time.perf_counter()
    arrived: list[Any] = []
    for r, ask in zip(runs, asks, strict=True):  # each receipt is timed as it arrives (a callback, not a poll)
        sent_at = time.perf_counter()
        fut = ask.future()
        fut.add_done_callback(lambda _f, t=sent_at: lat.append((time.perf_counter() - t) * 1000))
        arrived.append(fut)
        r.send_async(GATE, "reply", {"text": "the first one"}, f"rep-{r.id}")
    sent_s = time.perf_counter() - t1
    assert all(f.result(timeout=1800).moved for f in arrived)
    wake_s = time.perf_counter() - t1
    t2 = time.perf_counter()  # the second wake of each run: its writer's `done`
    for pending in [r.pick_async("writer", "done", {"notes": "# Notes"}, f"done-{r.id}") for r in runs]:
        pending.result(1800)
    done_s = time.perf_counter() - t2
    done, pending = client.wait(runs, timeout=1800)
    total_s = time.perf_counter() - t1
    bad = [r.id for r in runs if _admissions(client, r.id) != ["ask", "reply", "done"]]
    published = sum(1 for r in done if r.final and r.final.value == "published")
    return {"n": n, "warmed_hosts": warmed, "warm_s": round(warm_s, 1), "start_per_s": round(n / start_s, 1),
            "all_parked_at_gate_s": round(parked_s, 1),
            "memory_beyond_idle_gb": round(mem / 2**30, 3), "wakes_per_s": round(n / wake_s, 1),
            "sends_per_s": round(n / sent_s, 1), "done_wakes_per_s": round(n / done_s, 1),
            "wake_p50_ms": _pct(lat, 0.5), "wake_p99_ms": _pct(lat, 0.99),
            "peak_live": _stats(client)["peak_live"], "all_published_s": round(total_s, 1),
            "published": published, "not_finished": len(pending), "journals_wrong": len(bad),
            "warm_hosts_memory_gb": round(pool_mem / 2**30, 3), "warm_hosts": warm_hosts,
            "parked_run_memory_bytes": int((mem - pool_mem) / n),
            "parked_run_memory_bytes_with_pool": int(mem / n), "parked_run_journal_bytes": int(journal_bytes / n),
            "early_parks": _stats(client)["early_parks"], "activations": _stats(client)["activations"],
            "memory_by_role_mb_when_parked": roles, "memory_by_role_mb_at_end": memory_by_role(),
            "load_avg_when_parked": round(load_when_parked, 2)}


def phase_hot(n: int, home: Path) -> dict[str, Any]:
    """N runs live at once (a long idle, room for all), each with its writer's Turn open: picks through the host.
    Its own Ray instance: the registry is one named actor per namespace, and the first phase's (idle 1 s, 40 slots)
    would otherwise serve these runs too (it did, before: those picks were wakes).

    The N hosts' process starts (about 0.5 s of CPU each) come first and are not timed: the picks are timed once
    the instance's CPU has settled, and the row says how busy the instance and the box were while they ran. The
    N idle hosts' own background CPU is part of holding N runs live, so it stays in (and is reported)."""
    ray.shutdown()
    _init_ray()
    client = jr2ray.connect(store=home / "hot", launcher=None, virtual=True,
                            settings=load_settings(idle_deactivate_s=3600, max_live_runs=n))
    t0 = time.perf_counter()
    runs = client.start_many("notes", [{"changes": f"hot {i}"} for i in range(n)])
    for r, (host,) in zip(runs, ray.get([r.starting for r in runs], timeout=1800), strict=True):
        r.host, r.starting = host, None  # each pick goes straight to its run's host
    up_s = time.perf_counter() - t0
    open_turns = sum(1 for r in runs if any(t.active for t in r.status().turns))  # through each host, untimed
    settle_s, settled_cores = _settle()
    watch = LoadWatch(every_s=1.0)
    cpu0, t1 = _instance_cpu_s(), time.perf_counter()
    lat: list[float] = []
    for k in range(3):
        for r in runs:
            t = time.perf_counter()
            receipt = r.pick("writer", "done", {"notes": "too soon"}, f"hot-{k}-{r.id}")  # delivered, not moved
            lat.append((time.perf_counter() - t) * 1000)
            assert receipt.delivered and not receipt.moved, receipt
    picks_s = time.perf_counter() - t1
    cores = (_instance_cpu_s() - cpu0) / picks_s
    watch.stop()
    st = ray.get(client.registry().stats.remote())
    for r in runs:
        r.cancel()
    return {"hot_runs": n, "hot_open_turns": open_turns, "hot_live_during_picks": len(st["live"]),
            "hot_picks": len(lat), "pick_p50_ms": _pct(lat, 0.5), "pick_p99_ms": _pct(lat, 0.99),
            "hot_peak_live": st["peak_live"], "hot_up_s": round(up_s, 1), "hot_settle_s": round(settle_s, 1),
            "hot_instance_cores_settled": round(settled_cores, 2), "hot_instance_cores_during_picks": round(cores, 2),
            "load_avg_during_hot_picks": watch.summary()}


def _instance_cpu_s() -> float:
    """CPU seconds used so far by this driver and every process below it (the Ray instance and its hosts)."""
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def _settle(window_s: float = 3.0, least_s: float = 10.0, most_s: float = 240.0) -> tuple[float, float]:
    """Wait until the instance's CPU stops falling after the process starts: three windows in a row within 15% (or
    0.05 cores) of each other, after at least `least_s`, at most `most_s`. Returns (seconds waited, cores busy in
    the last window): what N idle live hosts cost by themselves."""
    t0 = time.perf_counter()
    rates: list[float] = []
    while True:
        c0, w0 = _instance_cpu_s(), time.perf_counter()
        time.sleep(window_s)
        rates.append((_instance_cpu_s() - c0) / (time.perf_counter() - w0))
        last = rates[-3:]
        flat = len(last) == 3 and max(last) - min(last) <= max(0.05, 0.15 * max(last))
        waited = time.perf_counter() - t0
        if (flat and waited >= least_s) or waited >= most_s:
            return waited, rates[-1]


def _init_ray() -> None:
    """A private local Ray (address="local": never join another engineer's cluster recorded in /tmp/ray), with the
    Ray settings `jr2ray up` gives an instance."""
    from jr2ray.cli.rayproc import INSTANCE_RAY_ENV

    for k, v in INSTANCE_RAY_ENV.items():
        os.environ.setdefault(k, v)
    ray.init(address="local", num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)


def _journal_size(client: Any, run_id: str) -> int:
    p = client.store.path(run_id)
    return sum(q.stat().st_size for q in (p, p.with_name(p.name + "-wal")) if q.exists())


def _has_gate_admission(client: Any, run_id: str) -> bool:
    return "ask" in _admissions(client, run_id)


def _admissions(client: Any, run_id: str) -> list[str]:
    j = client.store.open(run_id)
    try:
        return [e.data["name"] for e in j.ledger("admission")]
    finally:
        j.close()


def _save(out: Path, row: dict[str, Any], first: bool) -> None:
    """Add this run's row to the results file (`first`), or replace it with its later, fuller version."""
    report = json.loads(out.read_text()) if out.exists() else {}
    baseline = report.get("baseline") or {k: report[k] for k in ("rows", "largest_n_that_held", "first_break",
                                                                  "note") if k in report}
    rows = list(report.get("virtual", []))
    rows = [*rows, row] if first or not rows else [*rows[:-1], row]
    out.write_text(json.dumps({**report, "baseline": baseline, "virtual": rows}, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--hot", type=int, default=200)
    ap.add_argument("--max-live", type=int, default=None, help="default: the setting (sized from memory)")
    ap.add_argument("--out", default="benchmarks/results/runs_scale.json")
    ap.add_argument("--label", default="", help="a note saved with the row (say when N is below the issue's 10,000)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jr2ray_scale_"))
    os.environ["JR2RAY_HOME"] = str(home)
    _init_ray()
    settings = load_settings(idle_deactivate_s=IDLE_S, max_live_runs=args.max_live)
    time.sleep(2)
    idle_uss = instance_uss()
    idle_roles = memory_by_role()
    client = jr2ray.connect(store=home / "runs", launcher=None, settings=settings, virtual=True)
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label,
                           "max_live_runs": settings.live_run_slots(), "idle_deactivate_s": IDLE_S,
                           "load_avg_at_start": os.getloadavg()[0], "cores": os.cpu_count(),
                           "memory_by_role_mb_idle": idle_roles,
                           "shared_box": "the machine is shared with other engineers' tests; see load_avg_during"}
    out = Path(args.out)
    try:
        watch = LoadWatch()
        t0 = time.perf_counter()
        row.update(phase_start_and_wake(client, args.n, idle_uss))
        row["scale_phase_s"], row["load_avg_during_scale"] = round(time.perf_counter() - t0, 1), watch.summary()
        watch.stop()
        print(json.dumps(row), flush=True)
        _save(out, row, first=True)  # a run cut short later keeps this phase
        if args.hot:
            watch = LoadWatch()
            row.update(phase_hot(args.hot, home))
            row["load_avg_during_hot"] = watch.summary()  # the whole phase, the hosts' starts included
            watch.stop()
    except Exception as exc:  # noqa: BLE001 - the first thing that broke, in its own words
        row["broke"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    print(json.dumps(row), flush=True)
    _save(out, row, first="scale_phase_s" not in row)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
