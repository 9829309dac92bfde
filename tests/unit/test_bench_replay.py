"""The bench's replay: one recorded trajectory, the same requests in every arm, and only the arm's bytes differ.

No model here: the recording pass needs none, and the measured pass is fed by a fake measuring provider, so these
tests pin what the Harness sends in each arm and how the bench judges a replay.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from jr2ray.bench.replay import (
    ARMS,
    PassResult,
    ScriptedAssistant,
    _Now,
    first_call_ok,
    run_pass,
    same_requests,
)
from jr2ray.bench.report import first_picks_rows, ratios
from jr2ray.bench.scripts import PlannedCall, plan_for
from jr2ray.harness.errors import ProviderError
from jr2ray.harness.transcript import Message, ModelAnswer, ModelRequest, ToolCall
from jr2ray.menu.models import MenuItem
from jr2ray.settings import load_settings


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("workflow", ["notes", "coder", "desk"])
async def test_every_arm_replays_the_recording_and_only_the_tools_differ(workflow: str) -> None:
    plan = plan_for(workflow, "quick")
    ref = await run_pass(plan, "fixed", settings=load_settings())
    assert ref.status == "done"
    assert len(ref.requests) == len(plan.steps)
    passes = {arm: await run_pass(plan, arm, settings=load_settings()) for arm in ARMS}
    for arm, res in passes.items():
        assert same_requests(ref, res) == [], arm
        assert [r.messages_sha for r in res.requests] == [r.messages_sha for r in ref.requests]
    fixed = passes["fixed"].requests
    assert len({r.tools_sha for r in fixed}) == 1
    assert [r.tools_sha for r in passes["fixed+masking"].requests] == [r.tools_sha for r in fixed]
    assert all(r.masked is None for arm in ("fixed", "narrowed", "reordered") for r in passes[arm].requests)
    for r in passes["fixed+masking"].requests:  # masked to what the model last read (plus Working tools)
        assert r.masked is not None and set(r.allowed) <= set(r.masked)
    for r in passes["narrowed"].requests:
        assert {n for n in r.tools if n in plan_menu(passes["fixed"])} == set(r.allowed)
    assert len({r.tools_sha for r in passes["reordered"].requests}) > 1
    assert len({r.tools_sha for r in passes["narrowed"].requests}) > 1  # every plan changes the Allowed picks


def plan_menu(res: PassResult) -> set[str]:
    """The Menu names (the fixed tools minus the Working tools)."""
    from jr2ray.bench.replay import WORKING

    return set(res.requests[0].tools) - WORKING


async def test_the_long_coder_plan_is_a_long_conversation() -> None:
    plan = plan_for("coder", "long")
    ref = await run_pass(plan, "fixed", settings=load_settings())
    assert ref.status == "done"
    assert len(ref.requests) >= 30
    # The tool results carry the long files: well over 20,000 tokens at the tiny tokenizer's ~2 characters a token.
    assert sum(len(m.get("content") or "") for m in ref.transcript) > 40_000


async def test_a_diverging_replay_is_caught() -> None:
    plan = plan_for("desk", "quick")
    ref = await run_pass(plan, "fixed", settings=load_settings())
    other = plan.model_copy(deep=True)
    other.steps[1] = [PlannedCall(name="m0_e0", args={"note": "another note"})]
    diverged = await run_pass(other, "fixed", settings=load_settings())
    assert any("carries other messages" in p and "request 3" in p for p in same_requests(ref, diverged))
    short = plan.model_copy(deep=True)
    short.steps = short.steps[:-1]  # the script runs out: the Harness faults and the run does not finish
    cut = await run_pass(short, "fixed", settings=load_settings())
    problems = same_requests(ref, cut)
    assert any("ended" in p and "not 'done'" in p for p in problems)


class _FakeVllm:
    """Answers a measuring request with usage numbers, as the server does; records what it was sent."""

    kind = "local"

    def __init__(self) -> None:
        self.seen: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        self.seen.append(request)
        n = 100 + 10 * len(request.messages)
        return ModelAnswer(text="x", prompt_tokens=n, cached_tokens=n - 40, prompt_token_ids=list(range(n)),
                           completion_token_ids=[7])


async def test_the_scripted_assistant_measures_the_harness_request_and_answers_from_the_plan() -> None:
    plan = plan_for("notes", "quick")
    fake = _FakeVllm()
    assistant = ScriptedAssistant(plan, _Now(allowed=["ask"]), measure=fake)  # type: ignore[arg-type]
    tools = [MenuItem(name="ask", description="Ask.", parameters={"type": "object", "properties": {}})]
    request = ModelRequest(model="tiny", system="s", tools=tools, messages=[Message(role="user", content="go")])
    answer = await assistant.complete(request)
    assert fake.seen == [request]  # the Harness's own request, unchanged
    assert [(c.name, json.loads(c.arguments)) for c in answer.tool_calls] == [("ask", plan.steps[0][0].args)]
    assert (answer.prompt_tokens, answer.cached_tokens) == (110, 70)
    entry = assistant.log[0]
    assert entry.ttft_s is not None and entry.off_tools == [] and entry.allowed == ["ask"]
    assistant.log.extend([entry] * (len(plan.steps) - 1))
    with pytest.raises(ProviderError, match="no answer for request"):
        await assistant.complete(request)


def test_first_call_must_be_allowed_and_fit_its_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    tools = [MenuItem(name="a", description="A.", parameters=schema),
             MenuItem(name="b", description="B.", parameters=schema)]

    def answer(name: str, args: str) -> ModelAnswer:
        return ModelAnswer(tool_calls=[ToolCall(id="1", name=name, arguments=args)])

    assert first_call_ok(answer("a", '{"note": "x"}'), tools, ["a"]) == ("a", "pick")
    assert first_call_ok(answer("b", '{"note": "x"}'), tools, ["a"]) == ("b", "not_allowed")  # on the Menu only
    assert first_call_ok(answer("a", '{"note": 3}'), tools, ["a"]) == ("a", "bad_args")
    assert first_call_ok(answer("a", '{"note": '), tools, ["a"]) == ("a", "bad_args")
    assert first_call_ok(ModelAnswer(text="garbage"), tools, ["a"]) == (None, "no_call")
    read = MenuItem(name="read_file", description="R.", parameters={"type": "object", "properties": {
        "path": {"type": "string"}}, "required": ["path"]})
    assert first_call_ok(answer("read_file", '{"path": "x"}'), [*tools, read], ["a"]) == ("read_file", "working")


def test_first_picks_rows_count_each_verdict() -> None:
    reqs = [{"allowed": ["a"], "first_call": "a", "verdict": "pick"},
            {"allowed": ["a"], "first_call": "a", "verdict": "bad_args"},
            {"allowed": ["a"], "first_call": "read_file", "verdict": "working"},
            {"allowed": ["a"], "first_call": None, "verdict": "no_call"}]
    (row,) = first_picks_rows({"w": {"masked": reqs}})
    assert (row["pick"], row["working"], row["bad_args"], row["no_call"], row["not_allowed"]) == (1, 1, 1, 1, 0)
    assert row["valid_share"] == 0.5
    assert row["pick_valid_share"] == 0.5  # two calls to an Allowed pick, one with valid arguments


def test_ratios_are_fixed_over_the_other_arm() -> None:
    def s(arm: str, cached: int, prefilled: int, ttft: float) -> dict[str, Any]:
        return {"workflow": "w", "arm": arm, "cached_tokens": cached, "prefilled_tokens": prefilled,
                "ttft_p50_s": ttft}

    (row,) = ratios([s("fixed", 900, 100, 0.1), s("narrowed", 300, 700, 0.2), s("reordered", 0, 1000, 0.4)])
    assert row["cached fixed/narrowed"] == 3.0
    assert row["prefilled fixed/reordered"] == 0.1
    assert row["ttft_p50 fixed/reordered"] == 0.25
    assert row["cached fixed/reordered"] is None  # nothing cached in the other arm: no finite ratio


def test_reordered_never_repeats_an_order_while_new_ones_remain() -> None:
    from jr2ray.bench.replay import reorder

    now = _Now()
    tools = [MenuItem(name=f"t{k}", description=".", parameters={"type": "object", "properties": {}}) for k in range(7)]
    orders = []
    for _ in range(36):
        now.requests += 1
        got = reorder(tools, now)
        assert sorted(t.name for t in got) == [t.name for t in tools]  # the same tools, only the order moves
        orders.append(tuple(t.name for t in got))
    assert len(set(orders)) == 36
    two = _Now()
    pair = tools[:2]
    seq = []
    for _ in range(4):
        two.requests += 1
        seq.append(tuple(t.name for t in reorder(pair, two)))
    assert all(a != b for a, b in pairwise(seq))  # two tools: alternate, never the same order twice running
