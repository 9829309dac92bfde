"""Many runs, one model (issue 25): N concurrent coder runs compete for a KV cache smaller than their demand.

Each run replays the coder's scripted trajectory (scripts.py) through a real Run and Harness, with its own variation
of the tool results (its workspace files differ), its own cache salt (runs never share blocks, so a hit is the run's
own prefix still resident) and every request measured on vLLM with `max_tokens: 1`. One more arm per KV size gives
the runs one salt, as runs of one workflow on one vLLM have: their first requests may then be served from the tools
block and Briefing the others sent (`first_cached_of_shared`). The runs are LocalRuns in this
process; with admission on, their Conversations ask the LLM app's KV budget actor (`jr2ray.harness.budget_actor`),
the same actor the Harness actors of runs on Ray ask, its capacity read from vLLM.

Per arm: cached tokens as a share of the reusable maximum (the most each request could have been served from its own
conversation's earlier requests), prefilled tokens per finished run, runs finished per minute, TTFT p50/p99 (the
one-token request's latency), vLLM's preemption counter, and the budget's own figures (high water, waits).

    jr2ray bench --load [--runs 12] [--fractions 0.125,0.25,0.5,0] [--out benchmarks/results]
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from jr2ray.bench.replay import ScriptedAssistant, _Now, arm_policy, measuring_provider
from jr2ray.bench.scripts import Plan, drive_gates, load_machine, plan_for, seed_workspace
from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.admission import Admission, BudgetStats
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.harness.providers import ProviderRegistry
from jr2ray.harness.replicas import Placement
from jr2ray.run import LocalRun
from jr2ray.settings import Settings
from serve.llm import KvCapacity, common_prefix_len, reusable_per_request

BLOCK = 32


class LoadRequest(BaseModel):
    run: int
    i: int
    t_s: float = Field(description="When the answer came, seconds after the arm started.")
    prompt_tokens: int
    cached_tokens: int
    reusable: int
    ttft_s: float | None
    kv_wait_s: float | None = None


class LoadArm(BaseModel):
    """One arm: N runs at once on one KV size, admission on or off."""

    label: str
    admission: bool
    runs: int
    finished: int
    kv_tokens: int | None = Field(description="The KV capacity in tokens as vLLM reports it (None: unbounded).")
    demand_tokens: int | None = None
    wall_s: float
    requests: list[LoadRequest]
    budget: BudgetStats | None = None
    preemptions: float | None = None
    statuses: list[str] = Field(default_factory=list)
    shared: bool = Field(default=False, description="One cache salt for every run: they may share blocks.")
    replicas: int = Field(default=1, description="LLM replicas the arm ran on (kv_tokens is their total).")
    placement: str | None = Field(default=None, description="With admission: the budget's placement over replicas.")
    shared_prefix_tokens: int | None = Field(
        default=None, description="With `shared`: the block-aligned prefix every run's first request has in common "
                                  "(the tools block and the Briefing).")

    def summary(self) -> dict[str, Any]:
        prompt = sum(r.prompt_tokens for r in self.requests)
        cached = sum(r.cached_tokens for r in self.requests)
        reusable = sum(r.reusable for r in self.requests)
        ttft = sorted(r.ttft_s for r in self.requests if r.ttft_s is not None)
        waits = [r.kv_wait_s for r in self.requests if r.kv_wait_s]
        budget = self.budget.model_dump() if self.budget else {}
        return {"arm": self.label, "admission": "on" if self.admission else "off", "replicas": self.replicas,
                "placement": self.placement if self.admission and self.replicas > 1 else None,
                "kv_tokens": self.kv_tokens,
                "kv_of_demand": _div(self.kv_tokens, self.demand_tokens), "runs": self.runs,
                "finished": self.finished, "requests": len(self.requests),
                "prompt_tokens": prompt, "cached_tokens": cached, "reusable_max": reusable,
                "cached_of_reusable": _div(cached, reusable),
                "prefilled_per_run": _div(prompt - cached, self.finished),
                "runs_per_min": _div(self.finished * 60, self.wall_s),
                "ttft_p50_s": statistics.median(ttft) if ttft else None, "ttft_p99_s": _p99(ttft),
                "preemptions": self.preemptions, "wall_s": self.wall_s,
                "budget_high_water": budget.get("high_water_tokens"), "budget_capacity": budget.get("capacity_tokens"),
                "budget_waits": budget.get("waits"),
                "kv_wait_p50_s": statistics.median(waits) if waits else None,
                "first_cached_of_shared": self._first_share()}

    def _first_share(self) -> float | None:
        """With one salt for all runs: first requests, cached tokens over what they could reuse from the runs
        answered before them (the tools block and Briefing they share), or None."""
        if not self.shared:
            return None
        firsts = [r for r in self.requests if r.i == 1 and r.reusable > 0]
        return _div(sum(min(r.cached_tokens, r.reusable) for r in firsts), sum(r.reusable for r in firsts))


def _div(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is unknown or b is 0 (a figure the arm cannot have)."""
    return a / b if a is not None and b else None


