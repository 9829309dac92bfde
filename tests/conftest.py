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


class SkipsFailInCI:
    """Registered as a plugin object, not left as conftest hooks: pytest hides a directory's reports from conftest
    hooks when that directory's own conftest.py skipped on import, and a plugin object sees every report."""

    def __init__(self) -> None:
        self.collect_skips: list[tuple[str, str]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A skipped test (skip marker, `pytest.skip`, `importorskip` in a fixture) is reported as failed."""
        report = yield
        if report.skipped and not hasattr(report, "wasxfail"):
            report.longrepr = _failure(item.nodeid, skip_reason(report))
            report.outcome = "failed"
        return report

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module or directory skipped while collecting (`importorskip` at module or conftest level) has no test
        to fail: it is noted here and fails the session at its end, so the other tiers still run."""
        if report.skipped:
            self.collect_skips.append((report.nodeid or ".", skip_reason(report)))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.collect_skips:
            terminalreporter.section("skipped under CI", sep="=", red=True, bold=True)
            for nodeid, reason in self.collect_skips:
                terminalreporter.line(_failure(nodeid, reason), red=True)


class EndsWithoutTeardown:
    """Once the session's report is printed, the test process ends with its exit status and without the interpreter's
    teardown. A CI run segfaulted (exit 139) after "1534 passed", in that teardown; the cause is not known (this
    process holds Ray's core worker and grpc threads; the last lines before the crash were nanobind leak reports of
    vLLM's workers, which Ray streams to this process). Nothing a test checks runs after the report, so a crash there
    must not turn a finished run red. Ray is shut down first, as its own exit hook would do. Only a process's first
    session does this: a throwaway pytest run in-process (pytester) must not end the process that runs it."""

    def __init__(self) -> None:
        self.status = 0

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.status = int(session.exitstatus)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.status)


_OUTER_ENV = "JR2RAY_OUTER_PYTEST_PID"


def pytest_configure(config: pytest.Config) -> None:
    if in_ci():
        config.pluginmanager.register(SkipsFailInCI(), "jr2ray-skips-fail-in-ci")
    if os.environ.get(_OUTER_ENV) != str(os.getpid()):  # the first session in this process is its outermost one
        os.environ[_OUTER_ENV] = str(os.getpid())
        config.pluginmanager.register(EndsWithoutTeardown(), "jr2ray-ends-without-teardown")
