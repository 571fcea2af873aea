"""Sharing the server's work fairly between sessions.

Two shared resources can be flooded by one session at the others' expense: the
event loop's time for listening to input audio, and the recogniser's workers.

* :class:`InputBudget` is a server-wide budget of input audio, in seconds of audio
  per second of wall time. A session spends from it before its audio is heard;
  when it is spent, sessions wait their turn round-robin, one slice each, and a
  waiting session's socket is not read meanwhile (TCP holds the flood back). A
  session streaming at real time asks little and waits, at worst, one slice per
  flooding session.
* :class:`FairQueue` runs jobs (recognitions) on a fixed number of workers,
  taking the next job from each waiting session in turn rather than first come,
  first served; a session's queued jobs go when it is cancelled.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class InputBudget:
    """Server-wide input audio budget, shared round-robin between the sessions that wait."""

    def __init__(self, rate: float, burst_s: float = 1.0) -> None:
        self.rate = rate
        """Seconds of input audio the server hears per second, all sessions together."""
        self.burst = max(burst_s, 1e-3)
        self._tokens = self.burst
        self._at: float | None = None
        self._waiting: OrderedDict[Hashable, deque[tuple[float, asyncio.Future[None]]]] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self.waited = 0
        """Slices that had to wait (for metrics and tests)."""

    def _refill(self, now: float) -> None:
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    async def spend(self, owner: Hashable, seconds: float) -> None:
        """Wait until ``owner`` may hear ``seconds`` more of input audio."""
        loop = asyncio.get_running_loop()
        self._refill(loop.time())
        if not self._waiting and self._tokens >= min(seconds, self.burst):
            self._tokens -= seconds
            return
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.setdefault(owner, deque()).append((seconds, future))
        self.waited += 1
        self._grant()
        try:
            await future
        except asyncio.CancelledError:
            queue = self._waiting.get(owner)
            if queue is not None:
                kept = deque(x for x in queue if x[1] is not future)
                if kept:
                    self._waiting[owner] = kept
                else:
                    del self._waiting[owner]
            raise

    def _grant(self) -> None:
        loop = asyncio.get_running_loop()
        self._refill(loop.time())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            owner, queue = next(iter(self._waiting.items()))
            seconds, future = queue[0]
            need = min(seconds, self.burst)
            if not future.done() and self._tokens < need:
                self._timer = loop.call_later((need - self._tokens) / self.rate, self._grant)
                return
            queue.popleft()
            del self._waiting[owner]
            if queue:  # round robin: its next slice waits behind everyone else's
                self._waiting[owner] = queue
            if not future.done():
                self._tokens -= seconds
                future.set_result(None)


class FairQueue:
    """Jobs on ``workers`` slots, served round-robin across owners."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.running = 0
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()

    def pending(self, owner: Hashable) -> int:
        """Jobs of ``owner`` waiting for a slot."""
        return len(self._waiting.get(owner, ()))

    async def run(self, owner: Hashable, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once a slot is free and it is ``owner``'s turn."""
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

    def _forget(self, owner: Hashable, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(owner)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[owner]

    def _release(self) -> None:
        self.running -= 1
        while self._waiting and self.running < self.workers:
            owner, queue = next(iter(self._waiting.items()))
            future = queue.popleft()
            del self._waiting[owner]
            if queue:
                self._waiting[owner] = queue
            if not future.done():
                self.running += 1
                future.set_result(None)
