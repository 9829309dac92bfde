"""The API's surface hardening, without Ray: the Host check, the security headers, strict JSON, 503 with
Retry-After when the Run does not answer, a JSON body for a bug, and listing summaries."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ray.exceptions import ActorUnavailableError, RayActorError

from serve.api import ApiConfig, build_app
from serve.api.schemas import InputSummary
from serve.api.strict_json import problem
from serve.auth import ensure_token

from .api_helpers import TEST_HOSTS


@pytest.fixture
def app_and_token(tmp_path: Path) -> tuple[Any, str]:
    token, _ = ensure_token(tmp_path)
    return build_app(ApiConfig(home=str(tmp_path), launcher="none", hosts=TEST_HOSTS)), token


@pytest.fixture
def client(app_and_token: tuple[Any, str]) -> TestClient:
    return TestClient(app_and_token[0])


# -- 10: Host header and security headers ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io", "", "localhost.evil"])
def test_a_host_the_api_does_not_answer_to_is_refused_400(client: TestClient, host: str) -> None:
    r = client.get("/healthz", headers={"host": host})
    assert r.status_code == 400 and "is not a name this API answers to" in r.json()["detail"]
    assert r.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "[::1]:8000", "LOCALHOST:1"])
def test_the_configured_names_are_answered_with_or_without_a_port(tmp_path: Path, host: str) -> None:
    c = TestClient(build_app(ApiConfig(home=str(tmp_path), launcher="none")))  # the default names only
    assert c.get("/healthz", headers={"host": host}).status_code == 200
    assert c.get("/healthz", headers={"host": "testserver"}).status_code == 400
    anyhost = TestClient(build_app(ApiConfig(home=str(tmp_path), launcher="none", hosts=["*"])))
    assert anyhost.get("/healthz", headers={"host": "whatever.example"}).status_code == 200


@pytest.mark.parametrize("path", ["/", "/healthz", "/docs", "/openapi.json", "/runs"])
def test_every_response_carries_the_security_headers(client: TestClient, path: str) -> None:
    r = client.get(path)  # /runs without a token: the 401 carries them too
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp
    script_src = re.search(r"script-src ([^;]*)", csp)
    assert script_src and "unsafe-inline" not in script_src.group(1) and "http" not in script_src.group(1)


def test_docs_allows_exactly_its_own_inline_script_by_hash(client: TestClient) -> None:
    r = client.get("/docs")
    inline = re.findall(r"<script>(.*?)</script>", r.text, re.DOTALL)
    assert inline, "the Swagger page starts from an inline script"
    for body in inline:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in r.headers["content-security-policy"]


# -- 1, 2: strict JSON ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "words"), [
    (b'{"input": {"changes": "\\ud800"}}', "lone surrogate"),
    (b'{"input": {"\\udc00": "x"}}', "lone surrogate"),
    (b'{"input": {"changes": "x", "n": NaN}}', "NaN is not a JSON number"),
    (b'{"input": {"n": Infinity}}', "Infinity is not a JSON number"),
    (b'{"input": {"n": -Infinity}}', "-Infinity is not a JSON number"),
    (b'{"input": {"n": 1e30}}', "outside +/-9007199254740991"),
    (b'{"input": {"n": 123456789012345678901234567890}}', "outside +/-9007199254740991"),
    (b'{"input": {"changes": "caf\xe9"}}', "not valid UTF-8"),
])
def test_a_body_that_is_not_standard_json_is_refused_400_before_any_route(
        app_and_token: tuple[Any, str], body: bytes, words: str) -> None:
    app, token = app_and_token
    r = TestClient(app).post("/workflows/notes/runs", content=body,
                             headers={"Authorization": f"Bearer {token}", "content-type": "application/json"})
    assert r.status_code == 400 and words in r.json()["detail"], r.text
    assert app.state.ctx._client is None  # refused before anything reached Ray or a journal


@pytest.mark.parametrize("ok", [b'{"a": 1.5, "b": -9007199254740991, "c": "\\ud83d\\ude00 caf\xc3\xa9"}',
                                b"not json at all", b""])
def test_standard_json_and_non_json_pass_the_strict_check(ok: bytes) -> None:
    assert problem(ok) is None


# -- 5: the Run not answering --------------------------------------------------------------------------------


class _Ref:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __await__(self) -> Any:
        raise self.exc
        yield


class _Actor:
    def __init__(self, exc: BaseException) -> None:
        self.cancel = self.status = type("M", (), {"remote": staticmethod(lambda *a: _Ref(exc))})()


@pytest.mark.parametrize("exc", [RayActorError(), ActorUnavailableError("restarting", None)])
def test_a_run_actor_that_does_not_answer_is_503_with_retry_after_in_json(
        app_and_token: tuple[Any, str], monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    app, token = app_and_token

    async def actor(run_id: str) -> _Actor:
        return _Actor(exc)

    monkeypatch.setattr(app.state.ctx, "actor", actor)
    r = TestClient(app).post("/runs/abc123/cancel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 503 and r.headers["content-type"] == "application/json"
    assert r.headers["retry-after"] == "2" and r.json()["retry_after"] == 2
    assert "not answering" in r.json()["detail"]


def test_a_bug_is_a_json_500_not_plain_text(app_and_token: tuple[Any, str], monkeypatch: pytest.MonkeyPatch) -> None:
    app, token = app_and_token

    async def actor(run_id: str) -> _Actor:
        raise KeyError("oops")

    monkeypatch.setattr(app.state.ctx, "actor", actor)
    r = TestClient(app, raise_server_exceptions=False).post("/runs/abc123/cancel",
                                                            headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 500 and r.json()["detail"].startswith("internal error (KeyError)")


# -- 3: listings carry summaries -----------------------------------------------------------------------------


def test_a_listing_summarises_an_input_and_never_carries_it() -> None:
    big = {"changes": "x", "extra": "y" * 1_000_000}
    s = InputSummary.of(big)
    assert s.bytes > 1_000_000 and s.keys == ["changes", "extra"]
    assert len(s.model_dump_json()) < 200
    assert InputSummary.of([1, 2]).keys == [] and InputSummary.of({str(i): i for i in range(50)}).keys[-1] == "19"


class _NeverAnswers:
    """An actor method stand-in whose call never comes back."""

    @staticmethod
    def remote(*a: Any) -> Any:
        import asyncio

        return asyncio.sleep(3600)


class _Silent:
    """A Run actor that never answers (Ray is restarting it)."""

    status = _NeverAnswers()


def test_a_run_that_does_not_answer_its_status_in_time_is_503_not_a_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, _ = ensure_token(tmp_path)
    app = build_app(ApiConfig(home=str(tmp_path), launcher="none", hosts=TEST_HOSTS, status_timeout_s=0.2))

    async def actor(run_id: str) -> _Silent:
        return _Silent()

    monkeypatch.setattr(app.state.ctx, "actor", actor)
    r = TestClient(app).get("/runs/abc123/events", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 503 and r.headers["retry-after"] == "2" and "no status within 0.2 s" in r.json()["detail"]


class _SlowRegistry:
    """A registry whose activation never answers: the started run's host is slow to come up."""

    activate = _NeverAnswers()