def _p99(xs: list[float]) -> float | None:
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else None


def run_plan(index: int, profile: str = "quick") -> Plan:
    """The coder's plan with this run's own tool results: each file it reads opens with the run's own header."""
    plan = plan_for("coder", profile)
    files = {p: (f"# run {index}: {uuid.uuid5(uuid.NAMESPACE_OID, f'{index}:{p}').hex}\n" + text)
             for p, text in plan.files.items()}
    return plan.model_copy(update={"files": files})


class _StampedAssistant(ScriptedAssistant):
    """The scripted assistant, noting when each answer came (the cached share over time)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.stamps: list[float] = []

    async def complete(self, request: Any) -> Any:
        answer = await super().complete(request)
        self.stamps.append(time.monotonic())
        return answer



async def _one_run(index: int, plan: Plan, base_url: str, admission: Admission | None, growth: int,
                   settings: Settings, t0: float, tag: str, timeout_s: float,
                   shared: bool = False) -> tuple[str, list[LoadRequest], list[_Ids]]:
    now = _Now()
    salt = f"load:{tag}" if shared else f"load:{tag}:{index}"
    assistant = _StampedAssistant(plan, now, measure=measuring_provider(base_url, salt))
    registry = ProviderRegistry(ProviderConfig(local_base_url=base_url), providers={"local": assistant})
    launcher = LocalTurnLauncher(limits=Limits(rerolls=0), providers=registry, tools_policy=arm_policy("fixed", now),
                                 admission=admission, admission_growth=growth,
                                 admission_release_s=settings.turn_admission_release_s)
    run_id = f"load-{tag}-{index}"
    seed_workspace(settings.home_dir(), run_id, plan.files)
    run = LocalRun(load_machine("coder"), plan.door, run_id=run_id, launcher=launcher, settings=settings)
    stop = asyncio.Event()
    people = asyncio.create_task(drive_gates(run, stop))
    try:
        status = (await run.wait(timeout_s)).status
    except TimeoutError:
        status = run.cancel().status
    finally:
        stop.set()
        await people
    await launcher.settle(30)
    rows = [t for conv in launcher.conversations.values() for t in conv.telemetry]
    best = reusable_per_request([(r.prompt_token_ids, r.completion_token_ids) for r in assistant.log], BLOCK)
    out = []  # the telemetry rows and the stamps come in the log's order (one conversation, one request at a time)
    for k, (req, reusable) in enumerate(zip(assistant.log, best, strict=True)):
        out.append(LoadRequest(run=index, i=req.i, t_s=assistant.stamps[k] - t0, prompt_tokens=req.prompt_tokens or 0,
                               cached_tokens=req.cached_tokens or 0, reusable=reusable or 0, ttft_s=req.ttft_s,
                               kv_wait_s=rows[k].kv_wait_s if k < len(rows) else None))
    return status, out, [(r.prompt_token_ids, r.completion_token_ids) for r in assistant.log]


async def run_arm(label: str, base_url: str, *, runs: int, settings: Settings, admission: Admission | None,
                  growth: int = 512, kv_tokens: int | None = None, demand_tokens: int | None = None,
                  budget_stats: Callable[[], BudgetStats] | None = None, profile: str = "quick",
                  timeout_s: float = 900.0, shared: bool = False, replicas: int = 1,
                  placement: str | None = None) -> LoadArm:
    """`runs` coder runs at once against `base_url`; with `admission`, each request first asks it. With `shared`,
    the runs have one cache salt, as runs of one workflow on one vLLM have none: their first requests may be served
    from each other's tools block and Briefing."""
    from serve.llm import read_vllm_sums

    urls = settings.vllm_metrics_urls or None
    before = read_vllm_sums(["num_preemptions"], urls)
    if any(ch in label for ch in "@/\\"):
        raise ValueError(f"an arm's label goes into vLLM's cache_salt, which refuses '@', '/' and '\\': {label!r}")
    tag = f"{label}-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    results = await asyncio.gather(*(_one_run(k, run_plan(k, profile), base_url, admission, growth, settings, t0,
                                              tag, timeout_s, shared) for k in range(runs)))
    wall = time.monotonic() - t0
    await asyncio.sleep(6.0)  # Ray's metrics agent publishes every few seconds
    after = read_vllm_sums(["num_preemptions"], urls)
    preempt = (after["num_preemptions"] - before.get("num_preemptions", 0.0)) if "num_preemptions" in after else None
    statuses = [s for s, _, _ in results]
    requests = [r for _, reqs, _ in results for r in reqs]
    common = None
    if shared:  # a request may be served from any run's earlier ones: its most reusable is over all of them
        common = _common_prefix([ids[0][0] for _, _, ids in results if ids and ids[0][0]]) // BLOCK * BLOCK
        requests = _reusable_across_runs([(r, i) for _, reqs, ids in results for r, i in zip(reqs, ids, strict=True)])
    return LoadArm(label=label, admission=admission is not None, runs=runs,
                   finished=sum(1 for s in statuses if s == "done"), kv_tokens=kv_tokens, demand_tokens=demand_tokens,
                   wall_s=wall, requests=requests, budget=budget_stats() if budget_stats is not None else None,
                   preemptions=preempt, statuses=statuses, shared=shared, shared_prefix_tokens=common,
                   replicas=replicas, placement=placement if admission is not None else None)


