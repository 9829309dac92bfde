"""The environment `jr2ray up` starts Ray with: the instance's Ray settings, under the caller's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jr2ray.cli.rayproc import ray_env
from jr2ray.run.ray_start import OTHER_WORKERS, STARTUP_VAR, TASK_EVENTS_VAR, instance_ray_env, startup_concurrency


def test_the_instance_keeps_fewer_task_events_unless_the_caller_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TASK_EVENTS_VAR, raising=False)
    env = ray_env(tmp_path)
    assert int(env[TASK_EVENTS_VAR]) < 100_000  # Ray's own default
    assert env["JR2RAY_HOME"] == str(tmp_path)
    monkeypatch.setenv(TASK_EVENTS_VAR, "500")
    assert ray_env(tmp_path)[TASK_EVENTS_VAR] == "500"


@pytest.mark.parametrize("slots", [0, 4, 30, 47])  # 47: the most the cap (8 a core) fits on 2 cores
def test_the_raylet_s_startup_bound_fits_the_pool_so_it_does_not_warn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int) -> None:
    """The raylet warns once its Python workers reach 4 times its startup concurrency: a pool of `slots` hosts and
    the instance's other actors stay under that, and the bound is never below Ray's own (the CPU count)."""
    monkeypatch.delenv(STARTUP_VAR, raising=False)
    bound = int(ray_env(tmp_path, None, slots)[STARTUP_VAR])
    assert slots + OTHER_WORKERS < 4 * bound
    assert bound >= (os.cpu_count() or 1)
    monkeypatch.setenv(STARTUP_VAR, "3")
    assert ray_env(tmp_path, None, slots)[STARTUP_VAR] == "3"


def test_a_private_ray_s_settings_are_set_only_while_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`connect()` starts a private Ray inside `instance_ray_env`: the GCS and raylet it spawns read the settings
    from the environment then; the caller's own values win and stay, and nothing is left behind, even on a failure."""
    monkeypatch.delenv(TASK_EVENTS_VAR, raising=False)
    monkeypatch.setenv(STARTUP_VAR, "3")
    with instance_ray_env(30):
        seen = {k: os.environ.get(k) for k in (TASK_EVENTS_VAR, STARTUP_VAR)}
    assert seen == {TASK_EVENTS_VAR: "10000", STARTUP_VAR: "3"}
    assert TASK_EVENTS_VAR not in os.environ and os.environ[STARTUP_VAR] == "3"
    with pytest.raises(RuntimeError), instance_ray_env(30):
        raise RuntimeError("ray.init failed")
    assert TASK_EVENTS_VAR not in os.environ and os.environ[STARTUP_VAR] == "3"


def test_the_startup_bound_is_at_most_eight_a_core() -> None:
    """It is the raylet's real limit on workers starting at once, not only its warning level."""
    cores = os.cpu_count() or 1
    assert startup_concurrency(100_000) == 8 * cores
    assert startup_concurrency(0) == max(cores, -(-OTHER_WORKERS // 4) + 1)