def test_a_started_run_whose_host_is_slow_to_answer_is_201_from_its_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start is journaled before it is answered: a host that does not answer its status in time makes the reply
    the journal's view of the run, not a 503 that would tell the caller a started run had failed."""
    from types import SimpleNamespace

    from jr2ray.run import admission
    from jr2ray.run.store import open_store

    token, _ = ensure_token(tmp_path)
    app = build_app(ApiConfig(home=str(tmp_path), launcher="none", hosts=TEST_HOSTS, status_timeout_s=0.2))
    store = open_store(str(tmp_path / "runs"))
    started: list[str] = []

    class _Client:
        virtual = True

        def __init__(self) -> None:
            self.store = store

        def submit(self, name: str, data: Any, run_id: str | None = None, env: Any = None) -> Any:
            rid = f"slow{len(started):08d}"
            admission.enqueue(store, rid, {"workflow": name, "input": data, "env": {}, "launcher": None})
            started.append(rid)
            return SimpleNamespace(id=rid, admitted=True)

        def registry(self) -> Any:
            return _SlowRegistry()

    monkeypatch.setattr(app.state.ctx, "client", lambda: _Client())
    r = TestClient(app).post("/workflows/notes/runs", json={"input": {"changes": "fix: crash"}},
                             headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    assert r.json()["id"] == started[0] and r.json()["status"] == "queued"
    assert r.headers["location"] == f"/runs/{started[0]}"
