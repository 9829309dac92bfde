"""The load bench's figures from its per-request rows (issue 25): the cached share of the reusable maximum, and with
one salt for all runs, the first requests' cached share of the prefix they have in common (item 3)."""

from __future__ import annotations

from jr2ray.bench.load import LoadArm, LoadRequest, _common_prefix, _reusable_across_runs


def req(run: int, i: int, t: float, prompt: int, cached: int, reusable: int) -> LoadRequest:
    return LoadRequest(run=run, i=i, t_s=t, prompt_tokens=prompt, cached_tokens=cached, reusable=reusable, ttft_s=0.1)


def test_common_prefix_counts_the_leading_ids_all_share() -> None:
    assert _common_prefix([[1, 2, 3, 4], [1, 2, 3], [1, 2, 9, 4]]) == 2
    assert _common_prefix([[5, 6]]) == 2
    assert _common_prefix([]) == 0
    assert _common_prefix([[1], [2]]) == 0


def test_first_requests_after_the_earliest_are_scored_against_the_shared_prefix() -> None:
    rows = [req(0, 1, 1.0, 500, 0, 0),  # the earliest first request: nothing to share yet, not scored
            req(1, 1, 2.0, 500, 256, 256),  # all of the shared prefix
            req(2, 1, 3.0, 500, 128, 256),  # half of it
            req(1, 2, 4.0, 600, 500, 500)]  # a later request: its own conversation, not part of the first share
    arm = LoadArm(label="x", admission=True, runs=3, finished=3, kv_tokens=None, wall_s=1.0, requests=rows,
                  shared=True, shared_prefix_tokens=256)
    summary = arm.summary()
    assert summary["first_cached_of_shared"] == (256 + 128) / (2 * 256)
    assert summary["cached_of_reusable"] == (256 + 128 + 500) / (256 + 256 + 500)
    alone = arm.model_copy(update={"shared": False})
    assert alone.summary()["first_cached_of_shared"] is None  # own salts: no cross-run figure


def test_with_one_salt_a_request_may_reuse_any_run_answered_before_it() -> None:
    """Run 1's first request shares 64 tokens with run 0's, answered earlier; run 0's first had nothing before it.
    The figures use whole 32-token blocks, and never the last prompt token."""
    head = list(range(64))
    first0, first1 = head + [900, 901, 902], head + [700, 701]
    pairs = [(req(1, 1, 2.0, 66, 64, 0), (first1, [5])), (req(0, 1, 1.0, 67, 0, 0), (first0, [6]))]
    out = {(r.run, r.i): r.reusable for r in _reusable_across_runs(pairs)}
    assert out == {(0, 1): 0, (1, 1): 64}
