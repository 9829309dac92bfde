"""Replay one scripted trajectory through the real Harness and Run, in one arm, measuring each request on vLLM.

The scripted assistant is a `Provider`: the Harness renders each request exactly as it would for a model (system
prompt, the arm's tools block, the transcript so far), the assistant sends those bytes to vLLM as a `max_tokens: 1`
request (the measurement: prompt tokens, cached tokens, time to first token), and then answers with the plan's next
calls. So every arm carries the same conversation, and only the bytes the arm changes differ.

Arms (what the tools block carries, and what decoding is constrained to):
- fixed:          the whole Menu (plus Working tools), every request (jr2ray);
- narrowed:       only the Allowed picks the model last read, plus the Working tools;
- reordered:      the whole Menu, in a new order on each request;
- fixed+masking:  the whole Menu, decoding constrained to the Allowed picks (H11).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from jr2ray.bench.scripts import (
    Plan,
    drive_gates,
    load_machine,
    seed_workspace,
)
from jr2ray.harness import Limits, ProviderConfig
from jr2ray.harness.errors import ProviderError
from jr2ray.harness.launcher import LocalTurnLauncher
from jr2ray.harness.masking import Bounds, masking_extra_body
from jr2ray.harness.presenters import openai_messages, openai_tools
from jr2ray.harness.providers import (
    OpenAICompatProvider,
    ProviderKind,
    ProviderRegistry,
)
from jr2ray.harness.transcript import ModelAnswer, ModelRequest, ToolCall
from jr2ray.harness.turn import ToolsPolicy
from jr2ray.menu import texts
from jr2ray.menu.models import MenuItem
from jr2ray.menu.render import tools_bytes
from jr2ray.run import LocalRun
from jr2ray.settings import Settings

ARMS = ("fixed", "narrowed", "reordered", "fixed+masking")
WORKING = frozenset(item.name for item in texts.working_tools("write"))

TINY_BOUNDS = Bounds(max_string=48, max_items=4, max_digits=9)
"""The tiny model's length caps for masked sampling (first picks): a random-weight model never closes an unbounded
string. This cap is the tiny profile's, stated here, and is not the Harness default."""


class SentRequest(BaseModel):
    """One request of a pass: what the Harness sent (fingerprints) and, when measured, what vLLM said."""

    i: int
    messages_sha: str = Field(description="sha256 of the messages array (system + transcript), tools left out.")
    tools_sha: str
    tools: list[str]
    allowed: list[str]
    masked: list[str] | None
    off_tools: list[str] = Field(default_factory=list, description="Scripted calls the arm's tools did not offer.")
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    first_call: str | None = None
    first_call_args: str | None = Field(default=None, description="The sampled call's arguments (first 300 chars).")
    first_call_verdict: str | None = None


def messages_fingerprint(request: ModelRequest) -> str:
    raw = json.dumps(openai_messages(request.system, request.messages), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass
class _Now:
    """What the arm's policy saw for the request being built (the provider reads it right after)."""

    allowed: list[str] = field(default_factory=list)
    requests: int = 0
    orders: set[tuple[str, ...]] = field(default_factory=set)
    last_order: tuple[str, ...] = ()


def reorder(tools: list[MenuItem], now: _Now) -> list[MenuItem]:
    """A new order of the same tools for each request: a seeded shuffle that differs from the previous request's
    and, while unsent orders remain, from every order this arm sent, so no request reuses an earlier tools block by
    chance (with two tools, request 3 must repeat request 1's order)."""
    total = math.factorial(len(tools))
    order, key = list(tools), tuple(t.name for t in tools)
    for attempt in range(256):
        order = list(tools)
        random.Random(f"reorder:{now.requests}:{attempt}").shuffle(order)
        key = tuple(t.name for t in order)
        if key != now.last_order and (key not in now.orders or len(now.orders) >= total):
            break
    if key == now.last_order:
        order = order[1:] + order[:1]
        key = tuple(t.name for t in order)
    now.orders.add(key)
    now.last_order = key
    return order


def arm_policy(arm: str, now: _Now) -> ToolsPolicy:
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r} (have {', '.join(ARMS)})")

    def present(tools: list[MenuItem], allowed: list[str], step: int) -> tuple[list[MenuItem], list[str] | None]:
        now.allowed = list(allowed)
        now.requests += 1
        working = [t.name for t in tools if t.name in WORKING]
        if arm == "narrowed":
            sent = [t for t in tools if t.name in allowed or t.name in WORKING] or tools
            return sent, None
        if arm == "reordered":
            return reorder(tools, now) if len(tools) > 1 else tools, None
        if arm == "fixed+masking":
            names = [n for n in allowed if any(t.name == n for t in tools)] + working
            return tools, names or None
        return tools, None

    return present


