"""/docs served offline: Swagger UI's files come from the `swagger-ui-bundle` package, not from a CDN.

Why: an instance on a laptop, an air-gapped cluster or a CI box must show its API description without the internet,
and a page that pulls script from a third party would run that party's code with the operator's token in reach.
The page and its assets are public (no run data in them); `/openapi.json` declares the Bearer scheme so the page
offers an Authorize button.
"""

from __future__ import annotations

import importlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS = "/docs"
ASSETS = "/docs/assets"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
OPENAPI = "/openapi.json"


def assets_dir() -> str:
    """The Swagger UI distribution the package ships (JS, CSS, favicons)."""
    bundle = importlib.import_module("swagger_ui_bundle")  # by name: the package ships no type information
    return str(bundle.swagger_ui_path)


def add_docs(app: FastAPI) -> None:
    """Mount the assets and the two pages; the app must be built with `docs_url=None, redoc_url=None`."""
    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + OPENAPI, title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon-32x32.png", oauth2_redirect_url=root + OAUTH2_REDIRECT,
            swagger_ui_parameters={"validatorUrl": None})  # no badge fetched from the public validator

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    add_bearer_scheme(app)


def add_bearer_scheme(app: FastAPI) -> None:
    """Describe the Bearer token in OpenAPI so /docs offers an Authorize button (auth itself is middleware)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http", "scheme": "bearer"}
        schema["security"] = [{"bearer": []}]
        for op in schema.get("paths", {}).get("/healthz", {}).values():
            op["security"] = []
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
