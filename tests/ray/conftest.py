"""The ray tier: a real local Ray instance for the session, and a client whose runs are Ray actors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance_fakes import FakeModelServer

pytestmark = pytest.mark.ray


@pytest.fixture(scope="session")
def ray_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jr2ray_home")


@pytest.fixture(scope="module")
def client(ray_home: Path) -> Iterator[object]:
    """A private Ray per test module, shut down after it, so later tiers (vllm) start the Ray they need."""
    import ray

    import jr2ray

    os.environ["JR2RAY_HOME"] = str(ray_home)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, namespace="jr2ray", include_dashboard=False, log_to_driver=False)
    # Agents here are played by the test over surface/pick (the documented external driver).
    c = jr2ray.connect(store=ray_home / "runs", launcher=None)
    yield c
    ray.shutdown()


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModelServer]:
    """The recording fake model server (tests/conformance), one per test module that asks for it."""
    with FakeModelServer() as server:
        yield server
