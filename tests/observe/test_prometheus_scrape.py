"""The shipped dashboard and alert rules against a real Prometheus scraping a real instance.

A real `jr2ray up` (its own Ray head, the API under Serve, a Harness per Turn) plays notes runs on a recording fake
model server (tests/conformance: an OpenAI-compatible server that reports cached tokens, so no vLLM is needed) and a
deploy run whose operator seat the test plays over HTTP (an Effect, a Gate it parks at, a cooldown timer the timer
service wakes it for). Debian's `prometheus` scrapes Ray's metrics export on the port `up` fixed, with
`cluster/prometheus.yml` (its target rewritten to this instance) and `cluster/jr2ray-alerts.yml`. Then:

- every expression of `cluster/grafana-jr2ray.json` must give a non-empty result through `/api/v1/query`, except the
  vLLM panels' (`ray_vllm_*`), which need the LLM app and are checked in the vllm tier
  (tests/vllm/test_vllm_engine_metrics.py);
- the alert rules must load (`/api/v1/rules`, health ok), and each rule's `signal` (its expression without the
  threshold, kept in the rule's annotations) must be a part of its `expr` and give a non-empty result: an alert
  whose series does not exist could never fire, and this is what the test rules out. The thresholds themselves are
  not crossed here (that would need hours of data or a broken instance).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dashboard_render import render
from prom_helpers import (
    ALERTS,
    SCRAPE,
    SCRAPE_S,
    VLLM_SERIES,
    Prometheus,
    alert_rules,
    dashboard_exprs,
    flat,
    prometheus_bin,
    signals,
    without_series,
)
from up_instance import UpInstance, free_port, start_instance, stop_instance, wait_for

from conformance_fakes import FakeModelServer, calls, text

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.observe]

class Observed:
    """One instance with runs played on it, scraped by Prometheus."""

    def __init__(self, up: UpInstance, prom: Prometheus, metrics_port: int, runs: dict[str, str],
                 since: float) -> None:
        self.up, self.prom, self.metrics_port, self.runs = up, prom, metrics_port, runs
        self.since = since  # when the instance was started: the dashboard's range begins there


def _view(http: httpx.Client, rid: str) -> dict[str, Any]:
    r = http.get(f"/runs/{rid}")
    r.raise_for_status()
    return dict(r.json())


def _ended(http: httpx.Client, rid: str, timeout_s: float = 180.0) -> dict[str, Any]:
    return dict(wait_for(f"run {rid} to end", lambda: (v := _view(http, rid))["status"] != "active" and v,
                         timeout_s, 0.5))


def _logged(up: UpInstance, rid: str, event: str) -> bool:
    """Has an instance process logged `event` for run `rid` (in $JR2RAY_HOME/logs)?"""
    for path in (up.home / "logs").glob("*.jsonl"):
        for raw in path.read_text().splitlines():
            if f'"{rid}"' in raw and f'"event":"{event}"' in raw:
                return True
    return False


def _notes_run(up: UpInstance, fake: FakeModelServer, *, fault: bool = False) -> str:
    """A notes run whose writer is the Harness on the fake model: ask, the editor replies, done; or (`fault`) three
    answers without a pick, so the Harness faults after its two nudges and the run ends in error."""
    if fault:
        fake.push(text("Thinking."), text("Still thinking."), text("Nearly there."))
    else:
        fake.push(calls(("ask", {"question": "Which change matters most?"})),
                  calls(("done", {"notes": "# Notes\n- the crash fix"})))
    with up.http() as http:
        rid = http.post("/workflows/notes/runs", json={"input": {"changes": "fix: crash on empty input"}}).json()["id"]
        if not fault:
            gate = wait_for("the notes Gate", lambda: (_view(http, rid)["gates"] or [None])[0], 180.0, 0.5)
            r = http.post(f"/runs/{rid}/gates/{gate['id']}/events",
                          json={"event": "reply", "input": {"text": "The crash fix."}})
            assert r.status_code == 200, r.text
        final = _ended(http, rid)
    assert final["status"] == ("error" if fault else "done"), final
    return str(rid)


def _deploy_run(up: UpInstance) -> str:
    """A deploy run, its operator seat played here over HTTP: deploy (an Effect), submit; the run parks at its Gate;
    approve wakes it; it parks again in its cooldown and the timer service wakes it to finish."""
    with up.http() as http:
        door = {"cooldown_ms": 6000, "deploy_seconds": 0.1}
        rid = http.post("/workflows/deploy/runs", json={"input": door}).json()["id"]

        def operator() -> str | None:
            turns = [t for t in _view(http, rid)["turns"] if t["active"] and t.get("allowed")]
            return str(turns[0]["iid"]) if turns else None

        iid = wait_for("the operator's Turn", operator, 120.0, 0.5)
        for name in ("deploy", "submit"):
            r = http.post(f"/agents/{iid}/picks", json={"name": name, "args": {}, "delivery_id": f"{rid}-{name}"})
            assert r.status_code == 200 and r.json()["delivered"], r.text
        gate = wait_for("the approval Gate", lambda: (_view(http, rid)["gates"] or [None])[0], 60.0, 0.5)
        # Waited for in the logs, not by asking the run: any call on a live run is activity, and resets its idle.
        wait_for("the run to park at its Gate", lambda: _logged(up, rid, "run.parked"), 120.0, 0.5)
        r = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "approve", "input": {"by": "test"}})
        assert r.status_code == 200, r.text
        wait_for("the timer service to wake it for its cooldown", lambda: _logged(up, rid, "timer.fired"), 120.0, 0.5)
        final = _ended(http, rid)
    assert final["status"] == "done", final
    return str(rid)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    prometheus_bin()
    home = tmp_path_factory.mktemp("observe-home")
    metrics_port = free_port()
    since = time.time()
    with FakeModelServer() as fake:
        env = {"JR2RAY_LOCAL_BASE_URL": fake.url, "JR2RAY_METRICS_PORT": str(metrics_port),
               "JR2RAY_IDLE_DEACTIVATE_S": "1", "JR2RAY_MAX_LIVE_RUNS": "4",
               "RAY_metrics_report_interval_ms": "2000"}  # Ray's agent reports every 2 s, not 10 s: a shorter test
        up = start_instance(home, env, launcher="auto")
        prom: Prometheus | None = None
        try:
            prom = Prometheus(tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{metrics_port}")
            prom.wait_scraped()
            runs = {"notes_done_1": _notes_run(up, fake), "notes_done_2": _notes_run(up, fake),
                    "notes_error": _notes_run(up, fake, fault=True), "deploy": _deploy_run(up)}
            with up.http() as http:  # a refusal the API answers (404), for the refusal series and log
                assert http.get("/runs/not-a-run-id").status_code == 404
            yield Observed(up, prom, metrics_port, runs, since)
        finally:
            if prom is not None:
                prom.stop()
            stop_instance(home, up.env, up.temp_dir)


def test_the_shipped_scrape_config_and_rules_are_valid() -> None:
    prometheus_bin()
    promtool = shutil.which("promtool")
    assert promtool is not None, "Debian's prometheus package ships promtool"
    for argv in (["check", "config", str(SCRAPE)], ["check", "rules", str(ALERTS)]):
        proc = subprocess.run([promtool, *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    exprs = dashboard_exprs()
    assert len(exprs) >= 20 and all("ray_jr2ray_" in e or VLLM_SERIES in e for e in exprs)
    assert {r["alert"] for r in alert_rules()} == {"Jr2rayRunsDrifted", "Jr2rayQueueGrowing", "Jr2rayTimerLag",
                                                   "Jr2rayFaultRate", "Jr2rayCachedShareDrop"}


def test_every_dashboard_and_alert_expression_has_series_after_a_few_runs(observed: Observed) -> None:
    prom = observed.prom
    ours = [e for e in dashboard_exprs() if VLLM_SERIES not in e]
    rules = alert_rules()
    for rule in rules:
        for part in signals(rule):
            assert flat(part) in flat(rule["expr"]), f"{rule['alert']}: signal {part!r} is not part of its expr"
    wanted = ours + [s for r in rules for s in signals(r)]
    empty = without_series(prom, wanted)
    assert not empty, "no series for:\n" + "\n".join(empty)

    loaded = [r for g in prom.api("rules")["groups"] if g["name"] == "jr2ray" for r in g["rules"]]
    assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in rules)
    assert all(r["health"] == "ok" for r in loaded), loaded

    # The series say what the runs did: 4 runs of 2 workflows, the deploy run woken by its Gate event and its timer.
    # (Polled: the run gauges are set every 10 s, and Ray's agent exports each process's values every few seconds.)
    def value(expr: str) -> float:
        return sum(float(s["value"][1]) for s in prom.query(expr))

    expected = {'sum(ray_jr2ray_runs{workflow="notes",status="done"})': 2,
                'sum(ray_jr2ray_runs{workflow="notes",status="error"})': 1,
                'sum(ray_jr2ray_runs{workflow="deploy",status="done"})': 1,
                'sum(ray_jr2ray_runs{status=~"drifted|lost|corrupt"})': 0,
                "sum(ray_jr2ray_runs_started_total)": 4,
                'sum(ray_jr2ray_runs_ended_total{outcome="error"})': 1,
                'sum(ray_jr2ray_effects_total{workflow="deploy",kind="effect.command",outcome="ok"})': 1,
                'sum(ray_jr2ray_model_requests_total{workflow="notes"})': 7}  # 2 + 2 + 3 (the faulting run)
    at_least = {'sum(ray_jr2ray_activations_total{workflow="deploy",kind="wake"})': 2,
                "sum(ray_jr2ray_timers_fired_total)": 1, 'sum(ray_jr2ray_cached_tokens_total{workflow="notes"})': 1,
                'sum(ray_jr2ray_refusals_total{kind="404"})': 1}
    for expr, want in expected.items():
        wait_for(f"{expr} == {want}", lambda e=expr, w=want: value(e) == w or None, 60.0, SCRAPE_S)
    for expr, least in at_least.items():
        wait_for(f"{expr} >= {least}", lambda e=expr, w=least: value(e) >= w or None, 60.0, SCRAPE_S)
    for series in prom.api("series", **{"match[]": '{__name__=~"ray_jr2ray_.*"}'}):
        assert not any(observed.runs[k] in json.dumps(series) for k in observed.runs), f"a run id in {series}"


def test_the_scrape_shows_jr2ray_series_on_the_port_up_fixed(observed: Observed) -> None:
    inst = json.loads((observed.up.home / "instance.json").read_text())
    assert inst["metrics_port"] == observed.metrics_port
    assert f"metrics: http://127.0.0.1:{observed.metrics_port}/metrics" in observed.up.up.stdout
    status = observed.up.cli("status")
    assert status.code == 0, status.explain()
    assert status.json()["metrics"] == f"http://127.0.0.1:{observed.metrics_port}/metrics"
    for _ in range(3):  # three scrapes a few seconds apart: the run gauges are set every second, so none lacks them
        page = httpx.get(f"http://127.0.0.1:{observed.metrics_port}/metrics", timeout=30).text
        names = {line.split("{")[0] for line in page.splitlines() if line.startswith("ray_jr2ray_")}
        assert {"ray_jr2ray_runs", "ray_jr2ray_runs_where", "ray_jr2ray_queue_length", "ray_jr2ray_picks_total",
                "ray_jr2ray_pick_seconds_bucket"} <= names, names
        time.sleep(3)


def test_logs_of_one_run_name_its_life_and_nothing_else(observed: Observed) -> None:
    rid = observed.runs["deploy"]
    got = observed.up.cli("logs", rid[:6], "--json")
    assert got.code == 0, got.explain()
    lines = [json.loads(line) for line in got.stdout.splitlines()]
    assert lines and all(line.get("run") == rid or str(line.get("iid", "")).startswith(rid) for line in lines)
    events = [line["event"] for line in lines]
    for wanted in ("run.started", "run.activated", "turn.opened", "effect.started", "effect.finished", "pick",
                   "run.parked", "run.woken", "gate.event", "timer.fired", "turn.closed", "run.ended"):
        assert wanted in events, (wanted, events)
    assert all({"ts", "level", "event", "component"} <= set(line) for line in lines)
    assert next(line for line in lines if line["event"] == "effect.finished")["outcome"] == "ok"
    assert {line["workflow"] for line in lines if "workflow" in line} == {"deploy"}
    err = observed.runs["notes_error"]
    ended = [json.loads(x) for x in observed.up.cli("logs", err, "--json").stdout.splitlines()]
    assert [x["outcome"] for x in ended if x["event"] == "run.ended"] == ["error"]
    assert any(x["event"] == "model.request" and x["component"] == "host" for x in ended)
    # The Harness's own lines: its Turn's start (its end line may be cut off: the Run ends the actor with the Turn).
    assert any(x["event"] == "harness.turn_started" and x["component"] == "harness" for x in ended)
    assert os.listdir(observed.up.home / "logs")  # one place per instance
    short = observed.up.cli("logs", rid[:3])
    assert short.code == 2 and "shorter than 4" in short.stderr


def test_the_dashboard_renders_from_the_scraped_series(observed: Observed, tmp_path: Path) -> None:
    """The shipped dashboard drawn from this Prometheus (query_range per panel): every panel but the vLLM ones has a
    series (as the instant queries above: one whose points are all NaN counts, and reads "no points").
    `JR2RAY_DASHBOARD_PNG` keeps the image (docs/dashboard.png is made this way)."""
    pytest.importorskip("matplotlib")
    out = Path(os.environ.get("JR2RAY_DASHBOARD_PNG") or tmp_path / "dashboard.png")
    counts = render(observed.prom.url, out, minutes=max(3.0, (time.time() - observed.since) / 60 + 0.5))
    assert out.stat().st_size > 50_000
    assert counts and not [title for title, n in counts.items() if n == 0], counts
