"""Turn admission on the real vLLM (issue 25, the CI check): 4 coder runs at once on a KV cache that holds 2 of
their conversations. Without admission vLLM's LRU evicts each run's prefix before its next request; with it, the
runs take turns through the budget actor (its capacity read from vLLM's own `cache_config_info`), so the cached
share of the reusable maximum must be higher, and the budget must never have held more than the capacity.

The tier's shared app has a large cache, so this module deploys a second app beside it (same Ray, Serve and tiny
model), its cache cut with `num_gpu_blocks_override`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import pytest

from jr2ray.bench.load import BLOCK, run_arm

if TYPE_CHECKING:
    from conftest import TinyServer

pytestmark = pytest.mark.vllm

APP, ROUTE = "llm-kv", "/llm-kv"
RUNS, HOLDS, GROWTH = 4, 2, 512  # 4 runs on a cache for 2: they compete


@pytest.fixture(scope="module")
def small_cache(tiny_server: TinyServer) -> Iterator[tuple[str, int, int]]:
    """(base URL, KV blocks, one conversation's peak tokens) of an app whose cache holds HOLDS conversations."""
    from jr2ray.settings import load_settings
    from serve.llm import deploy, undeploy

    settings = load_settings()
    solo = asyncio.run(run_arm("solo", tiny_server.base_url, runs=1, settings=settings, admission=None))
    assert solo.finished == 1, solo.statuses
    peak = max(r.prompt_tokens for r in solo.requests) + 1
    blocks = math.ceil(HOLDS * (peak + GROWTH) / BLOCK)
    port = int(tiny_server.base_url.split(":")[2].split("/")[0])
    # `up --kv-blocks`'s path: the cache cut to `blocks`, the context to what it serves (serve.llm.small_cache).
    url = deploy("cpu", settings=settings, name=APP, route_prefix=ROUTE, port=port, timeout_s=900, kv_blocks=blocks)
    try:
        yield url, blocks, peak
    finally:
        undeploy(APP)


def _has_blocks(blocks: int, capacity: object) -> bool:
    return getattr(capacity, "num_blocks", None) == blocks


def test_admission_keeps_more_of_each_prefix_and_never_passes_the_budget(small_cache: tuple[str, int, int]) -> None:
    from jr2ray.harness.budget_actor import RemoteAdmission, budget_stats, drop_budget
    from jr2ray.run.actor import NAMESPACE
    from jr2ray.settings import load_settings
    from serve.llm import ensure_kv_budget, wait_kv_capacity

    url, blocks, peak = small_cache
    settings = load_settings()
    [cap] = wait_kv_capacity(settings.vllm_metrics_urls or None, select=partial(_has_blocks, blocks))
    assert cap.tokens == blocks * BLOCK  # vLLM honoured the override, and the budget reads it from vLLM
    assert cap.tokens < RUNS * peak  # the 4 conversations do not fit: they compete

    off = asyncio.run(run_arm("off", url, runs=RUNS, settings=settings, admission=None,
                              kv_tokens=cap.tokens, demand_tokens=RUNS * peak))
    handle, capacity = ensure_kv_budget(APP, settings, namespace=NAMESPACE, capacity_tokens=cap.tokens)
    try:
        on = asyncio.run(run_arm("on", url, runs=RUNS, settings=settings, admission=RemoteAdmission(handle),
                                 growth=GROWTH, kv_tokens=cap.tokens, demand_tokens=RUNS * peak,
                                 budget_stats=partial(budget_stats, handle)))
    finally:
        drop_budget(APP, NAMESPACE)
    a, b = off.summary(), on.summary()
    print(f"\n[kv admission] capacity {capacity} tokens, peak conversation {peak}, {RUNS} runs\n  off: {a}\n  on:  {b}")
    assert off.finished == on.finished == RUNS, (off.statuses, on.statuses)
    assert on.budget is not None
    assert on.budget.high_water_tokens <= capacity and on.budget.over_capacity_grants == 0  # never past the budget
    assert on.budget.waits > 0  # the runs did compete: some Turns waited for a share
    assert on.budget.grown > 0  # holders grew in place, request after request
    assert len(on.budget.kinds) == 1 and next(iter(on.budget.kinds)).startswith("coder:")  # one seat, one Menu
    assert on.budget.held == {} and on.budget.waiting == []  # every share came back
    assert b["cached_of_reusable"] > a["cached_of_reusable"], (a, b)
    assert {(r.run, r.i) for r in on.requests} == {(r.run, r.i) for r in off.requests}  # the same requests
