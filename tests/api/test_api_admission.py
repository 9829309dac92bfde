"""`GET /admission`: whether Turn admission is on for the runs this API starts, the LLM app it names, and that app's
KV budget actor as it stands now (null when there is none), read from a real budget actor on the tier's local Ray."""

from __future__ import annotations

import uuid

import httpx
import pytest
from fastapi import FastAPI

from serve.api import ApiConfig, build_app

pytestmark = pytest.mark.ray


def _app(config: ApiConfig, **update: object) -> FastAPI:
    return build_app(config.model_copy(update=update))


def _client(app: FastAPI, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://jr2ray.test", headers=headers,
                             timeout=60)


def _name() -> str:
    """An LLM app name no other test's budget actor has (the tier shares one Ray)."""
    return f"adm-{uuid.uuid4().hex[:8]}"


async def test_off_with_no_budget_says_so(api_config: ApiConfig, ray_cluster: bool, token: str) -> None:
    app_name = _name()
    async with _client(_app(api_config, turn_admission_app=app_name), token) as c:
        r = await c.get("/admission")
    assert r.status_code == 200, r.text
    assert r.json() == {"on": False, "app": app_name, "budget": None}


async def test_it_needs_the_instance_token(api_config: ApiConfig, ray_cluster: bool) -> None:
    async with _client(_app(api_config), None) as c:
        r = await c.get("/admission")
    assert r.status_code == 401 and "token" in r.json()["detail"]


async def test_on_reports_the_budget_actor_as_it_stands(api_config: ApiConfig, ray_cluster: bool,
                                                        token: str) -> None:
    import ray

    from jr2ray.harness.budget_actor import budget_stats, drop_budget, ensure_budget
    from jr2ray.run.actor import NAMESPACE

    app_name = _name()
    async with _client(_app(api_config, turn_admission=True, turn_admission_app=app_name), token) as c:
        before = (await c.get("/admission")).json()
        assert before == {"on": True, "app": app_name, "budget": None}  # on, but nothing deployed the app yet
        handle = ensure_budget(app_name, 1280, namespace=NAMESPACE)
        try:
            ray.get(handle.admit.remote("conversation-a", 300))
            held = (await c.get("/admission")).json()
            assert held["on"] is True and held["app"] == app_name
            budget = held["budget"]
            assert budget == budget_stats(handle).model_dump()  # the actor's own figures, not a copy of them
            assert (budget["capacity_tokens"], budget["used_tokens"], budget["held"]) == (
                1280, 300, {"conversation-a": 300})
            ray.get(handle.release.remote("conversation-a"))
            released = (await c.get("/admission")).json()["budget"]
            assert released["used_tokens"] == 0 and released["held"] == {}  # read again, not remembered
            assert released["high_water_tokens"] == 300
        finally:
            drop_budget(app_name, NAMESPACE)
        gone = (await c.get("/admission")).json()
    assert gone == {"on": True, "app": app_name, "budget": None}
