"""The prefix-cache metrics: what vLLM could serve from its KV cache, and what it says it did.

The arithmetic (`reusable_max`, `reusable_per_request`) is pure: the most of each prompt the cache could serve, from
token ids. The counters (`read_prefix_cache_counters`) are vLLM's own, read from Ray's metrics export. The prefix-cache
benchmark (`jr2ray bench`) sets the `cached_tokens` vLLM reports per request against the reusable maximum, and checks
their sum against the counters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import httpx
from pydantic import BaseModel, Field

from jr2ray.settings import ENV_NAMES

from .configs import DEFAULT_HOST

DEFAULT_BLOCK = 32


# ---------------------------------------------------------------------------------------------------------------------
# Prefix-cache arithmetic (pure)
# ---------------------------------------------------------------------------------------------------------------------


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading token ids two prompts share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable_max(prompt_a_ids: Sequence[int], prompt_b_ids: Sequence[int], block: int = DEFAULT_BLOCK) -> int:
    """The most prompt tokens of B that vLLM can serve from the KV cache after it has seen A.

    vLLM caches whole blocks only, and always recomputes at least the last prompt token (it needs its logits), so the
    hit is the shared prefix capped at len(B) - 1, rounded down to a block. When B repeats A or extends it by a
    partial block, this is the closed form floor((shared - 1) / block) * block; it differs only when the shared
    prefix ends exactly on a block edge before the end of B (then that last full block is still a hit).
    """
    if block <= 0:
        raise ValueError("block must be positive")
    if not prompt_b_ids:
        return 0
    usable = min(common_prefix_len(prompt_a_ids, prompt_b_ids), len(prompt_b_ids) - 1)
    return (usable // block) * block


def reusable_per_request(
    requests: Sequence[tuple[Sequence[int] | None, Sequence[int] | None]], block: int = DEFAULT_BLOCK
) -> list[int | None]:
    """For each (prompt ids, generated ids) in send order: the most of its prompt the cache could serve.

    vLLM keeps the blocks of what it generated as well as the prompt, so an earlier request's cached sequence is its
    prompt plus its output minus the last sampled token (whose KV was never computed). None where ids are missing.
    """
    seen: list[list[int]] = []
    out: list[int | None] = []
    for prompt, generated in requests:
        if not prompt:
            out.append(None)
            continue
        out.append(max((reusable_max(prev, prompt, block) for prev in seen), default=0))
        seen.append(list(prompt) + list(generated or [])[:-1])
    return out


# ---------------------------------------------------------------------------------------------------------------------
# vLLM prefix-cache counters
# ---------------------------------------------------------------------------------------------------------------------


class PrefixCacheCounters(BaseModel):
    """vLLM's cumulative prefix-cache counters (tokens), summed over replicas and engines.

    Under Ray Serve the engine exports them through Ray's metrics agent (names sanitised to
    `ray_vllm_prefix_cache_queries_total` / `ray_vllm_prefix_cache_hits_total`); the agent publishes on each node's
    metrics export port every few seconds, so they lag per-request `cached_tokens`, which stays the primary measure.
    """

    queries: float
    hits: float
    sources: list[str] = Field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def _samples(text: str) -> Iterator[tuple[str, str, str]]:
    """(name with `:` as `_`, raw labels, raw value) of each sample in one Prometheus text page; comments and the
    `_created` series are left out. Every reader below walks a page through this."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name = m.group("name").replace(":", "_")
        if not name.endswith("_created"):
            yield name, m.group("labels") or "", m.group("value")


def _labels(raw: str) -> dict[str, str]:
    return {lm.group("key"): lm.group("value") for lm in _LABEL.finditer(raw)}


def parse_prefix_cache_counters(text: str, model: str | None = None) -> tuple[float, float] | None:
    """Sum the prefix-cache query/hit counters in one Prometheus text page; None when the page has neither.

    Matches both the plain vLLM names (`vllm:prefix_cache_queries_total`) and Ray's sanitised export
    (`ray_vllm_prefix_cache_queries_total`); the `external_` (KV-connector) variants are left out.
    """
    found = False
    queries = hits = 0.0
    for name, raw_labels, raw_value in _samples(text):
        if "external_prefix_cache" in name:
            continue
        if name.endswith("vllm_prefix_cache_queries_total") or name.endswith("vllm_prefix_cache_queries"):
            kind = "q"
        elif name.endswith("vllm_prefix_cache_hits_total") or name.endswith("vllm_prefix_cache_hits"):
            kind = "h"
        else:
            continue
        if model is not None and _labels(raw_labels).get("model_name", model) != model:
            continue
        try:
            value = float(raw_value)
        except ValueError:
            continue
        found = True
        if kind == "q":
            queries += value
        else:
            hits += value
    return (queries, hits) if found else None


METRICS_URLS_ENV = ENV_NAMES["vllm_metrics_urls"]
"""Comma-separated Prometheus URLs to read instead of asking Ray (e.g. from a process that is not a Ray driver)."""


def ray_metrics_urls() -> list[str]:
    """The Prometheus endpoints of every live Ray node's metrics agent (needs an initialised Ray).

    This node's own agent is addressed as 127.0.0.1 (it listens on all interfaces), so local reads stay on loopback.
    """
    import ray
    from ray.util import get_node_ip_address

    local_ip = get_node_ip_address()
    urls: list[str] = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if node.get("Alive") and port:
            address = node.get("NodeManagerAddress") or DEFAULT_HOST
            host = DEFAULT_HOST if address == local_ip else address
            urls.append(f"http://{host}:{port}/metrics")
    return urls


