"""`instance.json` is rewritten by `up` (and by the supervisor's `up`) while drivers, `status` and the supervisor read
it. A reader once got '' and failed with a JSON error (tests/cli/test_supervise.py): the file was truncated, then
written. Now it is written whole to a temp file and renamed into place."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from jr2ray.instance_record import INSTANCE_FILE, Instance, read_instance, write_instance


def _instance(i: int) -> Instance:
    return Instance(api=f"http://127.0.0.1:{8000 + i % 1000}", ray_address=f"127.0.0.1:{6000 + i % 1000}",
                    started_ray=True, temp_dir="/tmp/x" * 200)  # a long file: a torn read has room to show


def test_a_reader_never_sees_the_file_half_written_while_it_is_rewritten(tmp_path: Path) -> None:
    write_instance(tmp_path, _instance(0))
    stop = threading.Event()
    torn: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            text = (tmp_path / INSTANCE_FILE).read_text()
            reads[0] += 1
            try:
                Instance.model_validate_json(text)
            except ValueError:
                torn.append(text[:40])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(3000):
            write_instance(tmp_path, _instance(i))
    finally:
        stop.set()
        t.join()
    assert reads[0] > 100, "the reader ran beside the writes"
    assert torn == []
    assert read_instance(tmp_path) == _instance(2999)
    assert stat.S_IMODE((tmp_path / INSTANCE_FILE).stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [INSTANCE_FILE], "no temp file is left beside it"


def test_a_file_an_older_up_left_readable_becomes_private(tmp_path: Path) -> None:
    (tmp_path / INSTANCE_FILE).write_text("{}")
    (tmp_path / INSTANCE_FILE).chmod(0o644)
    write_instance(tmp_path, _instance(1))
    assert stat.S_IMODE((tmp_path / INSTANCE_FILE).stat().st_mode) == 0o600
