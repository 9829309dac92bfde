"""Session affinity on 2 CPU replicas: one conversation's requests land where its prefix is cached.

The LLM app routes with serve.llm.router (Ray Serve's ConsistentHashRouter, plus Turn admission's placements) on the
`x-session-id` header (serve/config/*.yaml). Each replica has its own vLLM prefix cache, so a repeat of a prompt hits
only on the replica that served it first: with the same session key every repeat must hit, and with a fresh key per
request some repeats must land elsewhere and miss (that half proves the measurement can fail).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from serve.llm import SESSION_HEADER

if TYPE_CHECKING:
    from conftest import TinyServer

pytestmark = pytest.mark.vllm

SESSIONS = 12


@pytest.fixture(scope="module")
def two_replicas(tiny_server: TinyServer) -> str:
    """The tier's app (conftest.py), which runs 2 replicas for this check."""
    from serve.llm import llm_application, running_replicas

    if os.environ.get("JR2RAY_TEST_LLM_URL"):  # a developer's own app (never in CI): its replicas are not ours to count
        pytest.skip("the affinity check needs the tier's own 2-replica app; JR2RAY_TEST_LLM_URL names another")
    assert running_replicas(llm_application("cpu").name) == 2
    return tiny_server.base_url


def _ask(url: str, model: str, nonce: str, session: str) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 4, "seed": 1,
            "messages": [{"role": "system", "content": f"Conversation {nonce}. " + "Keep the notes short. " * 30},
                         {"role": "user", "content": "Write the notes."}]}
    resp = httpx.post(f"{url}/chat/completions", content=json.dumps(body), timeout=120.0, trust_env=False,
                      headers={"content-type": "application/json", SESSION_HEADER: session})
    assert resp.status_code == 200, resp.text
    return resp.json()["usage"]


def _cached(usage: dict[str, Any]) -> int:
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def test_same_session_key_always_finds_its_prefix(two_replicas: str, tiny_server: TinyServer) -> None:
    hits = []
    for _ in range(SESSIONS):
        nonce = uuid.uuid4().hex
        first = _ask(two_replicas, tiny_server.model, nonce, session=nonce)
        second = _ask(two_replicas, tiny_server.model, nonce, session=nonce)
        assert _cached(first) == 0
        hits.append(_cached(second) == ((second["prompt_tokens"] - 1) // 32) * 32)
    assert all(hits), hits


def test_fresh_session_keys_scatter_and_miss(two_replicas: str, tiny_server: TinyServer) -> None:
    misses = 0
    for _ in range(SESSIONS):
        nonce = uuid.uuid4().hex
        _ask(two_replicas, tiny_server.model, nonce, session=uuid.uuid4().hex)
        second = _ask(two_replicas, tiny_server.model, nonce, session=uuid.uuid4().hex)
        misses += _cached(second) == 0
    # Two independent keys land on different replicas half the time; all 12 on one replica is p = 2**-12.
    assert misses >= 1


def test_a_session_placed_by_turn_admission_goes_to_its_replica_whatever_its_key(two_replicas: str,
                                                                              tiny_server: TinyServer) -> None:
    """The profiles' router (serve.llm.router) sends `<key>#replica=<k>` to the k-th replica: fresh keys placed on
    one replica always find each other's prefix, and the same prompt placed on the other replica never does."""
    from jr2ray.harness.replicas import pinned_session

    for k in (0, 1, 0, 1, 0, 1):
        nonce = uuid.uuid4().hex
        first = _ask(two_replicas, tiny_server.model, nonce, session=pinned_session(uuid.uuid4().hex, k))
        same = _ask(two_replicas, tiny_server.model, nonce, session=pinned_session(uuid.uuid4().hex, k))
        other = _ask(two_replicas, tiny_server.model, nonce, session=pinned_session(uuid.uuid4().hex, 1 - k))
        assert _cached(first) == 0
        assert _cached(same) == ((same["prompt_tokens"] - 1) // 32) * 32, (k, same)
        assert _cached(other) == 0, (k, other)
