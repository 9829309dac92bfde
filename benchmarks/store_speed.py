"""The journal store's speed on SQLite and on PostgreSQL, on the same machine in one run, side by side with the ratio.

Measured for each backend:
- commit: the latency of one macrostep commit (a real deploy run's snapshot plus three ledger entries), p50/p99;
- pick: a Turn's pick through the Run engine in this process (LocalRun; one macrostep, journaled before it answers),
  p50/p99;
- start: runs started a second in this process (journal created, first macrostep committed);
- rebuild: the time to rebuild a 50-pick run from its journal (what activating a parked run costs beyond Ray).

The three arms take turns in rounds, so the load of other jobs on the machine falls on each alike.

Then the same through Ray (`actor`: a private local Ray, `jr2ray.connect(store=..., launcher=None)`, virtual runs
hosted by pooled RunHosts), SQLite and PostgreSQL (synchronous_commit=on) taking turns in rounds:
- pick: the operator's note picks of one deploy run through its RunHandle (driver -> host -> journal -> receipt),
  p50/p99, after warm-up picks each round;
- activation: the run parked (idle_deactivate_s is small), then the first pick of a fresh handle, which wakes it
  (registry -> a pooled host rebuilds it from its journal -> the pick), p50 over `--parks` samples;
- start: `start_many` of `--actor-starts / --rounds` runs, then every one live (its start activation returned),
  runs a second overall and each round's time (`start_round`). Each arm's pool is warmed first (a host per slot,
  each hosting one untimed deploy run), so starts time journals and activations, not process starts.
The 1-minute load average is sampled throughout (the box is shared) and reported with the results.

PostgreSQL runs on a throwaway local server (tests/store/pg_server.py) with its durable defaults (fsync on), once
with `synchronous_commit=on` (each commit waits for its WAL flush) and once with `off` (SQLite's WAL with
synchronous=NORMAL, as the store uses it, does not wait for a flush either). The goal: PostgreSQL within 2x of
SQLite on pick p50.

    python benchmarks/store_speed.py [--commits 1000] [--picks 300] [--starts 100] [--rounds 10]
        [--actor-picks 300] [--parks 20] [--actor-starts 50] [--no-actor] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "store"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pg_server  # noqa: E402
from store_speed_actor import measure_actor  # noqa: E402

from jr2ray.run import LocalRun  # noqa: E402
from jr2ray.run.store import Store  # noqa: E402
from jr2ray.run.store.postgresql import PgStore, close_pools  # noqa: E402
from workflows.deploy import machine as deploy  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _ms(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    return {"p50_ms": round(_pct(xs, 0.5) * 1e3, 3), "p99_ms": round(_pct(xs, 0.99) * 1e3, 3),
            "mean_ms": round(statistics.fmean(xs) * 1e3, 3), "n": len(xs)}


class Arm:
    """One backend's runs and samples. The arms take turns in rounds, so the shared machine's load (other jobs)
    falls on every arm alike."""

    def __init__(self, name: str, store: Any, tmp: Path) -> None:
        self.name, self.store = name, store
        self.door = {"log_path": str(tmp / f"{name}.log")}
        self.run: Any = None
        self.handles: list[Any] = []
        self.samples: dict[str, list[float]] = {"pick": [], "commit": [], "rebuild": []}
        self.started = 0
        self.start_s = 0.0
        self.snapshot: dict[str, Any] = {}

    async def setup(self) -> None:
        self.run = LocalRun(deploy, self.door, run_id=f"pick-{self.name}", store=self.store)
        for i in range(20):  # warm caches, pools and the planner
            await self.run.pick("operator", "note", {"text": f"warm {i}"})
        for k in range(10):
            rid = f"commit-{self.name}-{k}"
            j = self.store.open(rid, create=True)
            j.create(rid, "deploy", deploy.digest, self.door)
            self.handles.append(j)

    async def picks(self, n: int) -> None:
        """A Turn's note picks: each one macrostep, journaled before the receipt comes back."""
        for i in range(n):
            t0 = time.perf_counter()
            r = await self.run.pick("operator", "note", {"text": f"line {i}: checked the changelog and migration"})
            self.samples["pick"].append(time.perf_counter() - t0)
            assert r.moved, r
        self.snapshot = self.run.engine.snapshot.to_json()

    def commits(self, n: int) -> None:
        """Bare commits the size of a real pick's macrostep (its snapshot, three ledger entries), over 10 runs."""
        base = len(self.samples["commit"])
        for i in range(base, base + n):
            entries = [("admission", f"turn:operator/{i}", {"name": "note", "args": {"text": f"line {i}"}}),
                       ("receipt", f"turn:operator/{i}", {"moved": True, "answer": "noted", "allowed": ["deploy"]}),
                       ("feed", str(i), {"kind": "pick", "at": time.time(), "data": {"name": "note"}})]
            t0 = time.perf_counter()
            self.handles[i % 10].commit(deploy.digest, "active", self.snapshot, entries)
            self.samples["commit"].append(time.perf_counter() - t0)

    async def starts(self, n: int) -> None:
        t0 = time.perf_counter()
        for _ in range(n):
            LocalRun(deploy, self.door, run_id=f"start-{self.name}-{self.started}", store=self.store)
            self.started += 1
        self.start_s += time.perf_counter() - t0

    async def rebuilds(self, n: int) -> None:
        """Rebuild a 50-pick run from its journal alone, as an activation does."""
        rid = f"rebuild-{self.name}"
        if not self.store.exists(rid):
            run = LocalRun(deploy, self.door, run_id=rid, store=self.store)
            for i in range(50):
                await run.pick("operator", "note", {"text": f"line {i}"})
            await asyncio.sleep(0.01)
        for _ in range(n):
            t0 = time.perf_counter()
            run = LocalRun(deploy, self.door, run_id=rid, store=self.store)
            self.samples["rebuild"].append(time.perf_counter() - t0)
            assert len(run.context["notes"]) == 50, "the rebuilt run lost notes"
            await asyncio.sleep(0.005)  # let it flush what its start staged before the next rebuild reads it

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: _ms(v) for k, v in self.samples.items()}
        out["start_per_s"] = round(self.started / self.start_s, 1)
        out["snapshot_bytes_at_end"] = len(json.dumps(self.snapshot))
        return out


