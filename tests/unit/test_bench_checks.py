"""The prefix-cache bench's own verdicts: they pass good measurements and fail each way the issue names."""

from __future__ import annotations

from typing import Any

from jr2ray.bench.report import check, measure, narrowed_changes

BLOCK = 32


def _req(i: int, prompt: int, cached: int, reusable: int | None, sha: str) -> dict[str, Any]:
    return {"i": i, "prompt": prompt, "cached": cached, "reusable": reusable, "tools_sha": sha}


def test_fixed_arm_passes_when_every_later_request_hits_its_reusable_max() -> None:
    reqs = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 896, 896, "a"), _req(3, 1100, 992, 992, "a")]
    assert check("fixed", reqs, BLOCK) == []


def test_fixed_arm_fails_on_a_changed_tools_block_or_a_short_hit() -> None:
    changed = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 896, 896, "b")]
    assert any("tools block bytes changed" in p for p in check("fixed", changed, BLOCK))
    short = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 864, 896, "a")]
    assert check("fixed", short, BLOCK) == ["fixed arm: request 2 cached 864 != reusable max 896"]
    unknown = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 896, None, "a")]
    assert "no prompt token ids" in check("fixed", unknown, BLOCK)[0]


def test_narrowed_arm_must_change_and_then_miss() -> None:
    never = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 896, 896, "a")]
    assert check("narrowed", never, BLOCK) == []  # one arm may never change; the suite needs some arm that did
    assert narrowed_changes(never) == []
    still_hits = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 896, 896, "b")]
    assert "cannot tell a miss" in check("narrowed", still_hits, BLOCK)[0]
    misses = [_req(1, 900, 0, 0, "a"), _req(2, 1000, 640, 640, "b")]
    assert check("narrowed", misses, BLOCK) == []


def test_measure_counts_generated_tokens_as_reusable() -> None:
    """vLLM caches what it generated: the next prompt may hit through the previous answer's tokens."""
    first = list(range(100))
    answer = [500, 501, 502, 503]
    second = first + answer[:3] + list(range(200, 260))
    rows = [{"i": 1, "prompt_token_ids": first, "completion_token_ids": answer, "prompt_tokens": 100,
             "cached_tokens": 0, "ttft_s": 0.1, "tools_sha": "a"},
            {"i": 2, "prompt_token_ids": second, "prompt_tokens": len(second), "cached_tokens": 96, "ttft_s": 0.1,
             "tools_sha": "a"}]
    reqs = measure(rows, 8)
    assert reqs[0]["reusable"] == 0
    assert reqs[1]["reusable"] == 96  # 103 shared tokens (prompt + 3 of the answer) -> 12 whole blocks of 8
    rows[0]["completion_token_ids"] = None
    assert measure(rows, 8)[1]["reusable"] == 96  # 100 shared -> still 12 blocks; the answer adds a partial
    rows[1]["prompt_token_ids"] = first + answer + [504] * 30
    rows[0]["completion_token_ids"] = answer + [504] * 20
    # The last generated token never had its KV computed: 100 + 23 of 24 shared -> 15 whole blocks of 8.
    assert measure(rows, 8)[1]["reusable"] == 120


def test_an_arms_counters_wait_for_its_hits_not_only_its_queries(monkeypatch: Any) -> None:
    """Ray exports the two series apart: an arm whose hits lag its queries must not lend them to the next arm."""
    import asyncio

    import serve.llm
    from jr2ray.bench import run as bench_run
    from serve.llm import PrefixCacheCounters

    def reading(q: float, h: float) -> PrefixCacheCounters:
        return PrefixCacheCounters(queries=q, hits=h, sources=[])

    exports = iter([reading(1000, 0), reading(1000, 0), reading(1000, 640)])
    last: list[PrefixCacheCounters] = []

    def read(model: str, urls: Any = None) -> PrefixCacheCounters:
        last.append(next(exports, last[-1] if last else reading(0, 0)))
        return last[-1]

    async def no_sleep(s: float) -> None:
        return None

    monkeypatch.setattr(serve.llm, "read_prefix_cache_counters", read)
    monkeypatch.setattr(bench_run.asyncio, "sleep", no_sleep)
    counted = asyncio.run(bench_run.server_counters("m", reading(0, 0), 1000, want_hits=640))
    assert counted is not None and counted[:2] == (1000, 640)
    # and a hit count that never arrives is no number, rather than a short one
    exports = iter([reading(2000, 640)])
    lagging = asyncio.run(bench_run.server_counters("m", reading(1000, 640), 1000, want_hits=640, wait_s=0.0))
    assert lagging is None
