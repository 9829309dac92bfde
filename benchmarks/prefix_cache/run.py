"""Measure what a fixed Menu buys: the prefix cache hits on every Turn, where narrowing or reordering misses.

Arms (the tools block each request carries, and what decoding is constrained to):
- fixed:          the whole Menu, every request (jr2ray);
- narrowed:       only the Allowed picks the model last read (what ADR-0029 rejected);
- reordered:      the whole Menu, rotated one place per request;
- fixed+masking:  the whole Menu, decoding constrained to the Allowed picks (H11).

A random-weight model emits no tool call unless its decoding is constrained, so every arm constrains decoding to the
tools it sends (a real model calls a tool it was given); only fixed+masking narrows decoding to the Allowed picks.
Each arm runs in its own vLLM cache_salt, so arms never share blocks. Per request the suite records prompt tokens,
cached tokens and the server's own prompt token ids; the reusable maximum of request i is the best of
serve.llm.reusable_max over the earlier requests of its arm.

    python -m benchmarks.prefix_cache [--quick] [--base-url URL] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.harness.turn import ToolsPolicy
from jr2ray.menu.models import MenuItem
from jr2ray.menu.render import tools_bytes
from jr2ray.run import LocalRun
from serve.llm import METRICS_URLS_ENV

ARMS = ("fixed", "narrowed", "reordered", "fixed+masking")
WORKFLOWS = ("notes", "coder", "desk")


@dataclass
class ArmLog:
    """What the policy presented on each request of one arm (the tools bytes it sent)."""

    tools_sha: list[str] = field(default_factory=list)


def policy(arm: str, log: ArmLog) -> ToolsPolicy:
    def present(tools: list[MenuItem], allowed: list[str], step: int) -> tuple[list[MenuItem], list[str] | None]:
        if arm == "narrowed":
            sent = [t for t in tools if t.name in allowed] or tools
            names: list[str] | None = [t.name for t in sent]
        elif arm == "reordered":
            k = step % max(1, len(tools))
            sent = tools[k:] + tools[:k]
            names = [t.name for t in sent]
        elif arm == "fixed+masking":
            sent = tools
            names = [n for n in allowed if any(t.name == n for t in tools)] or [t.name for t in tools]
        else:
            sent, names = tools, [t.name for t in tools]
        log.tools_sha.append(hashlib.sha256(tools_bytes(sent)).hexdigest())
        return sent, names

    return present


def _load(workflow: str) -> tuple[Any, dict[str, Any]]:
    if workflow == "notes":
        from workflows.notes import machine

        return machine, {"changes": "fix: crash on empty input\nfeat: dark mode\nperf: faster start"}
    if workflow == "coder":
        from workflows.coder import machine

        return machine, {"task": "add a --version flag to the command line tool"}
    from benchmarks.prefix_cache.desk import build

    return build(), {"goal": 4}


async def _drive_gates(run: LocalRun, workflow: str, stop: asyncio.Event) -> None:
    """The people: the editor replies to every question; the checker asks for changes once, then approves."""
    reviews = 0
    while not stop.is_set():
        for g in run.gates():
            if "reply" in g.accepts_now:
                run.send(g.id, "reply", {"text": "Lead with the crash fix."})
            elif "request_changes" in g.accepts_now:
                if reviews == 0:
                    run.send(g.id, "request_changes", {"notes": "print the version to stdout"})
                else:
                    run.send(g.id, "approve", {})
                reviews += 1
        await asyncio.sleep(0.05)


async def run_arm(base_url: str, workflow: str, arm: str, steps: int, timeout_s: float) -> dict[str, Any]:
    machine, door = _load(workflow)
    log = ArmLog()
    salt = f"{arm}:{workflow}:{uuid.uuid4().hex[:8]}"
    config = ProviderConfig(local_base_url=base_url, max_tokens=200, temperature=1.0, return_token_ids=True,
                            cache_salt=salt, max_retries=0, timeout_s=120)
    launcher = LocalTurnLauncher(config, Limits(max_steps=steps, rerolls=0), tools_policy=policy(arm, log))
    run = LocalRun(machine, door, launcher=launcher)
    stop = asyncio.Event()
    people = asyncio.create_task(_drive_gates(run, workflow, stop))
    t0 = time.monotonic()
    try:
        status = await run.wait(timeout_s)
    except TimeoutError:
        status = run.cancel()
    finally:
        stop.set()
        await people
    await launcher.settle(30)
    rows = [r for r in run.telemetry() if r.get("error") is None]
    return {"workflow": workflow, "arm": arm, "status": status.status, "wall_s": time.monotonic() - t0,
            "rows": rows, "tools_sha": log.tools_sha, "salt": salt}


def measure(result: dict[str, Any], block: int) -> list[dict[str, Any]]:
    """Per request: prompt, cached, and the reusable maximum given everything this arm sent (and got) before it."""
    from serve.llm import reusable_per_request

    rows = result["rows"]
    best = reusable_per_request([(r.get("prompt_token_ids"), r.get("completion_token_ids")) for r in rows], block)
    return [{"i": i + 1, "turn": r.get("turn"), "step": r.get("step"), "prompt": r.get("prompt_tokens") or 0,
             "cached": r.get("cached_tokens") or 0, "reusable": best[i], "latency_s": r.get("latency_s"),
             "tools_sha": result["tools_sha"][i] if i < len(result["tools_sha"]) else None}
            for i, r in enumerate(rows)]


def summarize(result: dict[str, Any], reqs: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = sum(r["prompt"] for r in reqs)
    cached = sum(r["cached"] for r in reqs)
    later = reqs[1:]
    at_max = [r for r in later if r["reusable"] is not None and r["cached"] == r["reusable"]]
    lat = [r["latency_s"] for r in reqs if r["latency_s"] is not None]
    return {"workflow": result["workflow"], "arm": result["arm"], "status": result["status"], "requests": len(reqs),
            "prompt_tokens": prompt, "cached_tokens": cached, "prefilled_tokens": prompt - cached,
            "hit_rate": cached / prompt if prompt else 0.0,
            "later_hit_rate": (sum(r["cached"] for r in later) / max(1, sum(r["prompt"] for r in later))),
            "at_reusable_max": f"{len(at_max)}/{len(later)}",
            "distinct_tools_blocks": len({r["tools_sha"] for r in reqs if r["tools_sha"]}),
            "latency_p50_s": statistics.median(lat) if lat else None, "wall_s": result["wall_s"]}


def narrowed_changes(reqs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(previous, request) pairs where the tools block changed between consecutive requests."""
    return [(prev, r) for prev, r in pairwise(reqs) if r["tools_sha"] != prev["tools_sha"]]


