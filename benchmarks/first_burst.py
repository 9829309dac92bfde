"""A driver script's first burst right after `jr2ray up`, as a new user meets it: public names only.

`jr2ray up --launcher none` on a fresh home (it returns while it warms the host pool in the background), then at
once the README's driving example: `connect()`, `start_many` of N notes runs, the writer played with
`ScriptedAgent` and every Gate answered after `until_gate`, until all are `finished()`. It reports when the first
Turn and the first Gate were heard, the whole drive, and the hosts the instance started (`client.stats()`), then
the same again on the warm instance, and stops it with `jr2ray down`.

Before the two fixes of 2026-12-03 (a watch batch held up by one run's adoption, and a script's runs kept off the
pool `up` warms), 20 runs took 44.6 s, the first Turn was heard after 22.2 s, and 50 hosts were started for 30 slots.

    PYTHONPATH=$PWD python3 benchmarks/first_burst.py [--n 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

import jr2ray
from benchmarks.rows import append_row
from jr2ray.testing import ScriptedAgent

GATE = "notes.writing.asking"


async def drive(client: Any, n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    runs = await client.start_many_async("notes", [{"changes": f"fix: bug {i}"} for i in range(n)])
    writer = ScriptedAgent("writer", [("ask", {"question": "Which matters most?"}), ("done", {"notes": "# Notes"})])
    heard: dict[str, float] = {}

    async def editor(run: Any) -> None:
        await run.until_gate(GATE)
        heard.setdefault("gate", time.perf_counter() - t0)
        await run.send_async(GATE, "reply", {"text": "The crash fix."})

    async def turn(run: Any) -> None:
        await run.until_turn("writer")
        heard.setdefault("turn", time.perf_counter() - t0)

    await asyncio.gather(*(writer.play_async(r) for r in runs), *(editor(r) for r in runs), *(turn(r) for r in runs))
    finals = await asyncio.gather(*(r.finished() for r in runs))
    return {"n": n, "done": sum(f.status == "done" for f in finals), "first_turn_s": round(heard["turn"], 2),
            "first_gate_s": round(heard["gate"], 2), "drive_s": round(time.perf_counter() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/first_burst.json")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jr2ray_first_burst_"))
    env = {**os.environ, "JR2RAY_HOME": str(home)}
    os.environ["JR2RAY_HOME"] = str(home)
    cli = [sys.executable, "-m", "jr2ray.cli"]
    row: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(),
                           "load_avg_at_start": os.getloadavg()[0]}
    t = time.perf_counter()
    subprocess.run([*cli, "up", "--launcher", "none"], env=env, check=True, capture_output=True, timeout=600)
    row["up_s"] = round(time.perf_counter() - t, 1)
    try:
        client = jr2ray.connect(launcher=None)
        before = client.stats()
        row["hosts_when_started"] = {"idle": before["idle_hosts"], "started": before["started_hosts"],
                                     "slots": before["max_live"]}
        row["cold"] = asyncio.run(drive(client, args.n))
        row["hosts_started_after_cold"] = client.stats()["started_hosts"]
        time.sleep(5)
        row["warm"] = asyncio.run(drive(client, args.n))
        row["load_avg_at_end"] = os.getloadavg()[0]
    finally:
        ray.shutdown()  # this driver leaves before the instance stops
        subprocess.run([*cli, "down"], env=env, check=False, capture_output=True, timeout=300)
    print(json.dumps(row), flush=True)
    append_row(Path(args.out), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
