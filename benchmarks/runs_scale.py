"""How many concurrent runs one 2-core, 24 GB node holds, each a Ray actor, driven from one script.

For each N it starts N notes runs (the writer played by this script over surface/pick, the editor answering the
Gate), keeps them all alive at once, drives each to `published`, and reports runs started per second, the pick
round-trip through the actor (p50/p99), and the RSS per run actor. It stops at the first N that breaks and says
what broke. Goal: 200 concurrent runs.

    python benchmarks/runs_scale.py [--sizes 10,50,100,150,200] [--out benchmarks/results/runs_scale.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import jr2ray  # noqa: E402

ENV = {"JR2RAY_NOTES_DRIVER": "external"}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def one_size(client: Any, n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    runs = [client.start("notes", {"changes": f"change {i}"}, env=ENV) for i in range(n)]
    start_s = time.perf_counter() - t0
    pids = ray.get([r.actor.pid.remote() for r in runs])
    rss = [psutil.Process(p).memory_info().rss for p in pids if psutil.pid_exists(p)]
    picks: list[float] = []
    refs = []
    for r in runs:  # every run gets an outstanding `ask` at once: all N are live together
        t = time.perf_counter()
        refs.append((r, r.pick_async("writer", "ask", {"question": "Which change first?"}), t))
    for r, _, _ in refs:
        deadline = time.time() + 60
        while not r.gates():
            if time.time() > deadline:
                raise RuntimeError(f"run {r.id}: the Gate never opened")
            time.sleep(0.01)
    for r, _, _ in refs:
        r.send("notes.writing.asking", "reply", {"text": "the first one"})
    for _, ref, _ in refs:
        receipt = ray.get(ref, timeout=120)
        assert receipt.moved, receipt
    for r in runs:
        t = time.perf_counter()
        receipt = r.pick("writer", "done", {"notes": "# Notes"})
        picks.append((time.perf_counter() - t) * 1000)
        assert receipt.turn_complete, receipt
    done = sum(1 for r in runs if r.wait(60).status == "done")
    for r in runs:
        ray.kill(r.actor, no_restart=True)
    return {"n": n, "started_per_s": n / start_s, "start_s": start_s, "pick_p50_ms": _pct(picks, 0.5),
            "pick_p99_ms": _pct(picks, 0.99), "rss_per_run_mb": statistics.mean(rss) / 2**20 if rss else None,
            "done": done, "free_mem_gb_after": psutil.virtual_memory().available / 2**30}


def _write(out: str, rows: list[dict[str, Any]], broke: str | None) -> int:
    held = max((r["n"] for r in rows if r["done"] == r["n"]), default=0)
    report = {"rows": rows, "largest_n_that_held": held, "first_break": broke, "goal": 200}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=2))
    return held


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,50,100,150,200")
    ap.add_argument("--out", default="benchmarks/results/runs_scale.json")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="jr2ray_scale_")
    os.environ["JR2RAY_HOME"] = home
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    client = jr2ray.connect(store=Path(home) / "runs", launcher=None)
    rows: list[dict[str, Any]] = []
    broke: str | None = None
    for n in (int(x) for x in args.sizes.split(",")):
        try:
            row = one_size(client, n)
        except Exception as exc:  # the first thing that broke, in its own words
            broke = f"N={n}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            break
        rows.append(row)
        _write(args.out, rows, None)  # a partial report survives a run cut short at a larger N
        print(f"N={n:4d} started/s={row['started_per_s']:6.1f} pick p50={row['pick_p50_ms']:6.1f} ms "
              f"p99={row['pick_p99_ms']:6.1f} ms rss/run={row['rss_per_run_mb']:.0f} MB done={row['done']}/{n} "
              f"free={row['free_mem_gb_after']:.1f} GB", flush=True)
        if row["done"] != n:
            broke = f"N={n}: only {row['done']} runs reached done"
            break
    held = _write(args.out, rows, broke)
    print(f"largest N that held: {held} (goal 200); first break: {broke or 'none'}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
