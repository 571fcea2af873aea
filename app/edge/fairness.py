"""Sharing the server's work fairly between sessions.

Two shared resources can be flooded by one session at the others' expense: the
event loop's time for listening to input audio, and the recogniser's workers.

* :class:`LoopShare` gives the handling of client messages (decoding, listening to
  audio) at most a share of the event loop, split evenly among the sessions that
  use it: a flooding session waits for its own share to refill.
* :class:`RealTime` lets a session's microphone audio through without waiting or
  being charged while it comes no faster than real time: a session streaming at
  the pace of speech is never held back, however loaded the server is.
* :class:`FairQueue` runs jobs (recognitions) on a fixed number of workers,
  taking the next job from each waiting session in turn rather than first come,
  first served; a session's queued jobs go when it is cancelled. Partial
  transcripts wait in a lane of their own, behind every other job.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
A = TypeVar("A")


class _Collections:
    """Seconds the process has spent collecting garbage, read off ``gc.callbacks``.

    A collection stops the whole loop, whoever's block it falls in; billing it to
    that session put a light one in debt for four times the pause (a 0.15 s
    collection in a round trip of 1 ms held the next one 0.5 s)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._began = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._began


_COLLECTIONS = _Collections()


@dataclass(slots=True)
class _Account:
    tokens: float
    at: float


class LoopShare:
    """A server-wide share of the event loop for handling client messages, split
    evenly among the sessions that use it.

    Each session has a bucket of loop time that refills at ``share / n`` seconds per
    second (``n``: sessions active in the last ``idle_s``) and holds at most
    ``burst_s``. Handling a message costs what it took; a session in debt waits
    before its next one, so its socket is not read meanwhile and TCP holds the
    flood back. A session that needs less than its share (one streaming in real
    time uses under 1% of the loop) never waits, whatever the others do.
    """

    def __init__(self, share: float = 0.5, *, burst_s: float = 0.02, idle_s: float = 1.0) -> None:
        self.share = share
        self.burst = burst_s
        self.idle = idle_s
        self._accounts: dict[Hashable, _Account] = {}
        self.waited = 0.0
        """Seconds sessions spent waiting for their share (for metrics and tests)."""
        self.held: dict[Hashable, float] = {}
        """Those seconds, by session (while it is connected)."""

    def _rate(self, now: float) -> float:
        # An account idle for ``idle_s`` goes once its bucket would have refilled. Judged on
        # what it holds as of ``now``, not when last touched: an account left short of full
        # (its session charged once more as it closed) otherwise counted for ever, and 100 of
        # them cut every session's share a hundredfold (replies after 20 minutes of sessions
        # started 1-3 s late instead of 0.6 s).
        rate = self.share / max(1, len(self._accounts))
        stale = [
            o
            for o, a in self._accounts.items()
            if now - a.at > self.idle and a.tokens + (now - a.at) * rate >= self.burst
        ]
        for owner in stale:
            del self._accounts[owner]
        return self.share / max(1, len(self._accounts))

    def counted(self, now: float) -> int:
        """How many sessions the share is split among at ``now``."""
        self._rate(now)
        return len(self._accounts)

    def _account(self, owner: Hashable, now: float) -> _Account:
        account = self._accounts.get(owner)
        if account is None:
            account = self._accounts[owner] = _Account(self.burst, now)
        else:
            account.tokens = min(self.burst, account.tokens + (now - account.at) * self._rate(now))
            account.at = now
        return account

    async def wait(self, owner: Hashable) -> None:
        """Until ``owner`` has loop time to spend."""
        loop = asyncio.get_running_loop()
        account = self._account(owner, loop.time())
        while account.tokens < 0:
            pause = -account.tokens / self._rate(loop.time())
            self.waited += pause
            self.held[owner] = self.held.get(owner, 0.0) + pause
            await asyncio.sleep(pause)  # a rate limit: this session's share refills meanwhile
            account = self._account(owner, loop.time())

    @contextmanager
    def charge(self, owner: Hashable) -> Iterator[None]:
        """Charge ``owner`` the loop time the block takes (it must not await).

        Wall time, not the thread's CPU time: while the block runs nobody else's
        messages are handled, whether the loop's thread computes or waits for a core.
        (Charged in CPU time, two sessions flooding pause-heavy speech were billed a
        third of what they held the loop for on a busy CPU, and a third session's
        round trip went from 3 ms to 1.3 s.) Garbage collection is left out: it is
        the process's work, done in whichever block happens to allocate."""
        start, collecting = time.perf_counter(), _COLLECTIONS.spent
        try:
            yield
        finally:
            took = time.perf_counter() - start - (_COLLECTIONS.spent - collecting)
            account = self._account(owner, asyncio.get_running_loop().time())
            account.tokens -= took

    def forget(self, owner: Hashable) -> None:
        """A session that has gone."""
        self._accounts.pop(owner, None)
        self.held.pop(owner, None)

    def gate(self, owner: Hashable) -> OwnerGate:
        """``owner``'s share, as a reply's stages use it."""
        return OwnerGate(self, owner)