_Ids = tuple[list[int] | None, list[int] | None]  # one request's prompt and generated token ids


def _reusable_across_runs(pairs: list[tuple[LoadRequest, _Ids]]) -> list[LoadRequest]:
    """Each request's most reusable over every run's requests answered before it (with one salt the runs share
    blocks: a first request can be served from another run's tools block and Briefing)."""
    ordered = sorted(pairs, key=lambda p: p[0].t_s)
    best = reusable_per_request([ids for _, ids in ordered], BLOCK)
    return [r.model_copy(update={"reusable": b or 0}) for (r, _), b in zip(ordered, best, strict=True)]


def _common_prefix(seqs: list[list[int]]) -> int:
    """How many leading token ids all of `seqs` have in common."""
    if not seqs:
        return 0
    return min((common_prefix_len(seqs[0], x) for x in seqs[1:]), default=len(seqs[0]))


# ---------------------------------------------------------------------------------------------------------------------
# The sweep (`jr2ray bench --load`)
# ---------------------------------------------------------------------------------------------------------------------

COLS = ["arm", "admission", "replicas", "placement", "kv_tokens", "kv_of_demand", "runs", "finished", "requests",
        "cached_of_reusable", "prefilled_per_run", "runs_per_min", "ttft_p50_s", "ttft_p99_s", "preemptions",
        "budget_high_water", "budget_capacity", "budget_waits", "kv_wait_p50_s", "first_cached_of_shared", "wall_s"]


