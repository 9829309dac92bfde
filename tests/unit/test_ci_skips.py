"""Under CI a skip fails the run (tests/conftest.py); locally it stays a skip. Each case runs a throwaway pytest that
loads the real tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

Run = Callable[..., pytest.RunResult]
CONFTEST = (Path(__file__).parents[1] / "conftest.py").read_text()

SKIPPING = '''
import pytest

def test_runs():
    assert True

def test_needs_a_gpu():
    pytest.skip("no GPU on this machine")

@pytest.mark.skipif(True, reason="the console needs chromium")
def test_console():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_known_bug():
    assert False
'''

MISSING_TIER = '''
import pytest

pytest.importorskip("jr2ray_no_such_module")

def test_never_collected():
    pass
'''


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Run:
    pytester.makeconftest(CONFTEST)

    def go(ci: str | None, **modules: str) -> pytest.RunResult:
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        pytester.makepyfile(**modules)
        # A subprocess, so the hooks see this CI value; plugins the throwaway tests do not use stay off (speed).
        off = ["no:cacheprovider", "no:benchmark", "no:hypothesispytest", "no:asyncio", "no:anyio"]
        return pytester.runpytest_subprocess(*(arg for plugin in off for arg in ("-p", plugin)), "-rA")

    return go


def test_a_skipped_test_fails_the_run_under_ci_naming_test_and_reason(run: Run) -> None:
    result = run("1", test_tier=SKIPPING)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # A skip raised while setting up (a skip marker, a fixture's importorskip) fails as a setup error.
    result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
    out = result.stdout.str()
    assert "test_tier.py::test_needs_a_gpu was skipped under CI" in out
    assert "no GPU on this machine" in out
    assert "test_tier.py::test_console was skipped under CI" in out
    assert "the console needs chromium" in out


def test_without_ci_a_skip_stays_a_skip(run: Run) -> None:
    result = run(None, test_tier=SKIPPING)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert "skipped under CI" not in result.stdout.str()


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_ci_set_to_a_false_value_is_not_ci(run: Run, value: str) -> None:
    result = run(value, test_tier=SKIPPING)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)


def test_a_tier_whose_dependency_is_missing_fails_under_ci_and_the_rest_still_runs(run: Run) -> None:
    result = run("true", test_tier=MISSING_TIER, test_other="def test_ok():\n    pass\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=1)
    out = result.stdout.str()
    assert "test_tier.py was skipped under CI" in out
    assert "jr2ray_no_such_module" in out


def test_a_missing_dependency_without_ci_is_a_skip(run: Run) -> None:
    result = run(None, test_tier=MISSING_TIER, test_other="def test_ok():\n    pass\n")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1)


def test_a_run_with_no_skips_passes_under_ci(run: Run) -> None:
    result = run("1", test_ok="def test_ok():\n    pass\n")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


def test_a_tier_whose_conftest_skips_fails_under_ci(run: Run, pytester: pytest.Pytester) -> None:
    tier = pytester.mkdir("tier")
    (tier / "conftest.py").write_text('import pytest\n\npytest.importorskip("jr2ray_no_such_module")\n')
    (tier / "test_in_tier.py").write_text("def test_never_collected():\n    pass\n")
    result = run("1", test_other="def test_ok():\n    pass\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "tier was skipped under CI" in result.stdout.str()
    assert "jr2ray_no_such_module" in result.stdout.str()


CRASHES_AT_EXIT = '''
import atexit
import os
import signal

def test_passes():
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))  # a native library's teardown crashing at exit
'''


def test_a_crash_in_the_interpreters_teardown_after_the_report_keeps_the_runs_status(run: Run) -> None:
    result = run("1", test_exit=CRASHES_AT_EXIT)
    result.assert_outcomes(passed=1)
    assert result.ret == 0
