"""The journal store's speed on SQLite and on PostgreSQL, on the same machine in one run, side by side with the ratio.

Measured for each backend:
- commit: the latency of one macrostep commit (a real deploy run's snapshot plus three ledger entries), p50/p99;
- pick: a Turn's pick through the Run engine in this process (LocalRun; one macrostep, journaled before it answers),
  p50/p99. Not through a Ray actor: the actor does not run on the PostgreSQL store yet;
- start: runs started a second in this process (journal created, first macrostep committed);
- rebuild: the time to rebuild a run from its journal (what activating a parked run costs beyond Ray), p50/p99.

PostgreSQL runs on a throwaway local server (tests/store/pg_server.py) with its durable defaults (fsync on), once
with `synchronous_commit=on` (each commit waits for its WAL flush) and once with `off` (SQLite's WAL with
synchronous=NORMAL, as the store uses it, does not wait for a flush either). The goal: PostgreSQL within 2x of
SQLite on pick p50.

    python benchmarks/store_speed.py [--commits 1000] [--picks 300] [--starts 100] [--out FILE.json]
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

import pg_server  # noqa: E402

from jr2ray.run import LocalRun  # noqa: E402
from jr2ray.run.pg_store import PgStore, close_pools  # noqa: E402
from jr2ray.run.store import Store  # noqa: E402
from workflows.deploy import machine as deploy  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_pct(xs, 0.5) * 1e3, 3), "p99_ms": round(_pct(xs, 0.99) * 1e3, 3),
            "mean_ms": round(statistics.fmean(xs) * 1e3, 3), "n": len(xs)}


async def _picks(store: Any, n: int, tag: str, log: Path) -> tuple[list[float], dict[str, Any], str]:
    """Drive one deploy run's operator through `n` note picks; returns their latencies, the last snapshot, the id."""
    run = LocalRun(deploy, {"log_path": str(log)}, run_id=f"pick-{tag}", store=store)
    lat: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        r = await run.pick("operator", "note", {"text": f"line {i}: checked the changelog and the migration"})
        lat.append(time.perf_counter() - t0)
        assert r.moved, r
    snap = run.engine.snapshot.to_json()
    return lat, snap, run.id


async def _starts(store: Any, n: int, tag: str, log: Path) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        LocalRun(deploy, {"log_path": str(log)}, run_id=f"start-{tag}-{i}", store=store)
    return n / (time.perf_counter() - t0)


async def _rebuilds(store: Any, run_id: str, n: int, log: Path) -> list[float]:
    lat: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        run = LocalRun(deploy, {"log_path": str(log)}, run_id=run_id, store=store)
        lat.append(time.perf_counter() - t0)
        assert run.context["notes"], "the rebuilt run lost its notes"
        await asyncio.sleep(0.005)  # let it flush what its start staged before the next rebuild reads the run
    return lat


def _commits(store: Any, snapshot: dict[str, Any], n: int, tag: str) -> list[float]:
    """`n` macrostep commits spread over 10 runs, each the size of a real pick's."""
    runs = []
    for k in range(10):
        j = store.open(f"commit-{tag}-{k}", create=True)
        j.create(f"commit-{tag}-{k}", "deploy", deploy.digest, {"log_path": "/dev/null"})
        runs.append(j)
    lat: list[float] = []
    for i in range(n):
        entries = [("admission", f"turn:operator/{i}", {"name": "note", "args": {"text": f"line {i}"}}),
                   ("receipt", f"turn:operator/{i}", {"moved": True, "answer": "noted", "allowed": ["deploy"]}),
                   ("feed", str(i), {"kind": "pick", "at": time.time(), "data": {"name": "note"}})]
        t0 = time.perf_counter()
        runs[i % 10].commit(deploy.digest, "active", snapshot, entries)
        lat.append(time.perf_counter() - t0)
    return lat


async def one_backend(name: str, store: Any, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    log = tmp / f"{name}.log"
    await _picks(store, 20, f"{name}-warm", log)  # warm caches, pools and the planner
    pick_lat, snap, rid = await _picks(store, args.picks, name, log)
    commit_lat = _commits(store, snap, args.commits, name)
    rate = await _starts(store, args.starts, name, log)
    rebuild_lat = await _rebuilds(store, rid, 20, log)
    return {"commit": _ms(commit_lat), "pick": _ms(pick_lat), "start_per_s": round(rate, 1),
            "rebuild": _ms(rebuild_lat), "snapshot_bytes": len(json.dumps(snap))}


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """b / a for every latency (higher is slower), a / b for the start rate (higher is slower too)."""
    out = {f"{k}_{q}": round(b[k][q] / a[k][q], 2) for k in ("commit", "pick", "rebuild") for q in ("p50_ms", "p99_ms")}
    out["start_rate"] = round(a["start_per_s"] / b["start_per_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--picks", type=int, default=300)
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "store_speed.json"))
    args = ap.parse_args()
    server = pg_server.PgServer(durable=True).start()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="jr2ray-bench-") as tmp:
            stores = {"sqlite": Store(Path(tmp) / "runs"),
                      "postgresql_sync": PgStore(server.url),
                      "postgresql_async": PgStore(server.url + "?options=-c%20synchronous_commit%3Doff")}
            for name, store in stores.items():
                results[name] = asyncio.run(one_backend(name, store, args, Path(tmp)))
                print(name, json.dumps(results[name]), flush=True)
    finally:
        close_pools()
        server.stop()
    out = {
        "what": "journal store speed, SQLite vs PostgreSQL on the same machine (see benchmarks/store_speed.py)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "postgresql": "15 (local, loopback)"},
        "args": vars(args) | {"out": None},
        "results": results,
        "ratio_postgresql_sync_over_sqlite": _ratio(results["sqlite"], results["postgresql_sync"]),
        "ratio_postgresql_async_over_sqlite": _ratio(results["sqlite"], results["postgresql_async"]),
        "goal": "PostgreSQL pick p50 within 2x of SQLite's",
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("ratio_postgresql_sync_over_sqlite", "ratio_postgresql_async_over_sqlite")},
                     indent=2))


if __name__ == "__main__":
    main()
