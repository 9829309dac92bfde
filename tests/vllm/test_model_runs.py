"""The product on the real model: a Run whose writer is a HarnessActor on the Ray-hosted tiny model, and the bench.

The demo's own code path (jr2ray.demo.play_notes) runs here against the tier's shared LLM app, so `jr2ray demo` and
CI exercise the same Run, Harness and masking. `bench --quick` runs whole (every arm replays one recorded
trajectory), and its table and plots land in benchmarks/results/ where the issue wants them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jr2ray.demo import Progress, play_notes
from serve.llm import reusable_per_request

if TYPE_CHECKING:
    from conftest import TinyServer

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]


def test_notes_writer_on_the_tiny_model_reaches_published(tiny_server: TinyServer, tmp_path: Path) -> None:
    out = play_notes(tiny_server.base_url, Progress(quiet=True), timeout_s=600, store=tmp_path)
    assert out.status == "done", (out.error, out.history[-5:])
    assert out.value == "published"
    assert out.notes  # the writer's `done` carried the notes
    receipts = [e["data"] for e in out.history if e["kind"] == "receipt" and e["data"].get("slot")]
    picks = [r["pick"] for r in receipts]
    assert picks[-1] == "done" and "ask" in picks  # the chart's guard needs one reply before `done` is allowed
    assert out.editor_replies >= 1
    # Masking keeps the random model on the Allowed picks: nothing it picked was refused.
    assert all(r["delivered"] and not r.get("refused") for r in receipts), receipts

    rows = [r for r in out.telemetry if r.get("error") is None]
    assert len(rows) >= 2
    assert len({r["tools_sha256"] for r in rows}) == 1  # the Menu went out byte-identical on every request
    assert all(r["masked_tools"] for r in rows)  # decoding was constrained on every request
    # Requests 2..N of the conversation are served from cache exactly up to the reusable maximum, computed from the
    # server's own token ids of everything the conversation sent and got before.
    best = reusable_per_request([(r["prompt_token_ids"], r["completion_token_ids"]) for r in rows], 32)
    assert all(r["prompt_token_ids"] for r in rows)
    assert [r["cached_tokens"] for r in rows[1:]] == best[1:]
    assert all(b and b > 0 for b in best[1:])


def test_bench_quick_replays_the_same_requests_in_every_arm(tiny_server: TinyServer) -> None:
    """`bench --quick` end to end: the arms carry the same conversation, and only the fixed Menu keeps the cache."""
    from jr2ray.bench.run import main
    from jr2ray.settings import load_settings

    out = ROOT / "benchmarks" / "results"
    rc = main(["--quick", "--base-url", tiny_server.base_url, "--out", str(out)], load_settings())
    report = json.loads((out / "prefix_cache.json").read_text())
    assert rc == 0, report["problems"]
    assert report["problems"] == []  # the suite's own checks, the same-requests one included
    counted = [s for s in report["summaries"] if s["vllm_queries"] is not None]
    assert counted, "vLLM's own prefix-cache counters were never readable"  # the suite checks each against usage
    by = {(s["workflow"], s["arm"]): s for s in report["summaries"]}
    assert set(by) == {(wf, arm) for wf in ("notes", "coder", "desk")
                       for arm in ("fixed", "narrowed", "reordered", "fixed+masking")}
    for wf in ("notes", "coder", "desk"):
        arms = {arm: by[(wf, arm)] for arm in ("fixed", "narrowed", "reordered", "fixed+masking")}
        steps = len(report["trajectories"][wf]["plan"]["steps"])
        assert {s["requests"] for s in arms.values()} == {steps}  # one recorded trajectory, replayed in each arm
        assert all(s["status"] == "done" for s in arms.values())
        details = {arm: report["requests"][f"{wf}/{arm}"] for arm in arms}
        shas = {arm: [r["messages_sha"] for r in reqs] for arm, reqs in details.items()}
        assert len({tuple(v) for v in shas.values()}) == 1  # the same messages in every arm, request by request
        fixed = arms["fixed"]
        assert fixed["distinct_tools_blocks"] == 1
        assert fixed["cached_of_reusable"] == 1.0  # every later request hit its reusable maximum exactly
        assert fixed["prompt_tokens"] == arms["reordered"]["prompt_tokens"]  # same bytes, other order
        assert arms["reordered"]["cached_tokens"] < fixed["cached_tokens"]
        assert arms["narrowed"]["cached_tokens"] < fixed["cached_tokens"]
        assert arms["fixed+masking"]["cached_tokens"] == fixed["cached_tokens"]  # masking leaves the prompt alone
        assert (vq := fixed["vllm_queries"]) is None or vq == fixed["prompt_tokens"]
    ratio = {r["workflow"]: r for r in report["ratios"]}
    assert all(ratio[wf]["cached fixed/reordered"] > 1 for wf in ("notes", "coder", "desk"))
    picks = {(r["workflow"], r["decoding"]): r for r in report["first_picks"]}
    for wf in ("notes", "coder", "desk"):
        masked, unmasked = picks[(wf, "masked")], picks[(wf, "unmasked")]
        steps = len(report["trajectories"][wf]["plan"]["steps"])
        assert masked["requests"] == unmasked["requests"] == steps  # sampled on the recorded requests
        # Masked decoding only admits the Allowed picks and Working tools, and a pick's (string) arguments within
        # its schema; the random model alone never writes a call at all.
        assert masked["no_call"] == masked["not_allowed"] == 0, report["first_picks_requests"][wf]["masked"]
        assert masked["pick"] > 0 and masked["pick_valid_share"] == 1.0
        assert unmasked["valid_share"] < masked["valid_share"]
        assert (out / f"prefix_cache_{wf}.png").stat().st_size > 1000
    assert (out / "prefix_cache.md").read_text().startswith("# Prefix cache, profile `quick`")
