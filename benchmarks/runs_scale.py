"""Many virtual runs driven from one script through the public API only, as the README's driving example does.

The notes workflow: this script plays the writer (`ask`, then `done`) with `ScriptedAgent` and answers every Gate
(`until_gate`, then `send_async`). Nothing here reaches a private name: `benchmarks/` is checked for that by
`tests/unit/test_benchmarks_public.py`. For N runs (the issue asks for 10,000) it measures, in one run:
1. starts journaled through `start_many` a second (it returns once every start is journaled and listed);
2. the time until all N are parked at their Gate, and the instance's memory then beyond the idle instance;
3. full wakes a second: every Gate answered at once, reply until the run is `published` (its writer's `done` sent
   as soon as its Turn is at Rest again);
4. activations per run (the registry's count, from `client.stats()`), and every journal checked: each run admitted
   ask, reply, done exactly once;
5. the driver's own memory per run, and the longest stall of the driver's event loop (a heartbeat every 10 ms);
6. hot: a pick on a live run against a bare Ray actor ping, alternating, in this same script (p50 ratio).
The pool is warmed first with `client.warm_pool()` (what `jr2ray up` does in the background). The 1-minute load
average is sampled throughout: each row says how loaded the box was.

    RAY_ADDRESS=local PYTHONPATH=$PWD python3 benchmarks/runs_scale.py [--n 10000] [--hot 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from load_watch import LoadWatch  # noqa: E402 - beside this script

import jr2ray  # noqa: E402
from jr2ray.settings import load_settings  # noqa: E402
from jr2ray.testing import ScriptedAgent  # noqa: E402

GATE = "notes.writing.asking"
IDLE_S = 1.0


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


class Heartbeat:
    """The driver loop's longest stall: a task that sleeps 10 ms and records how late it woke."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.stop = False

    async def run(self) -> None:
        while not self.stop:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.perf_counter() - t - 0.01)


async def scale(client: Any, n: int, idle_uss: int) -> dict[str, Any]:
    beat = Heartbeat()
    beating = asyncio.ensure_future(beat.run())
    d0 = driver_uss()
    t0 = time.perf_counter()
    runs = await client.start_many_async("notes", [{"changes": f"change {i}"} for i in range(n)])
    start_s = time.perf_counter() - t0
    listed = len(await client.runs_async(status=["queued", "active"]))
    stats0 = await client.stats_async()
    writer = ScriptedAgent("writer", [("ask", {"question": "Which change first?"}), ("done", {"notes": "# Notes"})])
    played = [asyncio.ensure_future(writer.play_async(r)) for r in runs]
    await asyncio.gather(*(r.until_gate(GATE) for r in runs))
    at_gate_s = time.perf_counter() - t0
    while (await client.stats_async())["live"]:  # the registry's view: every run parked
        await asyncio.sleep(0.5)
    parked_s = time.perf_counter() - t0
    mem = await asyncio.to_thread(instance_uss) - idle_uss
    driver_per_run = (await asyncio.to_thread(driver_uss) - d0) / n
    load_parked = os.getloadavg()[0]

    t1 = time.perf_counter()
    for r in runs:  # every Gate answered at once: each is a wake
        r.send_async(GATE, "reply", {"text": "the first one"}, f"rep-{r.id}")
    finals = await asyncio.gather(*(r.finished() for r in runs))
    wake_s = time.perf_counter() - t1
    receipts = await asyncio.gather(*played)
    beat.stop = True
    await beating
    stats = await client.stats_async()
    wrong = [r.id for r in runs if _admissions(client, r.id) != ["ask", "reply", "done"]]
    return {"n": n, "listed_when_start_many_returned": listed, "start_per_s": round(n / start_s, 1),
            "all_at_gate_s": round(at_gate_s, 1), "all_parked_at_gate_s": round(parked_s, 1),
            "memory_beyond_idle_gb": round(mem / 2**30, 3), "driver_memory_per_run_kb": round(driver_per_run / 1024, 1),
            "full_wakes_per_s": round(n / wake_s, 1), "published": sum(f.value == "published" for f in finals),
            "receipts": sum(len(x) for x in receipts), "journals_wrong": len(wrong),
            "activations_per_run": round((stats["activations"] - stats0["activations"]) / n, 2),
            "peak_live": stats["peak_live"], "longest_loop_stall_ms": round(beat.worst * 1000, 1),
            "load_avg_when_parked": round(load_parked, 2)}


@ray.remote(num_cpus=0)
class Ping:
    async def ping(self) -> None:
        return None


async def hot(client: Any, k: int, rounds: int = 50) -> dict[str, Any]:
    """`k` runs live with their writer's Turn open; picks on them against a bare actor's ping, alternating."""
    runs = await client.start_many_async("notes", [{"changes": f"hot {i}"} for i in range(k)])
    await asyncio.gather(*(r.until_turn("writer") for r in runs))
    ping = Ping.remote()  # type: ignore[attr-defined]
    await ping.ping.remote()
    picks: list[float] = []
    pings: list[float] = []
    for i in range(rounds):
        for r in runs:
            t = time.perf_counter()
            receipt = await r.pick_async("writer", "done", {"notes": "too soon"}, f"hot-{i}-{r.id}")
            picks.append((time.perf_counter() - t) * 1000)
            assert receipt.delivered and not receipt.moved, receipt
            t = time.perf_counter()
            await ping.ping.remote()
            pings.append((time.perf_counter() - t) * 1000)
    await asyncio.gather(*(r.cancel_async() for r in runs))
    p50, ping50 = statistics.median(picks), statistics.median(pings)
    return {"hot_runs": k, "hot_picks": len(picks), "pick_p50_ms": round(p50, 3), "pick_p99_ms": _pct(picks, 0.99),
            "ping_p50_ms": round(ping50, 3), "pick_over_ping_p50": round(p50 / ping50, 2)}


def _admissions(client: Any, run_id: str) -> list[str]:
    j = client.store.open(run_id)
    try:
        return [e.data["name"] for e in j.ledger("admission")]
    finally:
        j.close()


def _save(out: Path, row: dict[str, Any]) -> None:
    report = json.loads(out.read_text()) if out.exists() else {}
    report["public_api"] = [*report.get("public_api", []), row]
    out.write_text(json.dumps(report, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--hot", type=int, default=20)
    ap.add_argument("--max-live", type=int, default=None, help="default: the setting (sized from memory)")
    ap.add_argument("--out", default="benchmarks/results/runs_scale.json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jr2ray_scale_"))
    os.environ["JR2RAY_HOME"] = str(home)
    settings = load_settings(idle_deactivate_s=IDLE_S, max_live_runs=args.max_live)
    client = jr2ray.connect(launcher=None, settings=settings)
    time.sleep(2)
    idle_uss = instance_uss()
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "label": args.label,
                           "max_live_runs": settings.live_run_slots(), "idle_deactivate_s": IDLE_S,
                           "load_avg_at_start": os.getloadavg()[0], "cores": os.cpu_count()}
    t = time.perf_counter()
    row["warmed_hosts"], row["warm_s"] = client.warm_pool(), round(time.perf_counter() - t, 1)
    watch = LoadWatch()
    try:
        row.update(asyncio.run(scale(client, args.n, idle_uss)))
        row["load_avg_during_scale"] = watch.summary()
        if args.hot:
            row.update(asyncio.run(hot(client, args.hot)))
    except Exception as exc:  # noqa: BLE001 - the first thing that broke, in its own words
        traceback.print_exc()
        row["broke"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    watch.stop()
    print(json.dumps(row), flush=True)
    _save(Path(args.out), row)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