def check(arm: str, reqs: list[dict[str, Any]], block: int) -> list[str]:
    """The suite's own assertions (S2). Each failure is a line; an empty list passes."""
    problems: list[str] = []
    if arm == "fixed":
        if len({r["tools_sha"] for r in reqs}) != 1:
            problems.append("fixed arm: the tools block bytes changed between requests")
        for r in reqs[1:]:
            if r["reusable"] is None:
                problems.append(f"fixed arm: request {r['i']} has no prompt token ids to check against")
            elif r["cached"] != r["reusable"]:
                problems.append(f"fixed arm: request {r['i']} cached {r['cached']} != reusable max {r['reusable']}")
    if arm == "narrowed":
        # A continuing conversation reuses all of its previous prompt's full blocks; after a tools change the hit
        # must stop at the change, at least one whole block short of that. (Whether the Allowed picks changed at all
        # is up to the model's path; `narrowed_changes` makes sure some arm of the suite saw a change.)
        changes = narrowed_changes(reqs)
        if changes:
            prev, r = changes[0]
            continuing = (prev["prompt"] // block) * block
            if r["cached"] + block > continuing:
                problems.append(f"narrowed arm: request {r['i']} still hit {r['cached']}/{r['prompt']} after its "
                                f"tools changed (a continuing prompt would reuse {continuing}); the measurement "
                                f"cannot tell a miss")
    return problems


def write_report(out: Path, summaries: list[dict[str, Any]], details: dict[str, list[dict[str, Any]]],
                 problems: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "prefix_cache.json").write_text(json.dumps({"summaries": summaries, "requests": details,
                                                       "problems": problems}, indent=2))
    cols = ["workflow", "arm", "status", "requests", "prompt_tokens", "cached_tokens", "prefilled_tokens",
            "hit_rate", "later_hit_rate", "at_reusable_max", "distinct_tools_blocks", "vllm_queries", "vllm_hits",
            "latency_p50_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for s in summaries:
        cells = [f"{s[c]:.2f}" if isinstance(s[c], float) and c not in ("vllm_queries", "vllm_hits")
                 else str(int(s[c]) if isinstance(s[c], float) else s[c]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    (out / "prefix_cache.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    for wf in sorted({s["workflow"] for s in summaries}):
        arms = [s["arm"] for s in summaries if s["workflow"] == wf]
        fig, axes = plt.subplots(1, len(arms), figsize=(4 * len(arms), 3.2), sharey=True, squeeze=False)
        for ax, arm in zip(axes[0], arms, strict=True):
            reqs = details[f"{wf}/{arm}"]
            xs = [r["i"] for r in reqs]
            ax.bar(xs, [r["cached"] for r in reqs], color="#2a9d8f", label="cached")
            ax.bar(xs, [r["prompt"] - r["cached"] for r in reqs], bottom=[r["cached"] for r in reqs],
                   color="#e76f51", label="prefilled")
            ax.set_title(arm)
            ax.set_xlabel("request")
        axes[0][0].set_ylabel("prompt tokens")
        axes[0][0].legend(loc="upper left", fontsize=8)
        fig.suptitle(f"{wf}: cached vs prefilled tokens per request")
        fig.tight_layout()
        fig.savefig(out / f"prefix_cache_{wf}.png", dpi=90)
        plt.close(fig)


async def server_counters(model: str, before: Any, want_queries: int, wait_s: float = 30.0) -> Any:
    """vLLM's own prefix-cache counters after an arm: (queries, hits, reading), diffed against `before`.

    The engine's metrics reach Ray's export a few seconds late, so poll until the queries cover what the arm sent.
    None when this process cannot see them (not a driver of the LLM app's Ray, and no JR2RAY_VLLM_METRICS_URLS).
    """
    from serve.llm import read_prefix_cache_counters

    deadline = time.monotonic() + wait_s
    now = read_prefix_cache_counters(model)
    while (now is None or now.queries - before.queries < want_queries) and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = read_prefix_cache_counters(model)
    if now is None or now.queries - before.queries < want_queries:
        return None  # not visible, or still lagging: better no number than another arm's
    return now.queries - before.queries, now.hits - before.hits, now


async def settled_counters(model: str, quiet_s: float = 15.0, wait_s: float = 60.0) -> Any:
    """A reading that has stopped moving: earlier requests (other tests, a warm-up) are all in it.

    Ray exports the engine's metrics every few seconds, so a single read can miss requests that just finished, and
    the first arm would count them as its own.
    """
    from serve.llm import read_prefix_cache_counters

    start = time.monotonic()
    last = read_prefix_cache_counters(model)
    steady_since = time.monotonic()
    while time.monotonic() - start < wait_s and time.monotonic() - steady_since < quiet_s:
        await asyncio.sleep(1.0)
        now = read_prefix_cache_counters(model)
        if (now is None) != (last is None) or (now and last and (now.queries, now.hits) != (last.queries, last.hits)):
            last, steady_since = now, time.monotonic()
    return last


async def suite(base_url: str, workflows: list[str], arms: list[str], steps: int, timeout_s: float, block: int,
                say: Callable[[str], None]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]],
                                                     list[str]]:
    import ray

    from jr2ray.tinymodel import SERVED_MODEL_NAME
    from serve.llm import PrefixCacheCounters, read_prefix_cache_counters

    summaries, details, problems = [], {}, []
    # Counters appear with the engine's first request; a driver that sees none yet starts from zero.
    baseline = await settled_counters(SERVED_MODEL_NAME)
    if baseline is None and (ray.is_initialized() or os.environ.get(METRICS_URLS_ENV)):
        baseline = PrefixCacheCounters(queries=0.0, hits=0.0, sources=[])
    for wf in workflows:
        for arm in arms:
            say(f"{wf} / {arm} ...")
            result = await run_arm(base_url, wf, arm, steps, timeout_s)
            reqs = measure(result, block)
            s = summarize(result, reqs)
            counted = None
            if baseline is not None:
                counted = await server_counters(SERVED_MODEL_NAME, baseline, s["prompt_tokens"])
                baseline = counted[2] if counted else read_prefix_cache_counters(SERVED_MODEL_NAME)
            s["vllm_queries"], s["vllm_hits"] = counted[:2] if counted else (None, None)
            if counted and (counted[0], counted[1]) != (s["prompt_tokens"], s["cached_tokens"]):
                problems.append(f"{wf}: {arm} arm: vLLM counted {counted[0]:.0f} queries / {counted[1]:.0f} hits, "
                                f"the responses said {s['prompt_tokens']} / {s['cached_tokens']}")
            summaries.append(s)
            details[f"{wf}/{arm}"] = reqs
            problems += [f"{wf}: {p}" for p in check(arm, reqs, block)]
            say(f"  {s['requests']} requests, hit rate {s['hit_rate']:.2f}, at reusable max {s['at_reusable_max']}, "
                f"{s['distinct_tools_blocks']} tools block(s), run {s['status']}")
    narrowed = [reqs for key, reqs in details.items() if key.endswith("/narrowed")]
    if narrowed and not any(narrowed_changes(reqs) for reqs in narrowed):
        problems.append("narrowed arms: the Allowed picks never changed in any workflow, so the arm proves nothing")
    return summaries, details, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="jr2ray bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests per arm (CI: under 10 minutes)")
    ap.add_argument("--base-url", help="an LLM app already running (skip starting Ray and vLLM)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--workflows", default=",".join(WORKFLOWS))
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--block", type=int, default=32)
    args = ap.parse_args(argv)
    steps = 6 if args.quick else 24
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    started_ray = False
    base_url = args.base_url
    if base_url is None:
        import ray

        from jr2ray.tinymodel import ensure_tiny
        from serve.llm import deploy

        ensure_tiny(progress=say)
        ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
        started_ray = True
        base_url = deploy("cpu", progress=say)
    try:
        summaries, details, problems = asyncio.run(suite(base_url, args.workflows.split(","), args.arms.split(","),
                                                         steps, 300.0, args.block, say))
    finally:
        if started_ray:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    write_report(Path(args.out), summaries, details, problems)
    print((Path(args.out) / "prefix_cache.md").read_text())
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
