"""Sharing the server fairly: the input budget and the recognition queue, on their own."""

from __future__ import annotations

import asyncio

import pytest

from duplex.app.edge.fairness import FairQueue, InputBudget


async def test_the_input_budget_serves_waiting_sessions_round_robin():
    budget = InputBudget(rate=10.0, burst_s=0.01)  # room for one slice: then each waits ~1 ms for its tokens
    order: list[str] = []

    async def session(name: str, slices: int) -> None:
        for _ in range(slices):
            await budget.spend(name, 0.01)
            order.append(name)

    await asyncio.gather(session("flood", 6), session("live", 2))
    # The flood got there first, but the live session's slices came in turn, not after all of it.
    assert order.index("live") <= 2 and order[-1] == "flood", order
    assert order.count("flood") == 6 and order.count("live") == 2


async def test_the_input_budget_holds_the_total_rate():
    budget = InputBudget(rate=100.0, burst_s=0.05)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.gather(*(budget.spend(f"s{i % 3}", 0.1) for i in range(9)))  # 0.9 s of audio
    assert loop.time() - t0 >= (0.9 - 0.05) / 100.0 * 0.9  # at most 100 s of audio per s, burst aside


async def test_a_cancelled_wait_leaves_the_budget_usable():
    budget = InputBudget(rate=10.0, burst_s=0.01)
    await budget.spend("first", 1.0)  # a full bucket lets one large slice through, then it is owed
    waiting = asyncio.create_task(budget.spend("gone", 1.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    async with asyncio.timeout(5):
        await budget.spend("next", 0.01)


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
