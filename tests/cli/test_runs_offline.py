"""`jr2ray runs`: the WHERE column (what each run waits for), VALUE of a parked run, `--summary`, `--watch`, and the
filters passed to `GET /runs`, against a stand-in API (httpx MockTransport)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from jr2ray.cli import EXIT_OK, EXIT_USAGE, Api, commands, main
from jr2ray.cli.runlist import runs_table, state_text, summary, summary_table, watch, where_text
from jr2ray.settings import load_settings

NOW = 1_800_000_000.0


def _row(rid: str, status: str, presence: str | None, value: Any = None, **more: Any) -> dict[str, Any]:
    return {"id": rid, "workflow": "notes", "status": status, "presence": presence, "value": value,
            "created_at": NOW - 60, **more}


ROWS = [
    _row("aaaa0001", "active", "parked", {"writing": "asking"},
         waiting={"gates": ["notes.writing.asking"], "turns": {}, "timer_due": None}),
    _row("aaaa0002", "active", "parked", "drafting",
         waiting={"gates": [], "turns": {"writer": ["ask", "done"]}, "timer_due": None}),
    _row("aaaa0003", "active", "parked", "cooling", waiting={"gates": [], "turns": {}, "timer_due": NOW + 12.2}),
    _row("aaaa0004", "queued", "queued", place=3),
    _row("aaaa0005", "queued", "queued"),
    _row("aaaa0006", "active", "live", "drafting"),
    _row("aaaa0007", "done", None, "published"),
]


@pytest.mark.parametrize("row, text", [
    (ROWS[0], "gate notes.writing.asking"),
    (ROWS[1], "turn writer [ask|done]"),
    (_row("x", "active", "parked", waiting={"turns": {"coder": ["read_file", "write_file", "run_tests", "finish"]}}),
     "turn coder"),
    (ROWS[2], "timer in 12s"),
    (_row("x", "active", "parked", waiting={"gates": ["g1", "g2"], "timer_due": NOW + 600}),
     "gate g1, gate g2, timer in 10m"),
    (_row("x", "active", "parked", waiting={"timer_due": NOW - 3}), "timer due 3s ago"),
    (_row("x", "active", "parked"), "parked"),  # parked before runs kept where they wait
    (ROWS[3], "queued #3"),
    (ROWS[4], "queued"),
    (ROWS[5], "live"),
    (_row("x", "active", "live", gates=[{"id": "notes.writing.asking", "state": "s", "accepts": [],
                                         "accepts_now": ["reply"]}], turns=[]), "live: gate notes.writing.asking"),
    (_row("x", "active", "live", gates=[], turns=[
        {"iid": "x.t1", "slot": "writer", "state": "s", "active": True, "allowed": ["ask", "done"]},
        {"iid": "x.t0", "slot": "old", "state": "s", "active": False, "allowed": None}]),
     "live: turn writer [ask|done]"),
    (_row("x", "active", "live", turns=[{"slot": "coder", "active": True, "allowed": None}]), "live: turn coder"),
    (ROWS[6], ""),
    (_row("x", "corrupt", None), ""),
])
def test_where_says_what_each_run_waits_for(row: dict[str, Any], text: str) -> None:
    assert where_text(row, now=NOW) == text


def test_the_table_shows_where_and_a_parked_runs_value() -> None:
    lines = runs_table(ROWS, now=NOW).splitlines()
    head = lines[0]
    assert head.split() == ["ID", "WORKFLOW", "STATUS", "WHERE", "CREATED", "VALUE"]
    where_at, created_at, value_at = head.index("WHERE"), head.index("CREATED"), head.index("VALUE")
    cols = {line[:8]: (line[where_at:created_at].strip(), line[value_at:]) for line in lines[1:]}
    assert cols["aaaa0001"] == ("gate notes.writing.asking", '{"writing": "asking"}')
    assert cols["aaaa0002"] == ("turn writer [ask|done]", '"drafting"')
    assert cols["aaaa0004"] == ("queued #3", "null")
    assert cols["aaaa0006"] == ("live", '"drafting"')
    assert cols["aaaa0007"] == ("", '"published"')


def test_state_values_read_as_dotted_paths() -> None:
    assert state_text({"writing": "asking"}) == "writing.asking"
    assert state_text({"p": {"a": "x", "b": "y"}}) == "p.a.x,p.b.y"
    assert state_text("done") == "done" and state_text(None) == "-"


def test_summary_counts_status_by_where_by_state() -> None:
    """Where is grouped: runs at one Gate count together (not as "parked"), and what differs run to run at one
    place (a queued run's number, a timer's time left) is left out."""
    rows = ROWS + [
        _row("aaaa0008", "active", "parked", {"writing": "asking"},
             waiting={"gates": ["notes.writing.asking"], "timer_due": None}),
        _row("aaaa0009", "active", "parked", {"writing": "asking"}, waiting={"gates": ["other.gate"]}),
        _row("aaaa0010", "active", "parked", "cooling", waiting={"timer_due": NOW + 900}),
    ]
    counts = summary(rows)
    assert counts[0] == {"status": "active", "where": "gate notes.writing.asking", "state": "writing.asking",
                         "count": 2}
    assert {"status": "active", "where": "gate other.gate", "state": "writing.asking", "count": 1} in counts
    assert {"status": "active", "where": "timer", "state": "cooling", "count": 2} in counts
    assert {"status": "active", "where": "turn writer [ask|done]", "state": "drafting", "count": 1} in counts
    assert {"status": "active", "where": "live", "state": "drafting", "count": 1} in counts
    assert {"status": "queued", "where": "queued", "state": "-", "count": 2} in counts
    assert {"status": "done", "where": "", "state": "published", "count": 1} in counts
    assert sum(c["count"] for c in counts) == len(rows) == 10
    table = summary_table(counts).splitlines()
    assert table[0].split() == ["STATUS", "WHERE", "STATE", "RUNS"]
    assert table[1].split() == ["active", "gate", "notes.writing.asking", "writing.asking", "2"]
    assert table[-1] == "10 run(s)"


class FakeApi:
    """GET /runs in pages of 3, honouring the filters it is given; it records every request's params."""

    def __init__(self, tmp_path: Path, rows: list[dict[str, Any]]) -> None:
        self.rows, self.params = rows, []  # type: list[dict[str, Any]]
        self.api = Api(tmp_path, "http://jr2ray.test", load_settings())
        self.api.http = httpx.Client(base_url="http://jr2ray.test", transport=httpx.MockTransport(self.handle))

    def handle(self, request: httpx.Request) -> httpx.Response:
        q = dict(request.url.params)
        self.params.append(q)
        at = int(q.get("cursor", 0))
        window = self.rows[at:at + 3]
        page = [r for r in window if all(r.get(k) == q[k] for k in ("status", "workflow") if k in q)
                and r["presence"] == q.get("where", r["presence"]) and r["id"].startswith(q.get("prefix", ""))]
        more = {"x-next-cursor": str(at + 3)} if at + 3 < len(self.rows) else {}
        return httpx.Response(200, json=page, headers=more)


