"""The worker threads a neural voice synthesises on, shared by every session.

A voice model makes a segment's audio in one blocking call (onnxruntime releases the
GIL), so the calls run on a few threads of their own. A reply's first segment jumps
the queue: it is what a listener is waiting for, while later segments are wanted
only before the audio ahead of them runs out. A cancelled job is skipped if it has
not started and stopped (where the model allows) if it has; either way it is never
delivered. Results reach the event loop through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from duplex.pipeline.niceness import set_nice
from duplex.pipeline.talker import TalkerError

T = TypeVar("T")


class Cancelled(Exception):
    """The job's reply was cancelled (raised by a maker that notices it)."""


@dataclass(eq=False)
class Job(Generic[T]):
    """One segment to make, and the future its result is delivered to."""

    loop: asyncio.AbstractEventLoop
    first: bool
    """A reply's first segment: someone is waiting to hear it."""
    done: asyncio.Future[T]
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Skip the job, or stop it (a maker may also stop its model run here)."""
        self.cancelled.set()

    def deliver(self, result: T | BaseException) -> None:
        def put() -> None:
            if self.done.done():
                return
            if isinstance(result, BaseException):
                self.done.set_exception(result)
            else:
                self.done.set_result(result)

        try:
            self.loop.call_soon_threadsafe(put)
        except RuntimeError:  # the loop is gone: nobody is listening any more
            self.cancelled.set()


J = TypeVar("J", bound=Job[Any])


class SynthesisPool(Generic[J]):
    """``workers`` threads running ``make(job)`` for submitted jobs, first segments first."""

    def __init__(self, make: Callable[[J], Any], *, workers: int, nice: int, name: str) -> None:
        self._make = make
        self._nice = nice
        self.name = name
        self.made = 0
        """Jobs made and delivered."""
        self.stopped = 0
        """Jobs cancelled before or while they were made."""
        self._jobs: queue.PriorityQueue[tuple[int, int, J | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._idle = threading.Condition()
        self._outstanding = 0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        set_nice(self._nice)
        while (job := self._jobs.get()[2]) is not None:
            try:
                if job.cancelled.is_set():
                    raise Cancelled
                result = self._make(job)
                if job.cancelled.is_set():
                    raise Cancelled
            except Exception as exc:  # a failed segment fails its reply, not the thread
                if job.cancelled.is_set():
                    self.stopped += 1
                else:
                    job.deliver(TalkerError(f"{self.name}: {exc}"))
            else:
                self.made += 1
                job.deliver(result)
            finally:
                with self._idle:
                    self._outstanding -= 1
                    self._idle.notify_all()

    def submit(self, job: J) -> None:
        with self._idle:
            self._outstanding += 1
        self._jobs.put((0 if job.first else 1, next(self._order), job))

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has been made or stopped."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put((2, next(self._order), None))
        for t in self._threads:
            t.join(timeout=5)
