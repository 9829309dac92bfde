"""/docs works without the internet: its page names only same-origin files, and the app serves each of them.

No Ray: the docs are public and touch no run.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from serve.api import ApiConfig, build_app
from serve.auth import ensure_token


class _Refs(HTMLParser):
    """Every URL the page would fetch: src and href attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    return TestClient(build_app(ApiConfig(home=str(tmp_path), launcher="none")))


def test_docs_page_references_only_same_origin_assets_and_each_is_served(client: TestClient) -> None:
    page = client.get("/docs")  # no token: the page and its files are public
    assert page.status_code == 200
    parser = _Refs()
    parser.feed(page.text)
    assert parser.refs, "the page loads no assets at all"
    for ref in parser.refs:
        parts = urlsplit(ref)
        assert not parts.scheme and not parts.netloc and ref.startswith("/"), ref  # not `//cdn...` either
    inline = "\n".join(parser.scripts)
    assert "http://" not in inline and "https://" not in inline, inline
    kinds = {}
    for ref in parser.refs:
        r = client.get(ref)
        assert r.status_code == 200 and len(r.content) > 100, ref
        kinds[ref.rsplit(".", 1)[-1]] = r.headers["content-type"]
    assert "javascript" in kinds["js"] and kinds["css"].startswith("text/css")
    assert "SwaggerUIBundle" in client.get(next(r for r in parser.refs if r.endswith(".js"))).text
    assert "/openapi.json" in inline and client.get("/openapi.json").status_code == 200


def test_the_docs_assets_are_public_only_for_reading(client: TestClient, tmp_path: Path) -> None:
    assert client.get("/docs/oauth2-redirect").status_code == 200
    assert client.post("/docs/assets/swagger-ui-bundle.js").status_code == 401
    token, _ = ensure_token(tmp_path)
    # No second docs page that would load its script from a CDN.
    assert client.get("/redoc", headers={"Authorization": f"Bearer {token}"}).status_code == 404


def test_behind_a_route_prefix_the_public_pages_stay_public_and_the_docs_point_inside_it(tmp_path: Path) -> None:
    """Serve mounts an app at its `route_prefix` as the ASGI root path; the token check sees the path inside it."""
    token, _ = ensure_token(tmp_path)
    app = build_app(ApiConfig(home=str(tmp_path), launcher="none"))
    with TestClient(app, root_path="/built") as c:
        assert c.get("/built/healthz").status_code == 200
        page = c.get("/built/docs")
        assert page.status_code == 200 and "/built/openapi.json" in page.text
        assert "/built/docs/assets/swagger-ui-bundle.js" in page.text
        assert c.get("/built/docs/assets/swagger-ui-bundle.js").status_code == 200
        assert c.get("/built/workflows").status_code == 401
        assert c.get("/built/workflows", headers={"Authorization": f"Bearer {token}"}).status_code == 200