def _args(**kw: Any) -> argparse.Namespace:
    base = {"limit": None, "status": None, "where": None, "workflow": None, "prefix": None, "summary": False,
            "json": False, "watch": False, "interval": 2.0, "count": None}
    return argparse.Namespace(**(base | kw))


def test_runs_pages_on_through_empty_filtered_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeApi(tmp_path, ROWS)
    monkeypatch.setattr(commands, "_api", lambda args: fake.api)
    assert commands.cmd_runs(_args(where="live", json=True)) == EXIT_OK
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["aaaa0006"]
    assert len(fake.params) == 3 and all(p["where"] == "live" for p in fake.params)  # the first page was empty


def test_summary_through_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeApi(tmp_path, ROWS)
    monkeypatch.setattr(commands, "_api", lambda args: fake.api)
    assert commands.cmd_runs(_args(summary=True, json=True)) == EXIT_OK
    counts = json.loads(capsys.readouterr().out)
    assert {"status": "active", "where": "live", "state": "drafting", "count": 1} in counts
    assert sum(c["count"] for c in counts) == len(ROWS)


def test_watch_reprints_each_refresh_once_when_not_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rows = [dict(r) for r in ROWS]
    fake = FakeApi(tmp_path, rows)
    monkeypatch.setattr(commands, "_api", lambda args: fake.api)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    sleeps: list[float] = []

    def sleep(s: float) -> None:  # between refreshes the run moves on
        sleeps.append(s)
        rows[5]["status"], rows[5]["presence"], rows[5]["value"] = "done", None, f"step{len(sleeps)}"

    monkeypatch.setattr("jr2ray.cli.runlist.time.sleep", sleep)
    assert main(["runs", "--summary", "--watch", "--interval", "0.5", "--count", "3"]) == EXIT_OK
    printed = capsys.readouterr().out
    blocks = printed.rstrip("\n").split("\n\n")
    assert len(blocks) == 3 and sleeps == [0.5, 0.5] and "\x1b[" not in printed
    assert "live" in blocks[0] and "step1" in blocks[1] and "step2" in blocks[2]
    assert all(b.splitlines()[0].split() == ["STATUS", "WHERE", "STATE", "RUNS"] for b in blocks)


def test_watch_on_a_terminal_clears_and_redraws_until_ctrl_c() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen, calls = Tty(), []

    def render() -> str:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return f"frame {len(calls)}"

    watch(render, 1.0, stream=screen, sleep=lambda s: None)
    frames = screen.getvalue().split("\x1b[H\x1b[2J")
    assert frames[0] == "" and len(frames) == 3
    assert frames[1].endswith("frame 1\n") and frames[2].endswith("frame 2\n\n") and "Ctrl-C" in frames[1]


def test_a_bad_interval_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeApi(tmp_path, ROWS)
    monkeypatch.setattr(commands, "_api", lambda args: fake.api)
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    assert main(["runs", "--watch", "--interval", "0"]) == EXIT_USAGE
    assert "--interval must be more than 0" in capsys.readouterr().err and not fake.params


def test_resolve_asks_for_the_prefix(tmp_path: Path) -> None:
    fake = FakeApi(tmp_path, ROWS)
    assert fake.api.resolve("aaaa0005") == "aaaa0005"
    assert all(p.get("prefix") == "aaaa0005" for p in fake.params)


@pytest.mark.parametrize(("status", "told", "listed"), [
    ("done", "live", None),  # finished, its host not yet let go: a new user's summary read `done live`
    ("error", "live", None),
    ("queued", "parked", "queued"),  # started, its activation not yet in line: it never ran, so not `parked`
    ("queued", "queued", "queued"),
    ("active", "parked", "parked"),
    ("active", "live", "live"),
    ("active", "queued", "queued"),  # woken, waiting for a slot
])
def test_a_listed_run_says_where_it_is_as_the_readme_does(status: str, told: str, listed: str | None) -> None:
    from jr2ray.run.models import listed_presence

    assert listed_presence(status, told) == listed
