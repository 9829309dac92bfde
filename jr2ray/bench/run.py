"""Measure what a fixed Menu buys, on the same work in every arm.

One scripted trajectory per workflow (jr2ray/bench/scripts.py) is recorded once through the Harness, then
replayed in every arm (replay.py): fixed, narrowed, reordered, fixed+masking. Each request is the Harness's own bytes
sent to vLLM with `max_tokens: 1`; per arm the suite reports prompt and cached tokens, cached as a share of the
reusable maximum, and the median time to first token, plus the ratios fixed/narrowed and fixed/reordered. It asserts
that every arm sent the recording's requests, and it checks the responses' usage against vLLM's own counters.
First picks then sample real answers on the same requests, with and without masking.

    jr2ray bench [--quick] [--long] [--base-url URL] [--out benchmarks/results]
    jr2ray bench --load [--runs 8] [--fractions 0.125,0.25,0.5]   (jr2ray/bench/load.py)

`--quick` (the default; CI) runs notes, coder and desk on short plans. `--long` runs the coder on a 36-request
conversation that passes 24k prompt tokens, and plots cached vs prefilled tokens per request.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jr2ray.bench.replay import ARMS, PassResult, run_pass, same_requests
from jr2ray.bench.report import (
    VALID_FIRST_CALLS,
    check,
    first_picks_rows,
    markdown,
    measure,
    narrowed_changes,
    plot,
    ratios,
    summarize,
    write_report,
)
from jr2ray.bench.scripts import plan_for
from jr2ray.settings import Settings

WORKFLOWS = {"quick": ("notes", "coder", "desk"), "long": ("coder",)}
STEMS = {"quick": "prefix_cache", "long": "prefix_cache_long"}
LONG_MIN_REQUESTS, LONG_MIN_TOKENS = 30, 20_000
"""The long profile's floor: a conversation like the anchor's (24,288 of 24.8k tokens cached on vLLM)."""
__all__ = ["ARMS", "check", "main", "measure", "narrowed_changes"]


async def server_counters(model: str, before: Any, want_queries: int, urls: list[str] | None = None,
                          wait_s: float = 30.0, want_hits: int = 0) -> Any:
    """vLLM's own prefix-cache counters after an arm: (queries, hits, reading), diffed against `before`.

    The engine's metrics reach Ray's export a few seconds late, and the queries and the hits are two series that
    can arrive in different exports. So poll until both cover what the arm's responses said; else the arm's late
    hits would be counted in the next arm. None when this process cannot see them (not a driver of the LLM app's
    Ray, and no JR2RAY_VLLM_METRICS_URLS).
    """
    from serve.llm import read_prefix_cache_counters

    def covered(now: Any) -> bool:
        return (now is not None and now.queries - before.queries >= want_queries
                and now.hits - before.hits >= want_hits)

    deadline = time.monotonic() + wait_s
    now = read_prefix_cache_counters(model, urls)
    while not covered(now) and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = read_prefix_cache_counters(model, urls)
    if now is None or not covered(now):
        return None  # not visible, or still lagging: better no number than another arm's
    return now.queries - before.queries, now.hits - before.hits, now


async def settled_counters(model: str, urls: list[str] | None = None, quiet_s: float = 15.0,
                           wait_s: float = 60.0) -> Any:
    """A reading that has stopped moving: earlier requests (other tests, a warm-up) are all in it.

    Ray exports the engine's metrics every few seconds, so a single read can miss requests that just finished, and
    the first arm would count them as its own.
    """
    from serve.llm import read_prefix_cache_counters

    start = time.monotonic()
    last = read_prefix_cache_counters(model, urls)
    steady_since = time.monotonic()
    while time.monotonic() - start < wait_s and time.monotonic() - steady_since < quiet_s:
        await asyncio.sleep(1.0)
        now = read_prefix_cache_counters(model, urls)
        if (now is None) != (last is None) or (now and last and (now.queries, now.hits) != (last.queries, last.hits)):
            last, steady_since = now, time.monotonic()
    return last


class _Counters:
    """vLLM's own prefix-cache counters, diffed arm by arm (None when this process cannot read them).

    `urls` are the Prometheus pages to read (the vllm_metrics_urls setting); None asks the Ray this is a driver of."""

    def __init__(self, urls: list[str] | None = None) -> None:
        self.urls = urls
        self.baseline: Any = None
        self.enabled = False

    async def start(self) -> None:
        from jr2ray.tinymodel import SERVED_MODEL_NAME
        from serve.llm import PrefixCacheCounters

        self.baseline = await settled_counters(SERVED_MODEL_NAME, self.urls)
        if self.baseline is None:
            try:
                import ray

                driver = ray.is_initialized()
            except ImportError:
                driver = False
            if driver or self.urls:  # no counters yet: the engine has served nothing
                self.baseline = PrefixCacheCounters(queries=0.0, hits=0.0, sources=[])
        self.enabled = self.baseline is not None

    async def after(self, want_queries: int, want_hits: int = 0) -> tuple[float, float] | None:
        from jr2ray.tinymodel import SERVED_MODEL_NAME
        from serve.llm import read_prefix_cache_counters

        if not self.enabled:
            return None
        counted = await server_counters(SERVED_MODEL_NAME, self.baseline, want_queries, self.urls,
                                        want_hits=want_hits)
        self.baseline = counted[2] if counted else read_prefix_cache_counters(SERVED_MODEL_NAME, self.urls)
        return (counted[0], counted[1]) if counted else None


def _public(result: PassResult) -> list[dict[str, Any]]:
    """A pass's requests without the token ids (they are for the arithmetic, and too big for the JSON)."""
    return [r.model_dump(exclude={"prompt_token_ids", "completion_token_ids"}) for r in result.requests]


