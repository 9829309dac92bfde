"""`jr2ray up` without --llm: a Harness whose model base URL is the API's own port (the default, 8000/v1) gets a
404 that names the missing model endpoint, and that sentence is its provider error (the Agent's fault reason)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from jr2ray.harness.errors import ProviderError
from jr2ray.harness.providers.openai_compat import OpenAICompatProvider
from jr2ray.harness.transcript import ModelRequest
from serve.api import ApiConfig, build_app
from serve.auth import ensure_token

from .api_helpers import TEST_HOSTS


@pytest.fixture
def app(tmp_path: Path):  # noqa: ANN201
    ensure_token(tmp_path)
    return build_app(ApiConfig(home=str(tmp_path), launcher="none", hosts=TEST_HOSTS))


def test_a_model_call_to_the_api_is_a_404_naming_the_missing_endpoint(app) -> None:  # noqa: ANN001
    c = TestClient(app)
    r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": []},
               headers={"Authorization": "Bearer none"})
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    detail = r.json()["detail"]
    assert "no model is served at http://testserver/v1/chat/completions" in detail
    assert "--llm cpu" in detail and "JR2RAY_LOCAL_BASE_URL" in detail
    assert c.get("/v1/models").status_code == 404  # no token needed either way: the path holds no run data
    assert c.get("/runs").status_code == 401  # and nothing else became public
    assert "/v1/{rest}" not in c.get("/openapi.json").json()["paths"]


async def test_the_harness_provider_error_names_the_missing_endpoint(app) -> None:  # noqa: ANN001
    from openai import AsyncOpenAI

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000")
    client = AsyncOpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none", http_client=http, max_retries=0)
    provider = OpenAICompatProvider(client=client)
    with pytest.raises(ProviderError) as err:
        await provider.complete(ModelRequest(model="tiny", system="s", messages=[{"role": "user", "content": "hi"}],
                                             tools=[]))
    assert err.value.status_code == 404
    assert "no model is served at http://127.0.0.1:8000/v1/chat/completions" in str(err.value)
    assert "jr2ray up --llm cpu" in str(err.value)
    await http.aclose()
