"""Turn admission's budget for a deployed LLM app: its KV capacity, read from vLLM, in a named budget actor.

Why here: reading vLLM's metrics belongs to the serve layer, and the Harness below may not import it. So whoever
deploys the app (`deploy` with `turn_admission` on, `jr2ray bench --load`, the vllm tier) reads the engines'
capacity (`read_kv_capacity`: `num_gpu_blocks x block_size` of `vllm:cache_config_info`) and creates the budget actor
the Harnesses of every run share (`jr2ray.harness.budget_actor`). Never a capacity configured by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from jr2ray.settings import Settings

from .metrics import KvCapacity, read_kv_capacity


def wait_kv_capacity(urls: Sequence[str] | None = None, *, engines: int = 1, timeout_s: float = 60.0,
                     select: Callable[[KvCapacity], bool] | None = None) -> list[KvCapacity]:
    """Poll until `engines` engines report their KV capacity (Ray's metrics agent publishes every few seconds after
    an engine starts). `select` keeps the engines of one app when several share the Ray. Raises when none shows."""
    deadline = time.monotonic() + timeout_s
    found: list[KvCapacity] = []
    while True:
        found = [c for c in read_kv_capacity(urls) if select is None or select(c)]
        if len(found) >= engines or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if not found:
        raise TimeoutError(f"no vLLM engine reported its KV capacity (vllm:cache_config_info) within {timeout_s:.0f}s:"
                           " is the app up, with log_engine_metrics on?")
    return found


def ensure_kv_budget(app: str, settings: Settings, *, namespace: str, capacity_tokens: int | None = None,
                     engines: int = 1, select: Callable[[KvCapacity], bool] | None = None,
                     timeout_s: float = 60.0) -> tuple[Any, int]:
    """The app's budget actor, one budget per replica, and its total capacity in tokens.

    Each replica's capacity is what its engine reports to vLLM's metrics (`capacity_tokens`: one replica's, only
    when the caller already read it from vLLM). The engines of one app run one config, but the metrics do not say
    which Serve replica an engine is, so every replica gets the smallest reported capacity: never more than any
    one of them holds. The placement over replicas is `settings.turn_admission_placement`."""
    from jr2ray.harness.budget_actor import ensure_budget

    if capacity_tokens is None:
        found = wait_kv_capacity(settings.vllm_metrics_urls or None, engines=engines, select=select,
                                 timeout_s=timeout_s)
        capacity_tokens = min(c.tokens for c in found)
    handle = ensure_budget(app, [capacity_tokens] * engines, namespace=namespace,
                           patience_s=settings.turn_admission_patience_s,
                           placement=settings.turn_admission_placement)
    return handle, capacity_tokens * engines