async def _workflow(base_url: str, profile: str, wf: str, arms: list[str], block: int, counters: _Counters,
                    say: Callable[[str], None], settings: Settings) -> dict[str, Any]:
    plan = plan_for(wf, profile)
    ref = await run_pass(plan, "fixed", settings=settings)  # the recording: the Harness and the Run, no model request
    problems = [] if ref.status == "done" else [f"{wf}: the recording ended {ref.status!r}, not 'done'"]
    say(f"{wf}: recorded {len(ref.requests)} requests ({len(ref.transcript)} messages)")
    per_arm: dict[str, list[dict[str, Any]]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for arm in arms:
        res = await run_pass(plan, arm, settings=settings, base_url=base_url)
        problems += same_requests(ref, res)
        reqs = measure([r.model_dump() for r in res.requests], block)
        per_arm[arm] = reqs
        s = summarize(wf, arm, res.status, reqs)
        counted = await counters.after(s["prompt_tokens"], s["cached_tokens"])
        s["vllm_queries"], s["vllm_hits"] = counted if counted else (None, None)
        if counted and (counted[0], counted[1]) != (s["prompt_tokens"], s["cached_tokens"]):
            problems.append(f"{wf}: {arm} arm: vLLM counted {counted[0]:.0f} queries / {counted[1]:.0f} hits, "
                            f"the responses said {s['prompt_tokens']} / {s['cached_tokens']}")
        problems += [f"{wf}: {p}" for p in check(arm, reqs, block)]
        rows[arm] = s | {"requests_detail": _public(res), "salt": res.salt, "wall_s": res.wall_s}
        say(f"  {arm}: {s['requests']} requests, {s['cached_tokens']}/{s['prompt_tokens']} cached, "
            f"TTFT p50 {s['ttft_p50_s'] or 0:.3f}s, {s['distinct_tools_blocks']} tools block(s)")
    if profile == "long":
        problems += [f"{wf}: {arm} arm: {s['requests']} requests, last prompt {s['last_prompt_tokens']} tokens: "
                     f"the long profile needs >= {LONG_MIN_REQUESTS} and >= {LONG_MIN_TOKENS}"
                     for arm, s in rows.items()
                     if s["requests"] < LONG_MIN_REQUESTS or s["last_prompt_tokens"] < LONG_MIN_TOKENS]
    fixed_reusable = rows["fixed"]["reusable_max"] if "fixed" in rows else None
    for s in rows.values():
        s["cached_of_fixed_reusable"] = s["cached_tokens"] / fixed_reusable if fixed_reusable else None
    if "fixed" in rows and "reordered" in rows and rows["reordered"]["cached_tokens"] >= rows["fixed"]["cached_tokens"]:
        problems.append(f"{wf}: the reordered arm cached as much as the fixed arm: the arms did not differ")
    return {"plan": plan.model_dump(exclude={"files"}), "recording": ref.transcript, "rows": rows,
            "per_arm": per_arm, "problems": problems,
            "narrowed_changed": bool(per_arm.get("narrowed") and narrowed_changes(per_arm["narrowed"]))}


async def first_picks(base_url: str, profile: str, workflows: list[str], say: Callable[[str], None],
                      settings: Settings) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Real sampling on the recorded requests, unmasked and masked (the tiny model's caps, replay.TINY_BOUNDS)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for wf in workflows:
        plan = plan_for(wf, profile)
        out[wf] = {}
        for mode, masked in (("unmasked", False), ("masked", True)):
            res = await run_pass(plan, "fixed", settings=settings, base_url=base_url, first_picks=masked)
            out[wf][mode] = [{"i": r.i, "allowed": r.allowed, "first_call": r.first_call,
                              "verdict": r.first_call_verdict, "arguments": r.first_call_args}
                             for r in res.requests]
        valid = {m: sum(1 for r in reqs if r["verdict"] in VALID_FIRST_CALLS) for m, reqs in out[wf].items()}
        say(f"first picks {wf}: unmasked {valid['unmasked']}/{len(plan.steps)}, masked {valid['masked']}/"
            f"{len(plan.steps)}")
    return out


async def suite(base_url: str, profile: str, workflows: list[str], arms: list[str], block: int, picks: bool,
                say: Callable[[str], None], settings: Settings) -> dict[str, Any]:
    counters = _Counters(settings.vllm_metrics_urls or None)
    await counters.start()
    done = {wf: await _workflow(base_url, profile, wf, arms, block, counters, say, settings) for wf in workflows}
    problems = [p for w in done.values() for p in w["problems"]]
    if "narrowed" in arms and not any(w["narrowed_changed"] for w in done.values()):
        problems.append("narrowed arms: the Allowed picks never changed in any workflow, so the arm proves nothing")
    summaries = [{k: v for k, v in s.items() if k != "requests_detail"} for w in done.values()
                 for s in w["rows"].values()]
    fp = await first_picks(base_url, profile, workflows, say, settings) if picks else {}
    return {"profile": profile, "block": block, "summaries": summaries, "ratios": ratios(summaries),
            "first_picks": first_picks_rows(fp), "first_picks_requests": fp,
            "requests": {f"{wf}/{arm}": s["requests_detail"] for wf, w in done.items() for arm, s in w["rows"].items()},
            "trajectories": {wf: {"plan": w["plan"], "transcript": w["recording"]} for wf, w in done.items()},
            "per_arm": {wf: w["per_arm"] for wf, w in done.items()}, "problems": problems,
            "counters_read": counters.enabled}


def publish(out: Path, report: dict[str, Any], command: str) -> Path:
    """Write the markdown, the JSON and one plot per workflow; return the markdown's path."""
    profile = report["profile"]
    stem = STEMS[profile]
    md = markdown(profile, command, report["summaries"], report["ratios"], report["first_picks"],
                  report["problems"])
    per_arm = report.pop("per_arm")
    write_report(out, stem, report | {"command": command}, md)
    for wf, arms in per_arm.items():
        plot(out / f"{stem}_{wf}.png", f"{wf} ({profile}): cached vs prefilled tokens per request", arms)
    return out / f"{stem}.md"


def main(argv: list[str] | None, settings: Settings) -> int:
    """`jr2ray bench`'s body: `argv` is the suite's own command line, `settings` the CLI's (read once there)."""
    ap = argparse.ArgumentParser(prog="jr2ray bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short plans of notes, coder and desk (the default; CI)")
    ap.add_argument("--long", action="store_true", help="the coder's 36-request, 24k-token conversation")
    ap.add_argument("--base-url", help="an LLM app already running (skip starting Ray and vLLM)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--workflows", help="comma-separated (default: notes,coder,desk for quick, coder for long)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--no-first-picks", action="store_true", help="skip the sampled first-picks measurement")
    ap.add_argument("--load", action="store_true",
                    help="many coder runs at once on a KV cache smaller than their demand, Turn admission off and on")
    ap.add_argument("--runs", type=int, default=8, help="--load: concurrent runs per arm")
    ap.add_argument("--fractions", default="0.125,0.25,0.5",
                    help="--load: KV sizes as fractions of the runs' total demand (an unbounded arm always runs)")
    ap.add_argument("--replicas", default="1",
                    help="--load: LLM replica counts to sweep, e.g. 1,2 (the KV size is the total over replicas; with "
                         "2, the arms also compare placements: affinity, prefix, spread and round-robin)")
    args = ap.parse_args(argv)
    profiles = [p for p, on in (("quick", args.quick), ("long", args.long)) if on] or ["quick"]
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        ap.error(f"unknown arm(s) {unknown} (have {', '.join(ARMS)})")
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    if args.load:
        from jr2ray.bench import load

        command = f"jr2ray bench --load --runs {args.runs} --fractions {args.fractions} --replicas {args.replicas}"
        replicas = sorted({int(x) for x in args.replicas.split(",") if x})
        if not replicas or min(replicas) < 1:
            ap.error(f"--replicas takes counts of 1 or more, not {args.replicas!r}")
        return load.main(args.runs, [float(x) for x in args.fractions.split(",") if x], Path(args.out), settings,
                         say, command, replicas)
    base_url, started_ray = args.base_url, False
    if base_url is None:
        import ray

        from jr2ray.tinymodel import ensure_tiny
        from serve.llm import deploy

        ensure_tiny(settings, progress=say)
        ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
        started_ray = True
        base_url = deploy("cpu", settings=settings, progress=say)
    failed = False
    try:
        for profile in profiles:
            workflows = args.workflows.split(",") if args.workflows else list(WORKFLOWS[profile])
            report = asyncio.run(suite(base_url, profile, workflows, arms, args.block, not args.no_first_picks, say,
                                       settings))
            command = "jr2ray bench --" + profile + (f" --workflows {args.workflows}" if args.workflows else "")
            md = publish(Path(args.out), report, command)
            print(md.read_text())
            for p in report["problems"]:
                print(f"FAIL: {p}", file=sys.stderr)
            failed = failed or bool(report["problems"])
    finally:
        if started_ray:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    return 1 if failed else 0