FirstCall = Literal["pick", "working", "no_call", "not_allowed", "bad_args"]
"""How a sampled answer's first tool call fares: an Allowed pick or a Working tool with valid arguments, or why not."""


def first_call_ok(answer: ModelAnswer, tools: list[MenuItem], allowed: list[str]) -> tuple[str | None, FirstCall]:
    """Judge the answer's first tool call: is it an Allowed pick (or a Working tool) whose arguments fit its schema?"""
    import jsonschema

    if not answer.tool_calls:
        return None, "no_call"
    call = answer.tool_calls[0]
    spec = next((t for t in tools if t.name == call.name), None)
    if spec is None or (call.name not in allowed and call.name not in WORKING):
        return call.name, "not_allowed"
    try:
        args = json.loads(call.arguments or "{}")
        jsonschema.validate(args, spec.parameters)
    except (ValueError, jsonschema.ValidationError):
        return call.name, "bad_args"
    return call.name, "working" if call.name in WORKING else "pick"


class _BoundedSampler(OpenAICompatProvider):
    """Real sampling for first picks; masked requests use the tiny profile's caps (`TINY_BOUNDS`)."""

    def build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs = super().build_kwargs(request)
        if request.masked_tools:
            wanted = set(request.masked_tools)
            allowed = [t for t in openai_tools(request.tools) if t["function"]["name"] in wanted]
            kwargs.setdefault("extra_body", {}).update(masking_extra_body(allowed, TINY_BOUNDS))
        return kwargs


class ScriptedAssistant:
    """A Provider that measures the Harness's request on vLLM (optional) and answers with the plan's next calls."""

    kind: ProviderKind = "local"

    def __init__(self, plan: Plan, now: _Now, measure: OpenAICompatProvider | None = None,
                 sample: tuple[OpenAICompatProvider, bool] | None = None) -> None:
        self.plan = plan
        self.now = now
        self.measure = measure
        self.sample = sample
        self.log: list[SentRequest] = []

    async def complete(self, request: ModelRequest) -> ModelAnswer:
        i = len(self.log)
        if i >= len(self.plan.steps):
            raise ProviderError(f"the script of {self.plan.workflow} has no answer for request {i + 1}",
                                provider="local")
        step = self.plan.steps[i]
        sent = [t.name for t in request.tools]
        entry = SentRequest(i=i + 1, messages_sha=messages_fingerprint(request),
                            tools_sha=hashlib.sha256(tools_bytes(request.tools)).hexdigest(), tools=sent,
                            allowed=list(self.now.allowed), masked=request.masked_tools,
                            off_tools=[c.name for c in step if c.name not in sent])
        if self.measure is not None:
            started = time.monotonic()
            measured = await self.measure.complete(request)
            entry.ttft_s = time.monotonic() - started  # one output token: the response is the first token
            entry.prompt_tokens, entry.cached_tokens = measured.prompt_tokens, measured.cached_tokens or 0
            entry.prompt_token_ids = measured.prompt_token_ids
            entry.completion_token_ids = measured.completion_token_ids
        if self.sample is not None:
            sampler, masked = self.sample
            names = [*entry.allowed, *(n for n in sent if n in WORKING)]
            probe = request.model_copy(update={"masked_tools": names if masked else None})
            got = await sampler.complete(probe)
            entry.first_call, entry.first_call_verdict = first_call_ok(got, request.tools, entry.allowed)
            entry.first_call_args = got.tool_calls[0].arguments[:300] if got.tool_calls else (got.text or "")[:300]
        self.log.append(entry)
        calls = [ToolCall(id=f"call_{i + 1}_{j + 1}", name=c.name, arguments=c.arguments()) for j, c in enumerate(step)]
        return ModelAnswer(tool_calls=calls, finish_reason="tool_calls", prompt_tokens=entry.prompt_tokens,
                           cached_tokens=entry.cached_tokens, prompt_token_ids=entry.prompt_token_ids,
                           completion_token_ids=entry.completion_token_ids)


