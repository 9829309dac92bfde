"""Listings carry summaries of run inputs, never the inputs themselves (a 1 MB key once made every listing 1 MB
per run), against real Run actors."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.ray


def test_the_listing_summarises_each_input(http: httpx.Client) -> None:
    extra = "y" * (200 * 1024)  # under the 256 KB input limit, so the run starts
    r = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: x", "extra": extra}})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    try:
        listing = http.get("/runs")
        assert listing.status_code == 200
        (row,) = [x for x in listing.json() if x["id"] == rid]
        assert row["input"]["keys"] == ["changes", "extra"] and row["input"]["bytes"] > len(extra)
        assert extra not in listing.text and len(listing.content) < 100 * 1024
    finally:
        http.post(f"/runs/{rid}/cancel")
