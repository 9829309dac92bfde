"""Listings carry summaries of run inputs, never the inputs themselves (a 1 MB key once made every listing 1 MB
per run), and a Door's numeric bounds are the schema's to check, against real Run actors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .api_helpers import LiveServer, run_ids

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


@pytest.mark.parametrize(("input_", "words"), [
    ({"cooldown_ms": 3_600_001}, ("cooldown_ms", "less than or equal to 3600000")),
    ({"deploy_seconds": -1}, ("deploy_seconds", "greater than or equal to 0")),
    ({"deploy_seconds": 600.5}, ("deploy_seconds", "less than or equal to 600")),
])
def test_a_run_input_number_out_of_its_door_bounds_is_400_and_nothing_is_stored(
        http: httpx.Client, live: LiveServer, input_: dict[str, Any], words: tuple[str, ...]) -> None:
    before = run_ids(live.store_dir())
    listed = http.get("/runs").json()
    r = http.post("/workflows/deploy/runs", json={"input": input_})
    assert r.status_code == 400, r.text
    assert r.json()["detail"].startswith("invalid input for workflow 'deploy'")
    for w in words:
        assert w in r.json()["detail"], r.json()["detail"]
    assert run_ids(live.store_dir()) == before
    assert http.get("/runs").json() == listed