class PassResult(BaseModel):
    """One pass of one plan: the Run's end, every request the Harness sent, and the final transcript."""

    workflow: str
    arm: str
    status: str
    requests: list[SentRequest]
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    wall_s: float
    salt: str


def measuring_provider(base_url: str, salt: str) -> OpenAICompatProvider:
    """`max_tokens: 1`, greedy, the server's token ids back, and the arm's own cache salt (arms never share blocks)."""
    return OpenAICompatProvider(base_url, max_tokens=1, temperature=0.0, return_token_ids=True, cache_salt=salt,
                                max_retries=0, timeout_s=300)


def sampling_provider(base_url: str, salt: str, max_tokens: int = 200) -> OpenAICompatProvider:
    return _BoundedSampler(base_url, max_tokens=max_tokens, temperature=1.0, cache_salt=salt, max_retries=0,
                           timeout_s=300)


async def run_pass(plan: Plan, arm: str, *, settings: Settings, base_url: str | None = None,
                   first_picks: bool | None = None, timeout_s: float = 600.0) -> PassResult:
    """Run the plan once in `arm`, with the caller's `settings` (its home holds the run's workspace). With
    `base_url`, measure every request (or, with `first_picks` set, sample it with masking on or off instead);
    without, only record what the Harness sent (the recording pass)."""
    now = _Now()
    salt = f"{plan.profile}:{plan.workflow}:{arm}:{uuid.uuid4().hex[:8]}"
    measure = sample = None
    if base_url is not None and first_picks is None:
        measure = measuring_provider(base_url, salt)
    elif base_url is not None and first_picks is not None:
        sample = (sampling_provider(base_url, salt), first_picks)
    assistant = ScriptedAssistant(plan, now, measure=measure, sample=sample)
    registry = ProviderRegistry(ProviderConfig(local_base_url=base_url or "http://127.0.0.1:9/v1"),
                                providers={"local": assistant})
    launcher = LocalTurnLauncher(limits=Limits(rerolls=0), providers=registry, tools_policy=arm_policy(arm, now))
    run_id = f"bench-{salt.replace(':', '-').replace('+', '-')}"
    seed_workspace(settings.home_dir(), run_id, plan.files)
    run = LocalRun(load_machine(plan.workflow), plan.door, run_id=run_id, launcher=launcher, settings=settings)
    stop = asyncio.Event()
    people = asyncio.create_task(drive_gates(run, stop))
    t0 = time.monotonic()
    try:
        status = await run.wait(timeout_s)
    except TimeoutError:
        status = run.cancel()
    finally:
        stop.set()
        await people
    await launcher.settle(30)
    transcript = [m for conv in launcher.conversations.values() if conv.system is not None
                  for m in openai_messages(conv.system, conv.messages)]
    return PassResult(workflow=plan.workflow, arm=arm, status=status.status, requests=assistant.log,
                      transcript=transcript, wall_s=time.monotonic() - t0, salt=salt)


def same_requests(reference: PassResult, other: PassResult) -> list[str]:
    """Problems when `other` did not send the recording's requests: count, and each request's messages."""
    problems: list[str] = []
    a, b = reference.requests, other.requests
    if len(a) != len(b):
        problems.append(f"{other.workflow}: {other.arm} arm sent {len(b)} requests, the recording {len(a)}")
    for x, y in zip(a, b, strict=False):  # a length mismatch is reported above; compare the common part
        if x.messages_sha != y.messages_sha:
            problems.append(f"{other.workflow}: {other.arm} arm request {y.i} carries other messages than the "
                            f"recording's (the conversations diverged)")
            break
    off = [(r.i, r.off_tools) for r in b if r.off_tools]
    if off:
        problems.append(f"{other.workflow}: {other.arm} arm: the script called tools the arm did not send: {off[:3]}")
    if other.status != "done":
        problems.append(f"{other.workflow}: {other.arm} arm ended {other.status!r}, not 'done'")
    return problems
