"""A driver's store reads of parked runs' standings go to a worker thread in gathered jobs: all the reads one step of
the loop asks for, at most READ_BATCH a job, each reader getting its own run's answer (or its own error)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jr2ray.run import standing_reads
from jr2ray.run.errors import UnknownRun
from jr2ray.run.standing_reads import READ_BATCH, StandingReads


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The run ids of each thread job, in order; run `gone` raises UnknownRun, the others answer their own id."""
    seen: list[list[str]] = []
    read_all = standing_reads._read_all

    def counted(reads: list[tuple[Any, str]]) -> list[Any]:
        seen.append([rid for _store, rid in reads])
        return read_all(reads)

    def standing(_store: Any, run_id: str) -> Any:
        if run_id == "gone":
            raise UnknownRun(f"no run {run_id!r}")
        return f"standing of {run_id}"

    monkeypatch.setattr(standing_reads, "_read_all", counted)
    monkeypatch.setattr(standing_reads, "journal_standing", standing)
    return seen


async def test_the_reads_of_one_step_go_in_few_jobs_and_each_reader_gets_its_own_answer(jobs: list[list[str]]) -> None:
    reads = StandingReads.of(asyncio.get_running_loop())
    ids = [f"r{i}" for i in range(2 * READ_BATCH + 10)]
    got = await asyncio.gather(*(reads.read(object(), rid) for rid in ids))  # type: ignore[arg-type]
    assert got == [f"standing of {rid}" for rid in ids]
    assert [len(j) for j in jobs] == [READ_BATCH, READ_BATCH, 10]  # not one job a run


async def test_reads_asked_by_many_tasks_in_one_step_share_a_job_and_a_later_step_gets_its_own(
        jobs: list[list[str]]) -> None:
    loop = asyncio.get_running_loop()

    async def one(rid: str) -> Any:
        return await StandingReads.of(loop).read(object(), rid)  # type: ignore[arg-type]

    tasks = [asyncio.ensure_future(one(f"t{i}")) for i in range(40)]  # each asks in the same step of the loop
    assert await asyncio.gather(*tasks) == [f"standing of t{i}" for i in range(40)]
    assert await one("later") == "standing of later"
    assert jobs == [[f"t{i}" for i in range(40)], ["later"]]


async def test_a_read_that_fails_fails_only_its_own_reader(jobs: list[list[str]]) -> None:
    reads = StandingReads.of(asyncio.get_running_loop())
    got = await asyncio.gather(reads.read(object(), "a"), reads.read(object(), "gone"),  # type: ignore[arg-type]
                               reads.read(object(), "b"), return_exceptions=True)  # type: ignore[arg-type]
    assert got[0] == "standing of a" and got[2] == "standing of b"
    assert isinstance(got[1], UnknownRun)
    assert jobs == [["a", "gone", "b"]]


async def test_a_reader_that_stopped_waiting_leaves_the_others_answered(jobs: list[list[str]]) -> None:
    reads = StandingReads.of(asyncio.get_running_loop())
    a, b = reads.read(object(), "a"), reads.read(object(), "b")  # type: ignore[arg-type]
    a.cancel()  # its caller gave up before the job ran
    assert await b == "standing of b"
    assert a.cancelled() and jobs == [["a", "b"]]


def test_readers_hear_it_when_no_thread_is_left_to_read_in() -> None:
    """A loop whose default executor is shut down (a script's `asyncio.run` ending) cannot start the job: every
    reader of that step gets an error, none waits forever."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(loop.shutdown_default_executor())
        reads = StandingReads.of(loop)

        async def both() -> Any:
            return await asyncio.gather(reads.read(object(), "a"), reads.read(object(), "b"),  # type: ignore[arg-type]
                                        return_exceptions=True)

        got = loop.run_until_complete(asyncio.wait_for(both(), 5))
    finally:
        loop.close()
    assert all(isinstance(g, RuntimeError) and "reading parked runs' standings" in str(g) for g in got), got
    assert got[0] is not got[1]