def markdown(command: str, rows: list[dict[str, Any]], notes: list[str]) -> str:
    from jr2ray.bench.report import _table

    lines = ["# Many runs, one model: Turn admission under KV pressure", "", f"Command: `{command}`", "",
             ("Each arm starts N coder runs at once; each replays the scripted coder trajectory with its own tool "
              "results and cache salt, every request measured with `max_tokens: 1`. `cached_of_reusable` is cached "
              "tokens over the most each request could reuse of its own conversation; `kv_of_demand` is the "
              "engine's KV capacity (vLLM's `num_gpu_blocks x block_size`, set with `num_gpu_blocks_override`) over "
              "the N conversations' peak size. TTFT is the one-token request's latency, waits for admission "
              "excluded; on the shared 2-core box it moves with other load, the token counts do not."), ""]
    lines += _table(rows, COLS)
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def plot(out: Path, arms: list[LoadArm], stem: str = "load") -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for arm in arms:
        reqs = sorted(arm.requests, key=lambda r: r.t_s)
        cached = reusable = 0
        xs, ys = [], []
        for r in reqs:
            cached += r.cached_tokens
            reusable += r.reusable
            if reusable:
                xs.append(r.t_s)
                ys.append(cached / reusable)
        ax.plot(xs, ys, linestyle="-" if arm.admission else "--", label=arm.label)
    ax.set_xlabel("seconds since the arm started")
    ax.set_ylabel("cached / reusable (cumulative)")
    ax.set_title("Cached share of the reusable maximum over time")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / f"{stem}_cached_share.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sized = [a.kv_tokens for a in arms if a.kv_tokens]
    unbounded_x = 1.25 * max(sized) if sized else 1.0  # drawn right of every cut cache

    def line_of(a: LoadArm) -> tuple[int, str, bool]:
        return (a.replicas, (a.placement or "on") if a.admission else "off", a.shared)

    for line in sorted({line_of(a) for a in arms}, key=str):
        pts = sorted((a.kv_tokens or unbounded_x, a.summary()["prefilled_per_run"] or 0) for a in arms
                     if line_of(a) == line)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label=f"{line[0]} replica(s), admission {line[1]}{', one salt' if line[2] else ''}")
    ax.set_xlabel("KV capacity (tokens; the rightmost point is the unbounded cache)")
    ax.set_ylabel("prefilled tokens per finished run")
    ax.set_title("Prefilled tokens per run against the KV size")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / f"{stem}_prefilled.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return paths


APP = "llm-load"
ROUTE = "/llm-load"


def _deploy_kv(settings: Settings, blocks: int | None, say: Callable[[str], None], replicas: int = 1) -> str:
    """(Re)deploy the load app: the CPU profile, `replicas` engines, each KV cache cut to `blocks` blocks (None: the
    profile's own)."""
    from serve.llm import deploy, undeploy

    try:
        undeploy(APP)
    except Exception:  # noqa: BLE001 - nothing deployed yet
        pass
    return deploy("cpu", settings=settings, name=APP, route_prefix=ROUTE, kv_blocks=blocks, progress=say,
                  replicas=replicas)


def _has_blocks(blocks: int, capacity: KvCapacity) -> bool:
    return capacity.num_blocks == blocks


# The arms with admission at one KV size: (label suffix, placement, one salt for all runs). With one replica the
# placement changes nothing, so only affinity runs.
ADMITTED_ARMS: dict[int, list[tuple[str, Placement, bool]]] = {
    1: [("on", "affinity", False), ("on-shared", "affinity", True)],
    2: [("on-round_robin", "round_robin", False), ("on-affinity", "affinity", False),
        ("on-spread-shared", "spread", True), ("on-prefix-shared", "prefix", True),
        ("on-affinity-shared", "affinity", True)],
}


