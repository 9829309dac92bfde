"""jr2ray.run.progress: a bar of runs with counts by status, off (and free) when its stream is not a terminal."""

from __future__ import annotations

import io
import sys

import pytest

from jr2ray.run import progress
from jr2ray.run.progress import Progress, format_counts


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_counts_read_in_the_order_runs_go_through_them() -> None:
    assert format_counts({"done": 10, "active": 80, "queued": 10}) == "queued 10 active 80 done 10"
    assert format_counts({"zz": 1, "error": 2, "queued": 0, "aa": 3}) == "error 2 aa 3 zz 1"  # empty ones left out


def test_off_when_the_stream_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()  # a pipe or a CI log: isatty() is False
    monkeypatch.delitem(sys.modules, "tqdm", raising=False)
    with Progress(100, file=out, desc="runs") as bar:
        assert not bar.enabled
        bar.update({"queued": 10, "active": 80, "done": 10}, done=10)
    assert out.getvalue() == ""
    assert "tqdm" not in sys.modules  # off costs nothing: tqdm is not even imported


def test_off_on_a_non_terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not Progress(3).enabled


def test_on_when_its_stream_is_a_terminal() -> None:
    out = Tty()
    with Progress(2, file=out) as bar:
        assert bar.enabled
        bar.update({"active": 2}, done=0)
    assert "active 2" in out.getvalue()


def test_forced_on_it_writes_the_counts_and_closes_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "MIN_INTERVAL_S", 0.0)  # every update draws
    out = io.StringIO()
    bar = Progress(100, enabled=True, desc="notes", file=out)
    bar.update({"queued": 10, "active": 80, "done": 10}, done=10)
    assert "queued 10 active 80 done 10" in out.getvalue() and "10/100" in out.getvalue()
    bar.update({"active": 40, "done": 55, "error": 5})  # done defaults to the finished statuses: 60
    bar.close()
    text = out.getvalue()
    last = text.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("notes:") and "60/100" in last and last.endswith("active 40 done 55 error 5]"), text
    assert text.endswith("\n")  # the bar's line is ended
    bar.close()  # twice: nothing more
    bar.update({"done": 100}, done=100)  # after close: ignored
    assert out.getvalue() == text


def test_a_burst_of_updates_draws_a_few_times_and_the_last_counts_win() -> None:
    out = io.StringIO()
    with Progress(10_000, enabled=True, file=out) as bar:
        for i in range(10_000):
            bar.update({"active": 10_000 - i - 1, "done": i + 1}, done=i + 1)
    text = out.getvalue()
    assert text.count("\r") < 50  # redraws are rate limited, not one per call
    assert "10000/10000" in text and text.rstrip().endswith("done 10000]")


def test_a_drivers_progress_true_draws_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`start_many(progress=True)` and the waits ask for a bar where it can be seen: a piped stderr gets none."""
    from jr2ray.run.fanout import FinishedBar, progress_bar

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_bar(3, True, "journaled") is None and progress_bar(3, None, "journaled") is None
    off = FinishedBar(3, True)
    off.add(None)  # off: nothing is counted or drawn
    off.close()
    assert sys.stderr.getvalue() == "" and off.by_status == {}

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert progress_bar(3, False, "journaled") is None
    bar = FinishedBar(3, True)

    class Final:
        def __init__(self, status: str) -> None:
            self.status = status

    for status in ("done", "cancelled", "done"):
        bar.add(Final(status))
    bar.close()
    assert bar.by_status == {"done": 2, "cancelled": 1}
    assert "3/3" in tty.getvalue() and "done 2 cancelled 1" in tty.getvalue()
