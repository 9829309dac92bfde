"""A driver script as a new user writes it (run as a subprocess by test_driver_api.py): no arguments to connect().

It starts N notes runs at once, plays each writer from a script (ask, then done), answers each editor Gate, and
waits for all of them. It prints one JSON object with what it saw, for the test to check.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import jr2ray
from jr2ray.testing import ScriptedAgent

GATE = "notes.writing.asking"


async def editor(run: jr2ray.run.client.RunHandle) -> str:
    """Answer the run's Gate once it opens, without blocking the other runs."""
    while True:
        gates = await run.gates_async()
        gate = next((g for g in gates if g.id == GATE and g.accepts_now), None)
        if gate is not None:
            result = await run.send_async(gate.id, "reply", {"text": f"reply to {run.id}"}, f"edit-{run.id}")
            return result.delivery_id
        await asyncio.sleep(0.05)


async def main(n: int) -> dict[str, object]:
    client = jr2ray.connect()
    t0 = time.monotonic()
    runs = client.start_many("notes", [{"changes": f"fix: bug {i}"} for i in range(n)])
    returned_after = time.monotonic() - t0
    writer = ScriptedAgent("writer", [("ask", {"question": "Which change matters most?"}),
                                      ("done", lambda r: {"notes": f"# Notes\n{r.answer if r else ''}"})])
    plays = asyncio.gather(*(writer.play_async(r) for r in runs))
    edits = asyncio.gather(*(editor(r) for r in runs))
    receipts, delivered = await asyncio.gather(plays, edits)
    done, pending = client.wait(runs, timeout=120)
    one = await runs[0].status_async()
    return {"n": n, "returned_after_s": returned_after, "ids": [r.id for r in runs],
            "finished": sorted(h.id for h in done), "pending": [h.id for h in pending],
            "values": [h.final.value if h.final else None for h in runs],
            "outputs": [h.final.output if h.final else None for h in runs],
            "ask_answers": [rs[0].answer for rs in receipts], "delivered": delivered,
            "status_async": one.status, "store": str(client.store.directory)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))))
