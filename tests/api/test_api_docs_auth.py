"""Routes, OpenAPI and auth that need no Ray: every refusal here happens before a run could be reached.

These apps get no Ray at all; a request that slipped past auth to a run route would try to start one and fail the
test by timing out or erroring, never by passing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serve.api import ApiConfig, build_app
from serve.auth import authenticate, ensure_token, harness_token, read_token, token_path

from .api_helpers import TEST_HOSTS

# The routes the API promises, as (method, OpenAPI path).
PROMISED_ROUTES = [
    ("get", "/healthz"),
    ("get", "/workflows"),
    ("get", "/workflows/{name}"),
    ("post", "/workflows/{name}/runs"),
    ("get", "/runs"),
    ("get", "/runs/{run_id}"),
    ("post", "/runs/{run_id}/gates/{gate}/events"),
    ("get", "/agents/{iid}/surface"),
    ("post", "/agents/{iid}/picks"),
    ("post", "/runs/{run_id}/cancel"),
    ("get", "/runs/{run_id}/events"),
    ("get", "/runs/{run_id}/timeline"),
    ("get", "/admission"),
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def tok(home: Path) -> str:
    return ensure_token(home)[0]


@pytest.fixture
def client(home: Path, tok: str) -> Iterator[TestClient]:
    with TestClient(build_app(ApiConfig(home=str(home), launcher="none", hosts=TEST_HOSTS))) as c:
        yield c


def _ref(schema: dict[str, Any]) -> str:
    """The component name a (possibly array-wrapped) schema points at."""
    if "items" in schema:
        schema = schema["items"]
    return schema["$ref"].rsplit("/", 1)[-1]


def _concrete(path: str) -> str:
    return (path.replace("{name}", "notes").replace("{run_id}", "abc123").replace("{gate}", "notes.writing.asking")
            .replace("{iid}", "abc123.t1"))


def _protected(schema: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m, p) for p, ops in schema["paths"].items() for m in ops if p != "/healthz"]


# ---- OpenAPI --------------------------------------------------------------------------------------------------
def test_openapi_lists_every_spec_route_with_its_models(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    for method, path in PROMISED_ROUTES:
        assert path in paths and method in paths[path], (method, path)
        assert paths[path][method].get("summary") or paths[path][method].get("description"), (method, path)

    def body(method: str, path: str) -> str:
        return _ref(paths[path][method]["requestBody"]["content"]["application/json"]["schema"])

    def out(method: str, path: str, code: str = "200") -> str:
        return _ref(paths[path][method]["responses"][code]["content"]["application/json"]["schema"])

    assert body("post", "/workflows/{name}/runs") == "StartRun"
    assert body("post", "/runs/{run_id}/gates/{gate}/events") == "GateEvent"
    assert body("post", "/agents/{iid}/picks") == "Pick"
    assert out("get", "/healthz") == "Health"
    assert out("get", "/workflows") == "WorkflowSummary"
    assert out("get", "/workflows/{name}") == "WorkflowDetail"
    assert out("post", "/workflows/{name}/runs", "201") == "RunView"
    assert out("get", "/runs") == "RunSummary"
    assert out("get", "/runs/{run_id}") == "RunView"
    assert out("post", "/runs/{run_id}/gates/{gate}/events") == "GateEventResult"
    assert out("post", "/runs/{run_id}/gates/{gate}/events", "409") == "ConflictBody"
    assert out("get", "/agents/{iid}/surface") == "Surface"
    assert out("post", "/agents/{iid}/picks") == "Receipt"
    assert out("post", "/runs/{run_id}/cancel") == "RunView"
    assert out("get", "/admission") == "AdmissionView"
    assert "text/event-stream" in paths["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    comps = schema["components"]["schemas"]
    assert comps["ConflictBody"]["required"] == ["detail", "accepts_now"]
    assert {"menu", "allowed"} <= set(comps["Surface"]["properties"])
    assert {"delivered", "moved", "turn_complete", "allowed", "answer", "refused", "delivery_id"} <= set(
        comps["Receipt"]["properties"])
    assert {"accepts", "accepts_now"} <= set(comps["GateView"]["properties"])
    # Request bodies refuse unknown keys (a stray `sender` among them).
    for name in ("StartRun", "GateEvent", "Pick"):
        assert comps[name]["additionalProperties"] is False, name
    # The Bearer scheme is declared; every route but /healthz requires it, and 401/403/413 are documented.
    assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert schema["security"] == [{"bearer": []}]
    assert paths["/healthz"]["get"]["security"] == []
    for method, path in _protected(schema):
        assert "security" not in paths[path][method], (method, path)
        assert {"401", "403"} <= set(paths[path][method]["responses"]), (method, path)


def test_docs_page_serves_swagger_for_the_schema(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "swagger" in r.text.lower() and "/openapi.json" in r.text


def test_healthz_needs_no_token(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True, "version": "0.1.0"}


def test_console_page_and_static_assets_need_no_token(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for asset in ("/console/app.js", "/console/runlist.js", "/console/app.css"):
        r = client.get(asset)
        assert r.status_code == 200, asset
    # Only reads are public: a write to the Console's paths still needs the token.
    assert client.post("/console/app.js").status_code == 401


# ---- 401 ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic {tok}", "Bearer", "{tok}", "bearer  "])
def test_every_route_but_healthz_is_401_without_a_valid_token(client: TestClient, tok: str,
                                                                header: str | None) -> None:
    schema = client.get("/openapi.json").json()
    protected = _protected(schema)
    assert len(protected) >= len(PROMISED_ROUTES) - 1
    headers = {"Authorization": header.format(tok=tok)} if header is not None else {}
    for method, path in protected:
        r = client.request(method.upper(), _concrete(path), headers=headers, json={"input": {}})
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert "token" in r.json()["detail"]


def test_the_token_is_case_sensitive_and_whole(client: TestClient, tok: str) -> None:
    for bad in (tok.upper() if tok.upper() != tok else tok.lower(), tok[:-1], tok + "x", f"{tok} {tok}"):
        assert client.get("/workflows", headers={"Authorization": f"Bearer {bad}"}).status_code == 401
    r = client.get("/workflows", headers={"Authorization": f"bearer {tok}"})  # the scheme is case-insensitive
    assert r.status_code == 200 and {w["name"] for w in r.json()} >= {"notes", "deploy"}


def test_forged_or_foreign_harness_tokens_are_401(client: TestClient, tok: str) -> None:
    own = harness_token(tok, "abc123.t1")
    forged = own[:-4] + ("0000" if not own.endswith("0000") else "1111")
    foreign = harness_token("another-instance-token", "abc123.t1")
    swapped = own.replace("abc123.t1", "abc123.t2")  # a valid MAC for t1 does not open t2
    for bad in (forged, foreign, swapped):
        r = client.get("/agents/abc123.t2/surface", headers={"Authorization": f"Bearer {bad}"})
        assert r.status_code == 401, bad


# ---- the instance token file -------------------------------------------------------------------------------------
def test_instance_token_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    assert read_token(home) is None
    tok, created = ensure_token(home)
    assert created and len(tok) >= 32
    mode = stat.S_IMODE(os.stat(token_path(home)).st_mode)
    assert mode == 0o600
    again, created_again = ensure_token(home)
    assert again == tok and not created_again
    assert read_token(home) == tok
    assert authenticate(f"Bearer {tok}", tok) is not None


def test_a_loose_or_empty_token_file_is_repaired(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    path = token_path(home)
    path.write_text("kept-token\n")
    os.chmod(path, 0o644)
    assert ensure_token(home) == ("kept-token", False)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text("  \n")
    tok, created = ensure_token(home)
    assert created and tok.strip() and read_token(home) == tok
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_an_app_without_a_token_refuses_everything_until_one_exists(tmp_path: Path) -> None:
    home = tmp_path / "not-up-yet"
    with TestClient(build_app(ApiConfig(home=str(home), launcher="none", hosts=TEST_HOSTS))) as c:
        r = c.get("/workflows", headers={"Authorization": "Bearer anything"})
        assert r.status_code == 401 and "jr2ray up" in r.json()["detail"]
        assert c.get("/healthz").status_code == 200
        tok, _ = ensure_token(home)  # what `jr2ray up` does; the running app picks it up
        assert c.get("/workflows", headers={"Authorization": f"Bearer {tok}"}).status_code == 200
        assert c.get("/workflows", headers={"Authorization": "Bearer anything"}).status_code == 401


# ---- 403: a Harness token is scoped to its own Turn ---------------------------------------------------------------
def test_a_harness_token_is_403_on_every_route_but_its_own_turn(client: TestClient, tok: str) -> None:
    """The 200 on its own Turn is in test_api_scoped.py (it needs a live run); here every other route refuses."""
    h = {"Authorization": f"Bearer {harness_token(tok, 'abc123.t1')}"}
    schema = client.get("/openapi.json").json()
    for method, path in _protected(schema):
        concrete = _concrete(path)
        if path.startswith("/agents/"):
            concrete = concrete.replace("abc123.t1", "abc123.t2")  # another Turn of the same run
        r = client.request(method.upper(), concrete, headers=h, json={"event": "reply", "input": {"text": "x"}})
        assert r.status_code == 403, (method, concrete, r.status_code)
        assert "abc123.t1" in r.json()["detail"]
    # The right iid with the wrong verb is refused too.
    assert client.post("/agents/abc123.t1/surface", headers=h).status_code == 403
    assert client.get("/agents/abc123.t1/picks", headers=h).status_code == 403
    assert client.get("/agents/abc123.t1/surface/", headers=h).status_code == 403


def test_workflow_routes_describe_seats_warnings_and_the_door(client: TestClient, tok: str) -> None:
    h = {"Authorization": f"Bearer {tok}"}
    listed = {w["name"]: w for w in client.get("/workflows", headers=h).json()}
    assert {"notes", "deploy"} <= set(listed)
    notes = listed["notes"]
    assert notes["id"] == "notes" and notes["agents"] == ["writer"] and len(notes["digest"]) == 12
    assert isinstance(notes["warnings"], list) and notes["seats"]
    detail = client.get("/workflows/notes", headers=h).json()
    assert detail["door_schema"]["required"] == ["changes"]
    assert [i["name"] for i in detail["menus"]["writer"]] == ["ask", "done"]
    assert "writer" in detail["seats_text"]
    paths = {s["path"] for s in detail["graph"]["states"]}
    assert {"notes.writing.drafting", "notes.writing.asking", "notes.published"} <= paths
    svg = client.get("/workflows/notes/graph.svg", headers=h)
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert 'data-path="notes.writing.asking"' in svg.text
    for missing in ("/workflows/nope", "/workflows/os", "/workflows/..%2Fetc", "/workflows/nope/graph.svg"):
        r = client.get(missing, headers=h)
        assert r.status_code == 404, missing
    assert client.post("/workflows/nope/runs", headers=h, json={"input": {}}).status_code == 404