def read_prefix_cache_counters(
    model: str | None = None, urls: Sequence[str] | None = None, timeout_s: float = 5.0
) -> PrefixCacheCounters | None:
    """Read vLLM's prefix-cache counters from the given Prometheus URLs, or else from Ray's metrics export.

    `urls` are the caller's (`jr2ray bench` passes its settings' `vllm_metrics_urls`, read once where it starts);
    None asks the Ray this process is a driver of for its nodes' metrics agents. Counters are cumulative since the
    engine started: diff two reads around the requests you measure.
    Returns None when nothing reachable exports them (metrics off, agent not up yet, or no request served yet).
    """
    total_q = total_h = 0.0
    sources: list[str] = []
    for url, text in _metrics_pages(urls, timeout_s):
        parsed = parse_prefix_cache_counters(text, model)
        if parsed is not None:
            total_q += parsed[0]
            total_h += parsed[1]
            sources.append(url)
    if not sources:
        return None
    return PrefixCacheCounters(queries=total_q, hits=total_h, sources=sources)


# ---------------------------------------------------------------------------------------------------------------------
# KV capacity (Turn admission's budget)
# ---------------------------------------------------------------------------------------------------------------------


class KvCapacity(BaseModel):
    """One engine's KV cache, as vLLM configured it at start: the budget Turn admission shares out."""

    num_blocks: int = Field(gt=0, description="`num_gpu_blocks` (the CPU backend too: the KV blocks it allocated).")
    block_size: int = Field(gt=0)
    labels: dict[str, str] = Field(default_factory=dict, description="The sample's labels (engine, Ray's tags).")
    source: str | None = None

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size


def parse_kv_capacity(text: str, source: str | None = None) -> list[KvCapacity]:
    """Every engine's KV capacity in one Prometheus text page, from vLLM's `vllm:cache_config_info` (an info gauge
    whose labels are the engine's CacheConfig: `num_gpu_blocks`, `block_size`, ...), plain or as Ray exports it
    (`ray_vllm_cache_config_info`). Samples without a block count (an engine still profiling) are left out."""
    found: list[KvCapacity] = []
    for name, raw_labels, _ in _samples(text):
        if not name.endswith("vllm_cache_config_info"):
            continue
        labels = _labels(raw_labels)
        try:
            blocks, size = int(labels.get("num_gpu_blocks", "")), int(labels.get("block_size", ""))
        except ValueError:
            continue
        if blocks > 0 and size > 0:
            found.append(KvCapacity(num_blocks=blocks, block_size=size, labels=labels, source=source))
    return found


def read_kv_capacity(urls: Sequence[str] | None = None, timeout_s: float = 5.0) -> list[KvCapacity]:
    """Read every engine's KV capacity from the given Prometheus URLs (a standalone server's `/metrics`), or else
    from Ray's metrics export (the engines of a Ray Serve LLM app with `log_engine_metrics`). Empty when none is
    found yet (the agent publishes every few seconds)."""
    found: list[KvCapacity] = []
    for url, text in _metrics_pages(urls, timeout_s):
        found.extend(parse_kv_capacity(text, source=url))
    return found


def _metrics_pages(urls: Sequence[str] | None, timeout_s: float) -> list[tuple[str, str]]:
    """(url, page) of each Prometheus page that answers 200: from `urls`, else from the nodes of the Ray this
    process is a driver of (none when Ray is absent or unreachable). Both readers above share this fetch."""
    if urls is None:
        try:
            import ray

            if not ray.is_initialized():
                return []
            urls = ray_metrics_urls()
        except Exception:  # noqa: BLE001 - Ray absent or unreachable: nothing to read
            return []
    pages: list[tuple[str, str]] = []
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        for url in urls:
            try:
                resp = client.get(url)
            except httpx.HTTPError:
                continue
            if resp.status_code == 200:
                pages.append((url, resp.text))
    return pages


# ---------------------------------------------------------------------------------------------------------------------
# Any vLLM counter (the load bench's preemptions)
# ---------------------------------------------------------------------------------------------------------------------


def parse_vllm_sums(text: str, series: Sequence[str]) -> dict[str, float]:
    """Sum each named vLLM series (`num_preemptions` matches `vllm:num_preemptions_total` and Ray's
    `ray_vllm_num_preemptions_total`) over every sample of one Prometheus page; a series absent is left out."""
    sums: dict[str, float] = {}
    for name, _, raw_value in _samples(text):
        for want in series:
            if name.endswith(f"vllm_{want}_total") or name.endswith(f"vllm_{want}"):
                try:
                    sums[want] = sums.get(want, 0.0) + float(raw_value)
                except ValueError:
                    pass
    return sums


def read_vllm_sums(series: Sequence[str], urls: Sequence[str] | None = None,
                   timeout_s: float = 5.0) -> dict[str, float]:
    """`parse_vllm_sums` over every page (a server's `/metrics`, or Ray's metrics export): cumulative since the
    engines started, so diff two reads around what you measure."""
    total: dict[str, float] = {}
    for _, text in _metrics_pages(urls, timeout_s):
        for k, v in parse_vllm_sums(text, series).items():
            total[k] = total.get(k, 0.0) + v
    return total
