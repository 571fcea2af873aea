"""The one synthesis pool every voice runs on: first segments first, cancelled jobs
skipped or stopped and never delivered, failures delivered as TalkerError."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pytest

from duplex.pipeline.talker import TalkerError
from duplex.pipeline.talkers.pool import Job, SynthesisPool


@dataclass(eq=False)
class _Job(Job[str]):
    text: str = ""


class _Maker:
    """Makes ``text.upper()``; a job named ``hold`` waits for ``release``."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, job: _Job) -> str:
        if job.text == "hold":
            self.holding.set()
            assert self.release.wait(10)
        if job.text == "fail":
            raise RuntimeError("no voice")
        self.made.append(job.text)
        return job.text.upper()


def _job(text: str, *, first: bool = False) -> _Job:
    loop = asyncio.get_running_loop()
    return _Job(loop, first, loop.create_future(), text=text)


async def _idle(pool: SynthesisPool[_Job]) -> None:
    assert await asyncio.to_thread(pool.wait_idle, 10)


@pytest.fixture
def maker() -> _Maker:
    return _Maker()


@pytest.fixture
def pool(maker: _Maker):
    pool: SynthesisPool[_Job] = SynthesisPool(maker, workers=1, nice=None, name="test")
    yield pool
    maker.release.set()
    pool.close()


async def test_a_first_segment_jumps_the_queue(pool: SynthesisPool[_Job], maker: _Maker):
    pool.submit(hold := _job("hold"))
    assert await asyncio.to_thread(maker.holding.wait, 10)
    later = [_job("b"), _job("c")]
    for job in later:
        pool.submit(job)
    pool.submit(first := _job("a", first=True))
    maker.release.set()
    assert [await j.done for j in (hold, first, *later)] == ["HOLD", "A", "B", "C"]
    assert maker.made == ["hold", "a", "b", "c"]
    await _idle(pool)
    assert (pool.started, pool.made, pool.stopped, pool.skipped) == (4, 4, 0, 0)


async def test_cancelled_jobs_are_skipped_or_stopped_and_never_delivered(pool: SynthesisPool[_Job], maker: _Maker):
    pool.submit(held := _job("hold"))
    assert await asyncio.to_thread(maker.holding.wait, 10)
    pool.submit(queued := _job("queued"))
    queued.cancel()  # before it starts: skipped
    held.cancel()  # while it is made: made, but not delivered
    maker.release.set()
    await _idle(pool)
    await asyncio.sleep(0.05)  # anything delivered would have reached the loop by now
    assert not held.done.done() and not queued.done.done()
    assert maker.made == ["hold"]
    assert (pool.started, pool.made, pool.stopped, pool.skipped) == (1, 0, 2, 1)


async def test_a_failure_fails_its_job_not_the_pool(pool: SynthesisPool[_Job]):
    pool.submit(failing := _job("fail"))
    with pytest.raises(TalkerError, match="test: no voice"):
        await failing.done
    pool.submit(after := _job("ok"))
    assert await after.done == "OK"


async def test_a_closed_pool_refuses_work(maker: _Maker):
    pool: SynthesisPool[_Job] = SynthesisPool(maker, workers=2, nice=None, name="test")
    pool.submit(job := _job("last"))
    await asyncio.to_thread(pool.close)
    assert await job.done == "LAST", "what was queued before the close is made"
    with pytest.raises(TalkerError, match="stopped"):
        pool.submit(_job("late"))
    assert pool.wait_idle(0)
