"""The observability facade without Ray: its JSON log lines, its bounded labels, the metrics port `up` fixes, and
`jr2ray logs` (merging the per-process files, a run's lines by id prefix, following new lines)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jr2ray.cli import errors, logs
from jr2ray.cli.errors import CliError
from jr2ray.cli.main import main
from jr2ray.cli.rayproc import metrics_port_for
from jr2ray.run import telemetry
from jr2ray.settings import DEFAULT_METRICS_PORT, load_settings

BOUNDED = {"workflow", "seat", "verdict", "kind", "outcome", "status", "where"}


@pytest.fixture
def fresh_log() -> Any:
    """The facade's logger with no handler before and after (a process sets it up once); the lines earlier tests
    queued are written first, to the handlers they were logged for."""
    telemetry.flush()
    log = logging.getLogger(telemetry.LOGGER)
    saved = list(log.handlers)
    for h in saved:
        log.removeHandler(h)
    yield log
    telemetry.flush()
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    for h in saved:
        log.addHandler(h)


def _engine(run_id: str = "3f2a9c1d0000", workflow: str = "notes") -> Any:
    turn = SimpleNamespace(slot="writer", iid=f"{run_id}.t1", state="notes.writing")
    return SimpleNamespace(run_id=run_id, workflow_name=workflow, broken=None, turns={turn.iid: turn},
                           status_name=lambda: "active"), turn


def test_every_series_has_bounded_labels_only() -> None:
    for name, (kind, desc, tags, bounds) in telemetry.SERIES.items():
        assert name.startswith("jr2ray_") and desc
        assert set(tags) <= BOUNDED, (name, tags)  # never a run id, an iid or a gate id
        assert (bounds is not None) == (kind == "histogram")


def test_without_ray_the_events_only_log(fresh_log: logging.Logger, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    # A process not connected to Ray (the whole suite may have joined one earlier in this process).
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(telemetry, "_metrics", {})
    monkeypatch.setattr(telemetry, "_ray_ok", None)
    assert telemetry._metric("jr2ray_picks") is None  # no Ray here: no metric object, and no error
    path = telemetry.setup("host", tmp_path)
    assert path is not None and path.parent == tmp_path.resolve() / "logs" and path.name.startswith("host-")
    eng, turn = _engine()
    telemetry.turn_opened(eng, turn)
    telemetry.run_broken(eng, "drifted", "journal digest a != machine digest b")
    telemetry.turn_closed(eng, turn)
    telemetry.flush()  # the lines are written by the writer thread, in batches
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["event"] for x in lines] == ["turn.opened", "run.drifted", "turn.closed"]
    first = lines[0]
    assert {"ts", "level", "event", "component", "run", "iid", "workflow", "seat"} <= set(first)
    assert first["component"] == "host" and first["run"] == eng.run_id and first["workflow"] == "notes"
    assert "version" not in first  # unknown: left out, never written as null
    assert lines[1]["level"] == "warning" and lines[1]["reason"].startswith("journal digest")
    assert lines[2]["seconds"] >= 0


async def test_a_pick_and_a_gate_event_log_their_verdicts(fresh_log: logging.Logger, tmp_path: Path) -> None:
    path = telemetry.setup("host", tmp_path)
    assert path is not None
    eng, turn = _engine()

    async def receipt() -> Any:
        return SimpleNamespace(refused="not_at_rest")

    got = await telemetry.picked(eng, turn.iid, "done", receipt())
    assert got.refused == "not_at_rest"

    class UnknownGate(Exception):
        pass

    def refuse() -> None:
        raise UnknownGate("no open Gate")

    with pytest.raises(UnknownGate):
        telemetry.gate_event(eng, "notes.writing.asking", "reply", refuse)
    assert telemetry.gate_event(eng, "notes.writing.asking", "reply", lambda: "ok") == "ok"
    telemetry.flush()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["event"], x.get("verdict")) for x in lines] == [
        ("pick.refused", "not_at_rest"), ("gate.refused", "unknown_gate"), ("gate.event", None)]
    assert lines[0]["seat"] == "writer" and lines[0]["iid"] == turn.iid


async def test_telemetry_off_records_nothing_and_passes_results_through(
        fresh_log: logging.Logger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`JR2RAY_TELEMETRY=off`: the entry point's setting reaches `setup`, which then opens no file, and no event
    touches a metric or the log; picks and Gate events still return (or raise) what they did."""
    monkeypatch.setenv("JR2RAY_TELEMETRY", "off")
    settings = load_settings()
    assert settings.telemetry is False
    on_path = telemetry.setup("host", tmp_path)  # a file from before, switched off below: it is closed, not written
    assert on_path is not None

    def no_metric(name: str) -> None:
        raise AssertionError(f"metric {name} touched with telemetry off")

    monkeypatch.setattr(telemetry, "_metric", no_metric)
    try:
        assert telemetry.setup("host", tmp_path, on=settings.telemetry) is None
        assert not telemetry.enabled() and not fresh_log.handlers
        eng, turn = _engine()
        telemetry.turn_opened(eng, turn)
        telemetry.turn_closed(eng, turn)
        telemetry.run_activated(eng, 0.0, first=True)
        telemetry.runs_started([("r1", {"workflow": "notes"})])
        telemetry.effect_finished(eng, "e1", "shell", "ok", telemetry.effect_started(eng, "e1", "shell"))
        telemetry.run_counts({("notes", "active"): 1}, {}, 0, 4)

        async def receipt() -> Any:
            return SimpleNamespace(refused=None)

        assert (await telemetry.picked(eng, turn.iid, "done", receipt())).refused is None
        with pytest.raises(KeyError):
            telemetry.gate_event(eng, "g", "reply", lambda: {}["x"])
        telemetry.flush()
        assert not on_path.exists() or on_path.read_text() == ""
        assert not list((tmp_path / "logs").glob("*-*.jsonl")) or on_path.read_text() == ""
    finally:
        telemetry.setup("host", tmp_path, on=True)  # the process default again
    assert telemetry.enabled()


