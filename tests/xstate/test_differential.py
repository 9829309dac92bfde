"""The differential tier: random charts run side by side in the real xstate (runner.mjs, one Node process for all)
and in jr2ray.chart (transition/can); every step's value, action trace, context, status, output and every probe's
can() must agree.

JR2RAY_XSTATE_SEED (default below) and JR2RAY_XSTATE_COUNT (default 2000) pick the charts: chart i is generated
from seed SEED + i. A failure is shrunk to a minimal chart and printed with one command that reproduces it. Without
node or tests/xstate/node_modules the tier skips, except under CI, where it fails.
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from typing import Any

import pytest
from xstate_diff import Outcome, explain, judge, minimal, run_mine
from xstate_features import FEATURES, features
from xstate_gen import generate
from xstate_node import XstateRunner, installed_version, missing

SEED = int(os.environ.get("JR2RAY_XSTATE_SEED", "20261201"))
COUNT = int(os.environ.get("JR2RAY_XSTATE_COUNT", "2000"))
SHRINK_AT_MOST = 3  # failures shrunk and printed in one run (each shrink costs a few seconds)


def _need_xstate() -> None:
    why = missing()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the differential tier cannot run in CI: {why}")
    pytest.skip(why)


@lru_cache(maxsize=4)
def _cases(seed: int, count: int) -> tuple[dict[str, Any], ...]:
    return tuple(generate(seed + i) for i in range(count))


def _repro(seed: int) -> str:
    return (f"JR2RAY_XSTATE_SEED={seed} JR2RAY_XSTATE_COUNT=1 PYTHONPATH=$PWD "
            f"python3 -m pytest -q -p no:cacheprovider "
            f"tests/xstate/test_differential.py::test_jr2ray_agrees_with_xstate_on_random_charts")


def test_jr2ray_agrees_with_xstate_on_random_charts(capsys: pytest.CaptureFixture[str]) -> None:
    _need_xstate()
    t0 = time.monotonic()
    cases = list(_cases(SEED, COUNT))
    with XstateRunner() as runner:
        theirs = runner.start_many(cases)  # xstate works in its process while jr2ray runs here
        mine = [run_mine(c) for c in cases]
        outcomes = [judge(c, x, m) for c, x, m in zip(cases, theirs(), mine)]
        failed = [(i, o) for i, o in enumerate(outcomes) if o.failed]
        report = [_shrunk(runner, SEED + i, cases[i], o) for i, o in failed[:SHRINK_AT_MOST]]
    agree = [o for o in outcomes if not o.failed]
    with capsys.disabled():
        print(f"\n[xstate {installed_version()} differential] seed {SEED}: {len(agree)}/{len(cases)} charts agree, "
              f"{sum(o.steps for o in agree)} steps, {sum(o.probes for o in agree)} probes, "
              f"{time.monotonic() - t0:.1f}s")
    if failed:
        pytest.fail(f"{len(failed)} of {len(cases)} charts disagree with xstate "
                    f"(seeds {[SEED + i for i, _ in failed[:20]]}...)\n\n" + "\n\n".join(report), pytrace=False)


def _shrunk(runner: XstateRunner, seed: int, case: dict[str, Any], outcome: Outcome) -> str:
    small, small_outcome, tries = minimal(runner, case, outcome)
    return (f"--- seed {seed}: shrunk in {tries} tries to:\n{explain(small, small_outcome)}\n"
            f"reproduce: {_repro(seed)}")


def test_the_generated_charts_cover_the_issue_list(capsys: pytest.CaptureFixture[str]) -> None:
    """Every corner the tier claims to check appears in at least 1% of the charts it runs."""
    if COUNT < 500:
        pytest.skip(f"{COUNT} charts are too few to judge coverage")
    cases = _cases(SEED, COUNT)
    seen = {f: 0 for f in FEATURES}
    for c in cases:
        for f in features(c):
            seen[f] += 1
    with capsys.disabled():
        print("\n[xstate differential] charts per feature: "
              + ", ".join(f"{f} {n}" for f, n in sorted(seen.items(), key=lambda kv: kv[1])))
    rare = {f: n for f, n in seen.items() if n < max(1, len(cases) // 100)}
    assert not rare, f"the generator rarely or never makes: {rare}"