async def measure(arms: list[Arm], args: argparse.Namespace) -> None:
    for arm in arms:
        await arm.setup()
    for r in range(args.rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for arm in order:
            await arm.picks(args.picks // args.rounds)
            arm.commits(args.commits // args.rounds)
            await arm.starts(max(1, args.starts // args.rounds))
            await arm.rebuilds(max(1, 20 // args.rounds))


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """b / a for every latency (higher is slower), a / b for the start rate (higher is slower too)."""
    ratios = {f"{k}_{q}": round(b[k][q] / a[k][q], 2) for k in ("commit", "pick", "rebuild")
              for q in ("p50_ms", "p99_ms")}
    ratios["start_rate"] = round(a["start_per_s"] / b["start_per_s"], 2)
    return ratios


def _actor_ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """PostgreSQL over SQLite through Ray: latencies b / a, the start rate a / b (higher is slower for each)."""
    ratios: dict[str, float | None] = {f"{k}_{q}": round(b[k][q] / a[k][q], 2)
                                       for k in ("pick", "activation", "start_round") for q in ("p50_ms", "p99_ms")}
    ratios["start_rate"] = round(a["start_per_s"] / b["start_per_s"], 2) if a["start_per_s"] and b["start_per_s"] \
        else None
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--picks", type=int, default=300)
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--actor-picks", type=int, default=300)
    ap.add_argument("--parks", type=int, default=20)
    ap.add_argument("--actor-starts", type=int, default=50)
    ap.add_argument("--no-actor", action="store_true", help="skip the Ray arms")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "store_speed.json"))
    args = ap.parse_args()
    load_at_start = [round(x, 1) for x in os.getloadavg()]
    server = pg_server.PgServer(durable=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="jr2ray-bench-") as tmp:
            arms = [Arm("sqlite", Store(Path(tmp) / "runs"), Path(tmp)),
                    Arm("postgresql_sync", PgStore(server.url), Path(tmp)),
                    Arm("postgresql_async", PgStore(server.url + "?options=-c%20synchronous_commit%3Doff"), Path(tmp))]
            asyncio.run(measure(arms, args))
            results = {arm.name: arm.result() for arm in arms}
            actor = None if args.no_actor else measure_actor(
                {"sqlite": str(Path(tmp) / "actor-runs"), "postgresql": server.url}, Path(tmp), args.rounds,
                args.actor_picks, args.parks, args.actor_starts, _ms)
    finally:
        close_pools()
        server.stop()
    out = {
        "what": "journal store speed, SQLite vs PostgreSQL on the same machine (see benchmarks/store_speed.py)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "postgresql": "15 (local, loopback)",
                    "load_average_at_start": load_at_start,
                    "load_average_at_end": [round(x, 1) for x in os.getloadavg()]},
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
        "ratio_postgresql_sync_over_sqlite": _ratio(results["sqlite"], results["postgresql_sync"]),
        "ratio_postgresql_async_over_sqlite": _ratio(results["sqlite"], results["postgresql_async"]),
        "goal": "PostgreSQL pick p50 within 2x of SQLite's",
    }
    if actor is not None:
        out["actor"] = actor
        out["ratio_actor_postgresql_over_sqlite"] = _actor_ratio(actor["sqlite"], actor["postgresql"])
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
