"""The environment `jr2ray up` starts Ray with: the instance's Ray settings, under the caller's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from jr2ray.cli.rayproc import ray_env
from jr2ray.run.ray_start import INSTANCE_RAY_ENV


def test_the_instance_keeps_fewer_task_events_unless_the_caller_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_task_events_max_num_task_in_gcs", raising=False)
    env = ray_env(tmp_path)
    assert env["RAY_task_events_max_num_task_in_gcs"] == INSTANCE_RAY_ENV["RAY_task_events_max_num_task_in_gcs"]
    assert int(env["RAY_task_events_max_num_task_in_gcs"]) < 100_000  # Ray's own default
    assert env["JR2RAY_HOME"] == str(tmp_path)
    monkeypatch.setenv("RAY_task_events_max_num_task_in_gcs", "500")
    assert ray_env(tmp_path)["RAY_task_events_max_num_task_in_gcs"] == "500"
