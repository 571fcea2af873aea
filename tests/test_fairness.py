"""Sharing the server fairly: the event loop's share and the recognition queue, on their own."""

from __future__ import annotations

import asyncio
import time

import pytest

from duplex.app.edge.fairness import FairQueue, LoopShare


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_a_session_that_uses_its_share_waits_and_one_that_does_not_never_does():
    share = LoopShare(0.5, burst_s=0.01)
    loop = asyncio.get_running_loop()
    await share.wait("flood")
    await share.wait("live")  # both are active: each may have 0.25 s of loop per second
    with share.charge("flood"):
        _busy(0.05)  # far past its burst: it is in debt
    t0 = loop.time()
    await share.wait("live")
    assert loop.time() - t0 < 0.005, "the session that used nothing does not wait"
    t0 = loop.time()
    await share.wait("flood")
    waited = loop.time() - t0
    assert waited >= 0.04 / 0.25 * 0.9, f"the flood waits for its share to pay its debt ({waited:.3f} s)"


async def test_the_share_is_split_among_active_sessions_and_a_gone_one_is_forgotten():
    share = LoopShare(0.6, burst_s=0.01)
    for owner in ("a", "b", "c"):
        await share.wait(owner)
    assert share._rate(asyncio.get_running_loop().time()) == pytest.approx(0.2)
    share.forget("c")
    assert share._rate(asyncio.get_running_loop().time()) == pytest.approx(0.3)


async def test_the_fair_queue_runs_owners_in_turn_on_its_workers():
    queue = FairQueue(workers=1)
    started: list[str] = []
    gate = asyncio.Event()

    async def job(name: str) -> str:
        started.append(name)
        await gate.wait()
        return name

    tasks = [asyncio.create_task(queue.run("flood", lambda i=i: job(f"flood{i}"))) for i in range(4)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(queue.run("other", lambda: job("other"))))
    await asyncio.sleep(0)
    assert queue.pending("flood") == 3 and queue.pending("other") == 1
    gate.set()
    await asyncio.gather(*tasks)
    assert started.index("other") == 2, started  # after the job running and one more of the flood's


async def test_cancelled_jobs_leave_the_queue_at_once():
    queue = FairQueue(workers=1)
    release = asyncio.Event()

    async def job() -> None:
        await release.wait()

    running = asyncio.create_task(queue.run("a", job))
    queued = [asyncio.create_task(queue.run("b", job)) for _ in range(3)]
    await asyncio.sleep(0)
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert queue.pending("b") == 0
    release.set()
    await running
    assert queue.running == 0
