"""The environment `jr2ray up` starts Ray with: the instance's Ray settings, under the caller's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jr2ray.cli.rayproc import ray_env
from jr2ray.run.ray_start import OTHER_WORKERS, STARTUP_VAR, TASK_EVENTS_VAR, startup_concurrency


def test_the_instance_keeps_fewer_task_events_unless_the_caller_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TASK_EVENTS_VAR, raising=False)
    env = ray_env(tmp_path)
    assert int(env[TASK_EVENTS_VAR]) < 100_000  # Ray's own default
    assert env["JR2RAY_HOME"] == str(tmp_path)
    monkeypatch.setenv(TASK_EVENTS_VAR, "500")
    assert ray_env(tmp_path)[TASK_EVENTS_VAR] == "500"


@pytest.mark.parametrize("slots", [0, 4, 30, 163])
def test_the_raylet_s_startup_bound_fits_the_pool_so_it_does_not_warn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int) -> None:
    """The raylet warns once its Python workers reach 4 times its startup concurrency: a pool of `slots` hosts and
    the instance's other actors stay under that, and the bound is never below Ray's own (the CPU count)."""
    monkeypatch.delenv(STARTUP_VAR, raising=False)
    bound = int(ray_env(tmp_path, None, slots)[STARTUP_VAR])
    assert bound == startup_concurrency(slots)
    assert slots + OTHER_WORKERS < 4 * bound
    assert bound >= (os.cpu_count() or 1)
    monkeypatch.setenv(STARTUP_VAR, "3")
    assert ray_env(tmp_path, None, slots)[STARTUP_VAR] == "3"
