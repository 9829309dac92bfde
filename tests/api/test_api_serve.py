"""The API as it is deployed by `jr2ray up`: a Ray Serve ingress (`deploy_api`), over real HTTP through Serve's
proxy, driving Run actors that the replica starts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serve.auth import harness_token

from .api_helpers import answers_ok, deployed_api, observe, sse_events, start_notes, wait_for

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def served(api_home: Path, token: str, ray_cluster: bool) -> Iterator[str]:
    if not ray_cluster:  # Serve is per cluster: never deploy onto (or shut down) a Ray that another fixture owns
        pytest.skip("this process already had a Ray up; the Serve test needs one of its own")
    with deployed_api(api_home) as url:
        yield url


def test_the_served_api_runs_notes_end_to_end(served: str, token: str, api_home: Path) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{served}/healthz").json()["ok"] is True
    assert httpx.get(f"{served}/runs").status_code == 401
    assert "/runs/{run_id}/events" in httpx.get(f"{served}/openapi.json").json()["paths"]

    with httpx.Client(base_url=served, headers=auth, timeout=60) as c, ThreadPoolExecutor(2) as pool:
        rid, iid = start_notes(c)
        events: list[tuple[str, str | None, object]] = []
        streaming = threading.Event()

        def read_feed() -> None:
            with httpx.stream("GET", f"{served}/runs/{rid}/events", headers=auth, timeout=60) as s:
                assert s.headers["content-type"].startswith("text/event-stream")
                for ev in sse_events(s.iter_lines()):
                    events.append(ev)
                    streaming.set()

        feed = pool.submit(read_feed)
        assert streaming.wait(60)

        h = {"Authorization": f"Bearer {harness_token(token, iid)}"}
        assert c.get(f"/agents/{iid}/surface", headers=h).json()["allowed"] == ["ask"]
        assert c.get(f"/runs/{rid}", headers=h).status_code == 403
        pending = pool.submit(c.post, f"/agents/{iid}/picks", headers=h,
                              json={"name": "ask", "args": {"question": "Served?"}})
        gate = wait_for(lambda: c.get(f"/runs/{rid}").json()["gates"], what="the Gate")[0]
        before = observe(api_home / "runs", rid)
        assert c.post(f"/runs/{rid}/gates/{gate['id']}/events", headers=h,
                      json={"event": "reply", "input": {"text": "x"}}).status_code == 403
        bad = c.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "ask", "input": {"question": "x"}})
        assert bad.status_code == 409 and bad.json()["accepts_now"] == ["reply"]
        big = c.post(f"/runs/{rid}/gates/{gate['id']}/events", content=b"{" + b" " * (1024 * 1024 + 1) + b"}",
                     headers={"content-type": "application/json"})
        assert big.status_code == 413
        assert observe(api_home / "runs", rid) == before
        assert c.post(f"/runs/{rid}/gates/{gate['id']}/events",
                      json={"event": "reply", "input": {"text": "Yes."}}).status_code == 200
        assert pending.result(60).json()["answer"] == "The editor replied: Yes."
        assert c.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "n"}}).json()["turn_complete"]
        feed.result(60)  # the feed ends with the run
        kinds = [k for k, _, _ in events]
        assert kinds[-1] == "end" and events[-1][2] == {"status": "done"}
        assert any(k == "pick" and d["name"] == "ask" for k, _, d in events)  # type: ignore[index]
        assert any(k == "admission" and d["party"] == "gate" for k, _, d in events)  # type: ignore[index]
        assert c.get(f"/runs/{rid}").json()["status"] == "done"


def test_the_builder_a_serve_config_names_serves_under_its_route_prefix(served: str, token: str,
                                                                        api_home: Path) -> None:
    """`serve.api:build_serve_app`, as a serve config deploys it: the replica reads its settings itself (the token
    from <home>/token), and the app answers under a route prefix, /docs and its assets included."""
    from ray import serve

    from serve.api import build_serve_app

    serve.run(build_serve_app({"home": str(api_home), "launcher": "none"}), name="jr2ray-built",
              route_prefix="/built", blocking=False)
    base = f"{served}/built"
    wait_for(lambda: answers_ok(f"{base}/healthz"), timeout=180, every=0.5, what="the built app to answer")
    assert httpx.get(f"{base}/workflows").status_code == 401
    listed = httpx.get(f"{base}/workflows", headers={"Authorization": f"Bearer {token}"})
    assert listed.status_code == 200 and "notes" in {w["name"] for w in listed.json()}
    page = httpx.get(f"{base}/docs")
    assert page.status_code == 200 and "/built/openapi.json" in page.text
    for asset in ("/built/docs/assets/swagger-ui-bundle.js", "/built/docs/assets/swagger-ui.css"):
        assert asset in page.text and httpx.get(f"{served}{asset}").status_code == 200, asset
    assert httpx.get(f"{base}/openapi.json").status_code == 200
    serve.delete("jr2ray-built")