def sweep(settings: Settings, runs: int, fractions: list[float], out: Path, say: Callable[[str], None],
          growth: int, replicas: int = 1) -> dict[str, Any]:
    """Deploy the load app once per KV size (the total over `replicas` engines) and run each size with admission off
    and on, in each placement the replica count makes worth comparing (unbounded: off only)."""
    from jr2ray.harness.budget_actor import RemoteAdmission, budget_stats, drop_budget
    from jr2ray.run.actor import NAMESPACE
    from serve.llm import ensure_kv_budget, wait_kv_capacity

    arms: list[LoadArm] = []
    notes: list[str] = []
    tag = "" if replicas == 1 else f"{replicas}r-"
    base_url = _deploy_kv(settings, None, say, replicas)
    solo = asyncio.run(run_arm(f"{tag}solo", base_url, runs=1, settings=settings, admission=None, replicas=replicas))
    peak = max(r.prompt_tokens for r in solo.requests) + 1
    demand = runs * peak
    say(f"one coder conversation peaks at {peak} tokens: {runs} runs demand {demand}")
    arms.append(asyncio.run(run_arm(f"{tag}unbounded-off", base_url, runs=runs, settings=settings, admission=None,
                                    demand_tokens=demand, replicas=replicas)))
    say(f"  {tag}unbounded-off: {arms[-1].summary()['cached_of_reusable']}")
    for f in sorted(x for x in fractions if x > 0):
        blocks = math.ceil(f * demand / replicas / BLOCK)
        if (blocks - 1) * BLOCK < peak + BLOCK:
            notes.append(f"{replicas} replica(s), KV at {f:g} of demand: {blocks} blocks each, which serve prompts "
                         f"up to {(blocks - 1) * BLOCK} tokens (vLLM keeps one block back), less than one "
                         f"conversation's peak ({peak}) and a block: skipped")
            continue
        base_url = _deploy_kv(settings, blocks, say, replicas)
        # The load app's engines: another app's, or a gone one's, have another block count.
        caps = wait_kv_capacity(settings.vllm_metrics_urls or None, engines=replicas,
                                select=partial(_has_blocks, blocks))
        total = sum(c.tokens for c in caps[:replicas])
        label = f"{tag}{f:g}"
        arms.append(asyncio.run(run_arm(f"{label}-off", base_url, runs=runs, settings=settings, admission=None,
                                        kv_tokens=total, demand_tokens=demand, replicas=replicas)))
        say(f"  {label}-off: {arms[-1].summary()['cached_of_reusable']}")
        for suffix, placement, shared in ADMITTED_ARMS.get(replicas, ADMITTED_ARMS[2]):
            placed = settings.model_copy(update={"turn_admission_placement": placement})
            handle, _ = ensure_kv_budget(APP, placed, namespace=NAMESPACE, capacity_tokens=caps[0].tokens,
                                         engines=replicas)
            arms.append(asyncio.run(run_arm(f"{label}-{suffix}", base_url, runs=runs, settings=settings,
                                            admission=RemoteAdmission(handle), growth=growth, kv_tokens=total,
                                            demand_tokens=demand, budget_stats=partial(budget_stats, handle),
                                            shared=shared, replicas=replicas, placement=placement)))
            s = arms[-1].summary()
            say(f"  {label}-{suffix}: {s['cached_of_reusable']} (first requests {s['first_cached_of_shared']})")
            drop_budget(APP, NAMESPACE)  # each arm starts on a fresh budget
    return {"runs": runs, "replicas": replicas, "peak_tokens": peak, "demand_tokens": demand, "growth": growth,
            "arms": arms, "notes": notes}


def main(argv_runs: int, fractions: list[float], out: Path, settings: Settings, say: Callable[[str], None],
         command: str, replicas: list[int] | None = None) -> int:
    """`jr2ray bench --load`: start Ray, sweep each replica count, write load.json/.md and the plots under `out`
    (`load_<n>r.*` when the sweep is not one replica's only, so a partial sweep never overwrites the full one)."""
    import json
    import os

    import ray
    from ray import serve

    from jr2ray.tinymodel import ensure_tiny

    counts = replicas or [1]
    ensure_tiny(settings, progress=say)
    # each LLMServer replica takes 2 logical CPUs (replica + engine bundle) and the ingress 1
    ray.init(num_cpus=max(4, 2 * max(counts) + 2), namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    results = []
    try:
        for n in counts:
            results.append(sweep(settings, argv_runs, fractions, out, say, settings.turn_admission_growth, n))
    finally:
        serve.shutdown()
        ray.shutdown()
    arms: list[LoadArm] = [a for res in results for a in res.pop("arms")]
    rows = [a.summary() for a in arms]
    first = results[0]
    notes = [n for res in results for n in res["notes"]] + [
        f"load average at the end (1, 5, 15 min): {os.getloadavg()}",
        f"one conversation peaks at {first['peak_tokens']} tokens; demand = runs x peak = {first['demand_tokens']}; "
        f"admission growth estimate {first['growth']} tokens",
        "with 2 replicas, kv_tokens is the total over both (each engine holds half); placement: where the budget "
        "puts a fresh conversation (affinity: most room, a replica knowing its kind counted one conversation more; "
        "prefix: where its kind is known, while it fits; spread: most room; round_robin: each request to the next "
        "replica)."]
    stem = "load" if counts == [1] else "load_" + "_".join(f"{n}r" for n in counts)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"command": command, "sweeps": results, "summaries": rows,
                                                  "arms": [a.model_dump() for a in arms]}, indent=1))
    md = markdown(command, rows, notes)
    (out / f"{stem}.md").write_text(md)
    plot(out, arms, stem)
    print(md)
    return 0 if all(a.finished == a.runs for a in arms) else 1
