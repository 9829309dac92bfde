"""`jr2ray demo`: the notes workflow end to end on the Ray-hosted tiny model.

It builds the tiny model if missing, starts Ray and the LLM app (vLLM CPU behind Ray Serve LLM), runs the notes
workflow with the writer as a HarnessActor on that model (masking on) and an editor that answers the Gate by
itself, then prints the pick history, the final notes and the per-request cache table read from vLLM's usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from jr2ray.settings import Settings, load_settings

DEMO_CHANGES = "fix: the importer no longer crashes on an empty file\nfeat: dark mode for the Console\n" \
               "perf: runs start twice as fast"
EDITOR_REPLIES = ["Lead with the crash fix; users hit it most.", "Keep it to three bullets.",
                  "Mention dark mode second."]


class Progress:
    """Timestamped progress lines, so the slow steps (model build, server start) visibly move."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)


def cache_table(rows: list[dict[str, Any]], block: int = 32) -> str:
    """Markdown: one line per model request, with how much of its prompt vLLM's prefix cache served.

    `reusable max` is the most the cache could have served, from the server's own token ids of this conversation's
    earlier requests (serve.llm.reusable_per_request); `-` when the ids were not asked for.
    """
    from serve.llm import reusable_per_request

    best = reusable_per_request([(r.get("prompt_token_ids"), r.get("completion_token_ids")) for r in rows], block)
    lines = ["| # | turn | step | state | prompt tokens | cached tokens | reusable max | cached % |",
             "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        p, c = r.get("prompt_tokens") or 0, r.get("cached_tokens") or 0
        pct = f"{100 * c / p:.0f}%" if p else "-"
        most = "-" if best[i - 1] is None else str(best[i - 1])
        lines.append(f"| {i} | {r.get('turn')} | {r.get('step')} | {r.get('state')} | {p} | {c} | {most} | {pct} |")
    total_p = sum(r.get("prompt_tokens") or 0 for r in rows)
    total_c = sum(r.get("cached_tokens") or 0 for r in rows)
    if total_p:
        lines.append(f"| all | | | | {total_p} | {total_c} | | {100 * total_c / total_p:.0f}% |")
    return "\n".join(lines)


def history_lines(history: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in history:
        d = e["data"]
        if e["kind"] == "receipt" and d.get("slot"):
            out.append(f"  pick {d.get('pick')!r}: delivered={d['delivered']} moved={d['moved']} "
                       f"turn_complete={d['turn_complete']} allowed={d['allowed']}"
                       + (f" refused={d['refused']}" if d.get("refused") else "")
                       + (f"\n      answer: {d['answer']}" if d.get("answer") else ""))
        elif e["kind"] == "gate" and d.get("event"):
            out.append(f"  editor -> {d['id']}: {d['event']} {json.dumps(d.get('args'))}")
    return out


class DemoOutcome(BaseModel):
    """What one notes run on the model came to: the facts the demo prints and the vLLM tier asserts."""

    run_id: str
    status: str
    value: Any = None
    notes: str | None = None
    error: str | None = None
    history: list[dict[str, Any]]
    telemetry: list[dict[str, Any]]
    editor_replies: int


def play_notes(base_url: str, say: Progress, timeout_s: float = 900.0, store: Path | None = None) -> DemoOutcome:
    """Run the notes workflow with the writer on the model at `base_url`; the editor answers every question.

    Needs an initialised Ray (the Run and the writer's Harness are actors on it).
    """

    from jr2ray.run import connect
    from serve.llm import masking_caps_env

    client = connect(store=store or Path(tempfile.mkdtemp(prefix="jr2ray_demo_")),
                     launcher="jr2ray.harness.launcher:RayTurnLauncher")
    run = client.start("notes", {"changes": DEMO_CHANGES},
                       env={"JR2RAY_LOCAL_BASE_URL": base_url, "JR2RAY_NOTES_DRIVER": "harness",
                            "JR2RAY_NOTES_MODEL": "local/tiny", "JR2RAY_RETURN_TOKEN_IDS": "1"}
                       | masking_caps_env("cpu"))
    say(f"run {run.id} started: the writer is a HarnessActor on local/tiny with masking on")
    seen, replies = 0, 0
    deadline = time.monotonic() + timeout_s
    status = run.status()
    while status.status == "active" and time.monotonic() < deadline:
        for g in run.gates():
            if "reply" in g.accepts_now:
                text = EDITOR_REPLIES[replies % len(EDITOR_REPLIES)]
                replies += 1
                say(f"editor answers {g.meta!r}: {text}")
                run.send(g.id, "reply", {"text": text})
        history = run.history(seen)
        if history:  # numbered by the run, so a trimmed history neither skips nor repeats events
            seen = int(history[-1]["seq"]) + 1
        for line in history_lines(history):
            say(line.strip())
        time.sleep(0.2)
        status = run.status()
    if status.status == "active":
        status = run.cancel()
    return DemoOutcome(run_id=run.id, status=status.status, value=status.value,
                       notes=(status.output or {}).get("notes") if status.status == "done" else None,
                       error=status.error, history=run.history(0),
                       telemetry=run.telemetry(), editor_replies=replies)


def print_outcome(out: DemoOutcome) -> None:
    print("\n== pick history ==")
    print("\n".join(history_lines(out.history)) or "  (no picks)")
    print(f"\n== run {out.run_id}: {out.status} ({out.value}) ==")
    if out.status == "done":
        print("final notes:\n" + str(out.notes or ""))
    else:
        print(f"error: {out.error}")
    print("\n== prefix cache, per model request (from vLLM's usage.prompt_tokens_details) ==")
    print(cache_table(out.telemetry))


def run_demo(settings: Settings, timeout_s: float = 900.0, quiet: bool = False) -> int:
    """The demo with the caller's settings (the tiny model lives under their home)."""
    import ray
    from ray import serve

    from jr2ray.tinymodel import ensure_tiny
    from serve.llm import deploy

    say = Progress(quiet)
    # Serve's own INFO lines (deployment options, proxy updates) would bury the demo's; warnings still show.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    say("building the tiny local model if missing (random weights, locally trained tokenizer)")
    model_dir = ensure_tiny(settings, progress=say)
    say(f"tiny model at {model_dir}")
    say("starting Ray (4 logical CPUs, so Serve's ingress schedules on a 2-core machine)")
    ray.init(num_cpus=max(4, os.cpu_count() or 1), namespace="jr2ray", include_dashboard=False,
             log_to_driver=False)
    try:
        say("starting the LLM app: vLLM (CPU) behind Ray Serve LLM; this takes about a minute")
        base_url = deploy("cpu", settings=settings, progress=say)
        out = play_notes(base_url, say, timeout_s)
        print_outcome(out)
        return 0 if out.status == "done" else 1
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="jr2ray demo", description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the run")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    return run_demo(load_settings(), args.timeout, args.quiet)  # `python -m jr2ray.demo`: read once, here


if __name__ == "__main__":
    sys.exit(main())
