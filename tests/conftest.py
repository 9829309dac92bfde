"""Shared by every tier.

- The recording fake model server lives in tests/conformance and serves other tiers too.
- Under CI (the `CI` environment variable set, and not `0`/`false`) a skip is a failure: a tier whose dependency is
  missing, or a test that would skip, fails the run with its node id and the skip reason, so a green CI run is never
  a partial one. Locally a skip stays a skip. `xfail` is not a skip and is left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "conformance"))

pytest_plugins = ["pytester"]  # tests/unit/test_ci_skips.py runs this file's hooks in a throwaway pytest

_COLLECT_SKIPS = pytest.StashKey[list[tuple[str, str]]]()


def in_ci() -> bool:
    """True when the `CI` environment variable is set to anything but empty, `0` or `false`."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    """The reason pytest recorded for a skip (its long repr is `(path, line, "Skipped: reason")`)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _failure(nodeid: str, reason: str) -> str:
    return f"{nodeid} was skipped under CI, where every tier must run. Skip reason: {reason}"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_COLLECT_SKIPS] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                          pytest.TestReport]:
    """Under CI a skipped test (skip marker, `pytest.skip`, `importorskip` in a fixture) is reported as failed."""
    report = yield
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.longrepr = _failure(item.nodeid, skip_reason(report))
        report.outcome = "failed"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport,
                                                                         pytest.CollectReport]:
    """A module skipped while collecting (`importorskip` at module level) has no test to fail: it is noted here and
    fails the session at its end, so the other tiers still run."""
    report = yield
    if in_ci() and report.skipped:
        collector.config.stash[_COLLECT_SKIPS].append((report.nodeid, skip_reason(report)))
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash[_COLLECT_SKIPS] and exitstatus in (pytest.ExitCode.OK,
                                                                pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = config.stash[_COLLECT_SKIPS]
    if skipped:
        terminalreporter.section("skipped under CI", sep="=", red=True, bold=True)
        for nodeid, reason in skipped:
            terminalreporter.line(_failure(nodeid, reason), red=True)
