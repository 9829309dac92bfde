"""The real vLLM CPU build behind Ray Serve LLM, with the tiny model (S1, H10, H11, S2's cache arithmetic).

Each test puts a fresh nonce in its first prompt block, so no other test's cache entries can serve it and the expected
hit is exactly what this test sent before.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from jr2ray.harness.masking import masking_extra_body, select_tools
from serve.llm import SESSION_HEADER, common_prefix_len, read_prefix_cache_counters, reusable_max

if TYPE_CHECKING:  # the fixture's type; conftest is not importable as a package (tests/vllm must not shadow vllm)
    from conftest import TinyServer

pytestmark = pytest.mark.vllm

BLOCK = 32

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "ask",
            "description": "Ask the editor one question. Use it when the changes are unclear.",
            "parameters": {
                "properties": {
                    "question": {"description": "One question for the editor.", "title": "Question", "type": "string"}
                },
                "required": ["question"],
                "title": "AskInput",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "done",
            "description": "Publish the notes. Ends the writer's turn.",
            "parameters": {
                "properties": {"notes": {"description": "The finished notes.", "title": "Notes", "type": "string"}},
                "required": ["notes"],
                "title": "DoneInput",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "reply",
            "description": "The editor's reply to a question.",
            "parameters": {
                "properties": {"text": {"title": "Text", "type": "string"}},
                "required": ["text"],
                "title": "ReplyInput",
                "type": "object",
            },
        },
    },
]

USER = (
    "Write the release notes for these changes:\n- fix a bug in the parser\n- add a test for the gate\n"
    "- update the docs\n\n<jr2-turn>\nAllowed now: ask, done.\n</jr2-turn>"
)


def _system(nonce: str) -> dict[str, str]:
    return {"role": "system", "content": f"Session {nonce}. You write release notes. Keep them short and clear."}


def _body(server: TinyServer, messages: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bytes:
    """The request bytes. `tools` comes right after `model`, so equal tools blocks are an equal byte prefix."""
    body: dict[str, Any] = {"model": server.model, "tools": TOOLS, "messages": messages, "max_tokens": 8, "seed": 7}
    body.update(extra or {})
    return json.dumps(body, ensure_ascii=False).encode()


def _post(server: TinyServer, raw: bytes, session: str) -> dict[str, Any]:
    resp = httpx.post(
        f"{server.base_url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json", SESSION_HEADER: session},
        timeout=120.0,
        trust_env=False,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def _render(server: TinyServer, messages: list[dict[str, Any]]) -> list[int]:
    out = server.tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def _cached(resp: dict[str, Any]) -> int:
    details = resp["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def test_app_lists_the_tiny_model(tiny_server: TinyServer) -> None:
    resp = httpx.get(f"{tiny_server.base_url}/models", timeout=10.0, trust_env=False)
    assert resp.status_code == 200
    assert tiny_server.model in {m["id"] for m in resp.json()["data"]}


def test_repeat_reuses_all_full_blocks(tiny_server: TinyServer) -> None:
    """(b) The same prompt twice: the second reuses floor((shared - 1) / 32) * 32 tokens."""
    nonce = uuid.uuid4().hex[:12]
    messages = [_system(nonce), {"role": "user", "content": USER}]
    ids = _render(tiny_server, messages)
    first = _post(tiny_server, _body(tiny_server, messages), nonce)
    second = _post(tiny_server, _body(tiny_server, messages), nonce)
    assert first["usage"]["prompt_tokens"] == len(ids) == second["usage"]["prompt_tokens"]  # we render as vLLM does
    assert _cached(first) == 0
    shared = common_prefix_len(ids, ids)
    assert _cached(second) == ((shared - 1) // BLOCK) * BLOCK == reusable_max(ids, ids, BLOCK)
    assert _cached(second) > 0


def test_next_turn_reuses_the_conversation_prefix(tiny_server: TinyServer) -> None:
    """(b, c) A Harness-like next turn: the tools block bytes are identical and the shared prefix is served from cache."""
    nonce = uuid.uuid4().hex[:12]
    turn1 = [_system(nonce), {"role": "user", "content": USER}]
    turn2 = turn1 + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "ask", "arguments": '{"question": "How long?"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "The editor replied: short.\n\nAllowed now: ask, done."},
    ]
    raw1, raw2 = _body(tiny_server, turn1), _body(tiny_server, turn2)

    # (c) the tools block is the same bytes on the wire and in the rendered prompt.
    tools_end = raw1.index(b'], "messages"') + 1
    assert raw1[:tools_end] == raw2[:tools_end]
    ids1, ids2 = _render(tiny_server, turn1), _render(tiny_server, turn2)
    tok = tiny_server.tokenizer
    text1, text2 = tok.decode(ids1), tok.decode(ids2)
    def tools_block(text: str) -> str:
        start = text.index("\n<tools>\n")
        return text[start : text.index("\n</tools>\n", start) + len("\n</tools>\n")]

    block1 = tools_block(text1)
    assert block1 == tools_block(text2)
    assert text2.startswith(text1[: text1.index(block1) + len(block1)])
    for tool in TOOLS:
        assert json.dumps(tool, ensure_ascii=False) in block1

    r1 = _post(tiny_server, raw1, nonce)
    r2 = _post(tiny_server, raw2, nonce)
    assert (r1["usage"]["prompt_tokens"], r2["usage"]["prompt_tokens"]) == (len(ids1), len(ids2))
    expected = reusable_max(ids1, ids2, BLOCK)
    assert _cached(r2) == expected
    shared = common_prefix_len(ids1, ids2)
    if shared % BLOCK:  # off a block edge S2's formula is the same number
        assert expected == ((shared - 1) // BLOCK) * BLOCK
    system_turn_tokens = len(tok.encode(text1[: text1.index("<|im_end|>") + len("<|im_end|>")]))
    assert _cached(r2) >= (system_turn_tokens // BLOCK) * BLOCK  # the whole Menu came from cache


@pytest.mark.parametrize("allowed", [["ask", "done"], ["done"]])
def test_masking_returns_a_parsed_allowed_call_and_keeps_the_cache(tiny_server: TinyServer, allowed: list[str]) -> None:
    """(a) With the masking regex the random model's output is a real `tool_calls` entry for an Allowed pick."""
    nonce = uuid.uuid4().hex[:12]
    messages = [_system(nonce), {"role": "user", "content": USER}]
    ids = _render(tiny_server, messages)
    extra = masking_extra_body(select_tools(TOOLS, allowed)) | {"max_tokens": 160}
    responses = [_post(tiny_server, _body(tiny_server, messages, extra), nonce) for _ in range(2)]
    for resp in responses:
        choice = resp["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        assert len(calls) == 1, choice
        fn = calls[0]["function"]
        assert fn["name"] in allowed
        args = json.loads(fn["arguments"])
        (schema,) = [t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == fn["name"]]
        assert set(schema["required"]) <= set(args)
        assert all(isinstance(args[k], str) for k in schema["required"])
        assert resp["usage"]["prompt_tokens"] == len(ids)  # masking leaves the prompt alone
    assert _cached(responses[0]) == 0
    assert _cached(responses[1]) == reusable_max(ids, ids, BLOCK) > 0


def test_prefix_cache_counters_are_readable(tiny_server: TinyServer) -> None:
    """vLLM's own counters reach Ray's metrics export (they lag requests by a few seconds)."""
    nonce = uuid.uuid4().hex[:12]
    messages = [_system(nonce), {"role": "user", "content": USER}]
    before = read_prefix_cache_counters(tiny_server.model)
    base_hits = before.hits if before else 0.0
    base_queries = before.queries if before else 0.0
    first = _post(tiny_server, _body(tiny_server, messages), nonce)
    second = _post(tiny_server, _body(tiny_server, messages), nonce)
    want_queries = first["usage"]["prompt_tokens"] + second["usage"]["prompt_tokens"]
    deadline = time.monotonic() + 45.0
    counters = None
    while time.monotonic() < deadline:
        counters = read_prefix_cache_counters(tiny_server.model)
        if counters and counters.queries - base_queries >= want_queries and counters.hits - base_hits >= _cached(second):
            break
        time.sleep(2.0)
    assert counters is not None, "no vllm prefix-cache counters in Ray's metrics export"
    assert counters.queries - base_queries >= want_queries
    assert counters.hits - base_hits >= _cached(second) > 0