def test_an_asked_for_metrics_port_that_is_taken_stops_up(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(CliError, match=f"metrics port {taken} is already taken"):
            metrics_port_for(load_settings(), taken)
        monkeypatch.setattr("jr2ray.settings.DEFAULT_METRICS_PORT", taken)  # the default, taken: a free one
        free = metrics_port_for(load_settings(metrics_port=taken), None)
        assert free != taken and free > 0
    assert metrics_port_for(load_settings(metrics_port=0), None) > 0
    assert load_settings().metrics_port == DEFAULT_METRICS_PORT


def _write(where: Path, name: str, lines: list[dict[str, Any]]) -> None:
    where.mkdir(parents=True, exist_ok=True)
    with (where / name).open("a") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")


def test_logs_merge_files_in_time_order_and_filter_by_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "logs"
    _write(where, "registry-1.jsonl", [{"ts": "2026-01-01T00:00:01.000Z", "event": "run.started", "run": "aaaa1111"},
                                       {"ts": "2026-01-01T00:00:01.500Z", "event": "run.started", "run": "aaab2222"}])
    _write(where, "host-2.jsonl", [{"ts": "2026-01-01T00:00:02.000Z", "event": "turn.opened", "iid": "aaaa1111.t1"},
                                   {"ts": "2026-01-01T00:00:00.500Z", "event": "timer.fired", "run": "aaaa1111"}])
    (where / "host-2.jsonl").open("a").write('{"ts": "2026-01-01T00:00:03.000Z", "event": "torn')  # mid-write
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    assert main(["logs", "aaaa", "--json"]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["event"] for x in got] == ["timer.fired", "run.started", "turn.opened"]
    assert main(["logs"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert len(plain) == 4 and plain[0].startswith("2026-01-01T00:00:00.500Z timer.fired aaaa1111")
    assert main(["logs", "aaa"]) == 2 and "shorter than 4" in capsys.readouterr().err
    assert main(["logs", "aaa1"]) == 1 and "no run matches 'aaa1'" in capsys.readouterr().err
    with pytest.raises(CliError, match="ambiguous"):
        logs.resolve("aaab", [{"run": "aaab1"}, {"run": "aaab2"}])


def test_follow_prints_lines_written_later(tmp_path: Path) -> None:
    where = tmp_path / "logs"
    _write(where, "host-1.jsonl", [{"ts": "1", "event": "run.parked", "run": "r1"}])
    files = logs.LogFiles(where)
    assert [x["event"] for x in files.new_lines()] == ["run.parked"]
    _write(where, "host-1.jsonl", [{"ts": "2", "event": "run.woken", "run": "r1"}])
    _write(where, "timers-9.jsonl", [{"ts": "3", "event": "timer.fired", "run": "r2"}])
    got = list(logs.stream(files, "r1", follow=True, poll_s=0.01, rounds=2))
    assert [x["event"] for x in got] == ["run.woken"]  # the other run's line is left out; nothing is shown twice


def test_no_logs_directory_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path))
    assert main(["logs"]) == 1
    assert str(errors.no_logs(tmp_path / "logs")) in capsys.readouterr().err


def test_a_gate_is_logged_closed_when_its_state_is_left_not_when_the_run_parks(fresh_log: logging.Logger,
                                                                               tmp_path: Path) -> None:
    """Parking stops the run's interpreter, which stops its Gate slots; the Gate is still open for the people who
    answer it, so only a real close (an event, a timer, a cancel) logs `gate.closed`."""
    from jr2ray.run.gates import Gates

    path = telemetry.setup("host", tmp_path)
    assert path is not None
    eng, _turn = _engine()
    emitted: list[tuple[str, Any]] = []
    writer = SimpleNamespace(emit=lambda kind, data: emitted.append((kind, data)))
    gates = Gates(eng, writer)  # type: ignore[arg-type]
    stops: list[Any] = []

    def handle(gid: str) -> Any:
        return SimpleNamespace(id=gid, input={}, record=SimpleNamespace(state="notes.writing"), on_stop=stops.append)

    gates.open(handle("notes.writing.asking"))
    eng.run_status = "active"
    eng.broken = "deactivated"  # as the host sets it before it stops a parking run's interpreter
    stops.pop()()
    eng.broken = None  # woken again: the slot starts again, and this time an event leaves its state
    gates.open(handle("notes.writing.asking"))
    stops.pop()()
    gates.open(handle("notes.writing.asking"))  # woken once more, then its journal is found lost: the run ends
    eng.broken, eng.run_status = "journal gone", "lost"
    stops.pop()()
    telemetry.flush()
    events = [json.loads(x)["event"] for x in path.read_text().splitlines()]
    assert events == ["gate.opened", "gate.opened", "gate.closed", "gate.opened", "gate.closed"]


def test_a_local_run_script_exits_without_a_trace_from_the_telemetry_writer() -> None:
    """A script that drives a LocalRun never imports Ray: the telemetry writer must not import it either (it did,
    from its own thread while the interpreter shut down, and every such script printed a traceback at exit)."""
    import os
    import subprocess
    import sys

    script = (
        "import asyncio\n"
        "from jr2ray.run import LocalRun, load_workflow\n"
        "async def main():\n"
        "    run = LocalRun(load_workflow('notes'), {'changes': 'x'}, launcher=None)\n"
        "    await asyncio.sleep(0.05)\n"
        "    run.cancel()\n"
        "asyncio.run(main())\n"
        "import sys; print('ray' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JR2RAY_TELEMETRY": "off"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == "False"  # and the script's process never loaded Ray