class RealTime:
    """Whether a session's microphone audio comes no faster than real time.

    A bucket of audio seconds that refills at ``speed`` seconds per second (a little
    over real time: capture clocks drift) and holds ``slack_s`` (network jitter, a tab
    that was in the background): audio it covers is heard at once, without waiting
    for the session's :class:`LoopShare`. On a loaded CPU, listening to real-time
    audio can cost more wall time than an even share of the loop; throttled, such
    sessions fell behind real time, their keepalive pings queued behind their own
    audio, and they were closed. Audio that comes faster (a flood, a replay) waits
    for the share, and so does all of that session's audio until it has been back
    at real time long enough to pay for the excess (a flood does not earn a real-time
    session's floor as well).
    """

    def __init__(self, now: float, slack_s: float = 1.0, speed: float = 1.1) -> None:
        self.slack = slack_s
        self.speed = speed
        self._credit = slack_s
        self._at = now
        self._over = False

    def take(self, seconds: float, now: float) -> bool:
        """Whether ``seconds`` of audio arriving at ``now`` are within real time."""
        self._credit = min(self.slack, self._credit + max(0.0, now - self._at) * self.speed)
        self._at = now
        if self._over and self._credit >= 0.0:
            self._over = False  # back at real time, the excess paid for
        within = not self._over and seconds <= self._credit + 1e-9  # (summed floats)
        self._credit = max(-self.slack, self._credit - seconds)
        self._over = not within
        return within


@dataclass(frozen=True, slots=True)
class OwnerGate:
    """One session's share of the loop (:class:`~duplex.pipeline.stages.Gate`)."""

    share: LoopShare
    owner: Hashable

    async def wait(self) -> None:
        await self.share.wait(self.owner)

    def charge(self) -> AbstractContextManager[None]:
        return self.share.charge(self.owner)


class FairQueue:
    """Jobs on ``workers`` slots, served round-robin across owners.

    Spare jobs (:meth:`spare`: partial transcripts) use what the others leave: one is
    given a slot only when no other job runs or waits, and one at a time (the workers
    share the CPU: a partial decoding beside a turn's candidate took a third of a core
    from it with ten sessions speaking, and the turn waited); an owner's newer spare job
    replaces its waiting one (only the latest is worth doing), one asked for while the
    owner's last still runs is dropped (an urgent one waits for it instead), and owners
    are served in the order they began to wait (every session gets its turn, however
    its speech is timed).
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.running = 0
        self.spare_running = 0
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        self._spare: OrderedDict[Hashable, asyncio.Future[None]] = OrderedDict()
        self._sparing: set[Hashable] = set()  # owners with a spare job running

    def pending(self, owner: Hashable) -> int:
        """Jobs of ``owner`` waiting for a slot."""
        return len(self._waiting.get(owner, ()))

    async def run(self, owner: Hashable, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once a slot is free and it is ``owner``'s turn. It supersedes
        ``owner``'s waiting spare job (a turn's transcript covers what a partial would)."""
        older = self._spare.pop(owner, None)
        if older is not None and not older.done():
            older.set_exception(Moot())
        if self.running >= self.workers or self._waiting:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(owner, deque()).append(future)
            try:
                await future  # the slot is ours once this resolves
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # granted just as we were cancelled: pass the slot on
                else:
                    self._forget(owner, future)
                raise
        else:
            self.running += 1
        try:
            return await job()
        finally:
            self._release()

    def _spare_free(self) -> bool:
        return self.running == 0 and not self._waiting

    async def spare(self, owner: Hashable, job: Callable[[], Awaitable[T]], *, behind: bool = False) -> T:
        """Run ``job`` on spare capacity; raises :class:`Moot` if ``owner``'s last spare
        job still runs (unless ``behind``: then it waits for it), or a newer job of
        ``owner`` (spare or not) replaces it while it waits."""
        if owner in self._sparing and not behind:
            # One at a time per owner: back to back, they crowded a pause's models. A job
            # whose answer decides something now waits instead: dropped, a partial judging
            # speech over a reply came 0.1 s later whenever a decode outlasted its step.
            raise Moot
        older = self._spare.get(owner)
        if older is not None and not older.done():
            older.set_exception(Moot())  # keeps the owner's place in the line
        if self._spare_free() and not self._spare:
            self.running += 1
            self.spare_running += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._spare[owner] = future
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled() and future.exception() is None:
                    self._release(spare=True)
                elif self._spare.get(owner) is future:
                    del self._spare[owner]
                raise
        self._sparing.add(owner)
        try:
            return await job()
        finally:
            self._sparing.discard(owner)
            self._release(spare=True)

    def _forget(self, owner: Hashable, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(owner)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[owner]

    def _release(self, *, spare: bool = False) -> None:
        self.running -= 1
        self.spare_running -= spare
        while self._waiting and self.running < self.workers:
            owner, queue = next(iter(self._waiting.items()))
            future = queue.popleft()
            del self._waiting[owner]
            if queue:
                self._waiting[owner] = queue
            if not future.done():
                self.running += 1
                future.set_result(None)
        while self._spare and self._spare_free():
            _, waiting = self._spare.popitem(last=False)
            if not waiting.done():
                self.running += 1
                self.spare_running += 1
                waiting.set_result(None)


class Moot(Exception):
    """A queued job whose answer nobody needs any more."""


class WaitingJobs(Generic[A]):
    """One session's jobs (tasks) not yet given a slot, each with what it is for: a new
    one first drops those that have become moot (each holds its audio: a pause every
    0.4 s queued a question and a transcription of the whole growing segment per pause,
    +460-880 MiB), and a job checks again when its slot comes (:meth:`check`)."""

    def __init__(self, wanted: Callable[[A], bool]) -> None:
        self.wanted = wanted
        self._tasks: dict[asyncio.Task[None], A] = {}

    def add(self, task: asyncio.Task[None], action: A) -> None:
        for waiting, what in list(self._tasks.items()):
            if not self.wanted(what):
                del self._tasks[waiting]
                waiting.cancel()
        self._tasks[task] = action
        task.add_done_callback(lambda t: self._tasks.pop(t, None))

    def check(self, action: A) -> None:
        """In the job, once it has its slot: it no longer waits; raises :class:`Moot` if
        it is not wanted now."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.pop(task, None)
        if not self.wanted(action):
            raise Moot

    def __len__(self) -> int:
        return len(self._tasks)
