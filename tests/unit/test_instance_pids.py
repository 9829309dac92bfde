"""`down` finds every process of the Ray its home started, by pid: those naming its temp dir, and the Ray Client
server `ray start` leaves as an orphan that names only the head's address."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jr2ray.run.head import instance_pids


@pytest.fixture
def client_server() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line reads like Ray's client server for a head at 127.0.0.1:6399."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "ray.util.client.server",
                             "--address=127.0.0.1:6399", "--mode=proxy"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def test_the_client_server_of_the_homes_head_is_found_by_its_address(client_server: subprocess.Popen[bytes],
                                                                      tmp_path: Path) -> None:
    temp_dir = str(tmp_path / "ray-temp")
    assert client_server.pid in instance_pids(temp_dir, "127.0.0.1:6399")
    assert client_server.pid not in instance_pids(temp_dir, "127.0.0.1:6400")  # another head's: not ours
    assert client_server.pid not in instance_pids(temp_dir)  # no address given: only the temp dir counts
