"""Sharing the server fairly: the event loop's share and the recognition queue, on their own."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from duplex.app.edge.fairness import FairQueue, LoopShare, Moot, RealTime


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
    await share.wait("live")
    assert share.held.get("live", 0.0) == 0.0, "the session that used nothing does not wait"
    t0 = loop.time()
    await share.wait("flood")
    waited = loop.time() - t0
    assert waited >= 0.04 / 0.25 * 0.9, f"the flood waits for its share to pay its debt ({waited:.3f} s)"


async def test_a_garbage_collection_in_a_sessions_turn_is_not_billed_to_it():
    share = LoopShare(0.5, burst_s=0.001)
    heap = [[i] for i in range(1_000_000)]  # a heap whose full collection takes tens of ms
    t0 = time.perf_counter()
    with share.charge("light"):
        gc.collect()  # the process's work: it falls in whichever block allocates
    took = time.perf_counter() - t0
    assert took > 0.01, f"the collection took only {took * 1000:.1f} ms: no test"
    await share.wait("light")
    assert share.held.get("light", 0.0) == 0.0, "held for the process's collection"
    with share.charge("light"):
        _busy(took)  # the same time of its own work is billed
    await share.wait("light")
    assert share.held["light"] >= (took - 0.001) / 0.5 * 0.9
    del heap


async def test_the_share_is_split_among_active_sessions_and_a_gone_one_is_forgotten():
    share = LoopShare(0.6, burst_s=0.01)
    for owner in ("a", "b", "c"):
        await share.wait(owner)
    assert share._rate(asyncio.get_running_loop().time()) == pytest.approx(0.2)
    share.forget("c")
    assert share._rate(asyncio.get_running_loop().time()) == pytest.approx(0.3)


async def test_an_account_left_short_of_full_stops_counting_once_it_would_have_refilled():
    # However an account was left (its owner charged after it was forgotten), it must not
    # take a part of the loop for ever: a hundred of them cut every live share a hundredfold.
    share = LoopShare(0.5, burst_s=0.01)
    now = asyncio.get_running_loop().time()
    for owner in range(100):
        with share.charge(owner):
            _busy(0.0001)  # a little: just short of a full bucket, and never touched again
        assert share._accounts[owner].tokens < share.burst
    share._account("live", now)
    assert share._rate(now) == pytest.approx(0.5 / 101)
    for second in range(1, 11):  # the live session goes on; each of the others would have refilled by then
        share._account("live", now + second)
    assert list(share._accounts) == ["live"]
    assert share._rate(now + 10) == pytest.approx(0.5)


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


async def test_a_session_is_charged_the_wall_time_it_held_the_loop_for():
    # While a block runs no other session is served, whether the loop's thread computes
    # or is off the CPU: charged in CPU time, pause storms on a busy CPU were billed a
    # third of what they held the loop for and froze every other session.
    share = LoopShare(0.5, burst_s=0.01)
    await share.wait("flood")
    with share.charge("flood"):
        time.sleep(0.05)  # off the CPU, holding the loop all the same
    assert share._accounts["flood"].tokens < -0.03


def test_audio_at_real_time_is_let_through_and_faster_audio_is_not():
    pace = RealTime(0.0, slack_s=1.0, speed=1.0)
    assert all(pace.take(0.1, 0.1 * i) for i in range(1, 200)), "20 s of audio over 20 s: always real time"
    assert pace.take(0.5, 20.0), "a late burst within the slack"
    taken = 0
    while pace.take(0.1, 20.0):
        taken += 1
    assert taken == 5, "a flood: the slack's worth of it, then not"
    t = 20.0
    for _ in range(10):  # the flood goes on at twice real time
        t += 0.05
        assert not pace.take(0.1, t), "a flood does not earn a real-time session's floor"
    t += 2.0  # quiet long enough to pay for the excess
    assert pace.take(0.1, t), "back at real time, it is let through again"
    idle = RealTime(0.0, slack_s=1.0)
    assert idle.take(1.0, 60.0) and not idle.take(0.1, 60.0), "a minute of silence earns no more than the slack"


async def test_spare_jobs_run_only_on_an_idle_queue_one_at_a_time_the_latest_per_owner():
    queue = FairQueue(workers=2)
    gates = {name: asyncio.Event() for name in ("turn", "turn2", "pa", "pb", "pa2", "pc")}
    started: list[str] = []

    async def job(name: str) -> str:
        started.append(name)
        await gates[name].wait()
        return name

    def run(name: str, *, spare: bool, owner: str) -> asyncio.Task[str]:
        return asyncio.create_task((queue.spare if spare else queue.run)(owner, lambda: job(name)))

    turn = run("turn", spare=False, owner="x")
    pa = run("pa", spare=True, owner="a")
    await asyncio.sleep(0)
    assert started == ["turn"], "a spare job waits while anything else runs (the workers share the CPU)"
    gates["turn"].set()
    await turn
    await asyncio.sleep(0)
    assert started == ["turn", "pa"]
    pb, pc = run("pb", spare=True, owner="b"), run("pc", spare=True, owner="c")
    turn2 = run("turn2", spare=False, owner="y")
    await asyncio.sleep(0)
    assert started == ["turn", "pa", "turn2"], "one spare job at a time, and an ordinary job finds a worker"
    with pytest.raises(Moot):
        await run("pa2", spare=True, owner="a")  # while a's own still runs: dropped
    gates["pa"].set()
    await pa
    pa2 = run("pa2", spare=True, owner="a")  # "a" waits again, behind "b" and "c"
    await asyncio.sleep(0)
    assert started[-1] == "turn2", "no spare job beside an ordinary one"
    gates["turn2"].set()
    await turn2
    await asyncio.sleep(0)
    assert started[-1] == "pb", "spare jobs go in the order their owners began to wait"
    pc_newer = run("pc", spare=True, owner="c")  # replaces c's waiting one, keeping c's place
    with pytest.raises(Moot):
        await pc
    for name in ("pb", "pc", "pa2"):
        gates[name].set()
    assert await asyncio.gather(pb, pc_newer, pa2) == ["pb", "pc", "pa2"]
    assert started[-3:] == ["pb", "pc", "pa2"], started
    assert queue.running == queue.spare_running == 0


async def test_an_urgent_spare_job_waits_for_its_owners_running_one_the_latest_only():
    # A partial judging speech over a reply: dropped while the last decoded, the cancel came a
    # step (0.1 s) later whenever a decode outlasted a step.
    queue = FairQueue(workers=2)
    gates = {name: asyncio.Event() for name in ("p1", "p2", "p3")}
    started: list[str] = []

    async def job(name: str) -> str:
        started.append(name)
        await gates[name].wait()
        return name

    p1 = asyncio.create_task(queue.spare("a", lambda: job("p1"), behind=True))
    await asyncio.sleep(0)
    p2 = asyncio.create_task(queue.spare("a", lambda: job("p2"), behind=True))
    await asyncio.sleep(0)
    assert started == ["p1"], "one at a time per owner still"
    p3 = asyncio.create_task(queue.spare("a", lambda: job("p3"), behind=True))
    with pytest.raises(Moot):
        await p2  # the newer one replaces it: only the latest audio is worth decoding
    gates["p1"].set()
    assert await p1 == "p1"
    await asyncio.sleep(0)
    assert started == ["p1", "p3"], "it starts as soon as its owner's last one ends"
    gates["p3"].set()
    assert await p3 == "p3"
    assert queue.running == queue.spare_running == 0


async def test_a_spare_job_gives_way_to_its_owners_ordinary_one_and_a_cancelled_one_leaves_the_line():
    queue = FairQueue(workers=1)
    release = asyncio.Event()

    async def job() -> None:
        await release.wait()

    running = asyncio.create_task(queue.run("a", job))
    superseded = asyncio.create_task(queue.spare("a", job))
    await asyncio.sleep(0)
    later = asyncio.create_task(queue.run("a", job))  # the turn's own transcript
    with pytest.raises(Moot):
        await superseded
    waiting = asyncio.create_task(queue.spare("b", job))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert not queue._spare
    release.set()
    await asyncio.gather(running, later)
    assert queue.running == queue.spare_running == 0
