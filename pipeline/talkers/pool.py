"""The worker threads a voice synthesises on, shared by every session.

A voice makes a segment's audio in blocking calls (onnxruntime releases the GIL;
eSpeak NG is C), so the calls run on threads of their own: a few for a neural
voice, one for eSpeak NG, whose library is one process-wide instance. A reply's
first segment jumps the queue: it is what a listener is waiting for, while later
segments are wanted only before the audio ahead of them runs out. A cancelled job
is skipped if it has not started and stopped (where the maker allows) if it has;
either way nothing of it is delivered after the cancel is seen. Results reach the
event loop through ``call_soon_threadsafe``.
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
class PoolJob:
    """What the pool needs of a job: its loop, whether it comes first, and its cancel flag.
    A subclass says how a result (or a :class:`TalkerError`) is handed to the loop."""

    loop: asyncio.AbstractEventLoop
    first: bool
    """A reply's first segment: someone is waiting to hear it."""
    # Keyword-only, so subclasses may add fields without defaults.
    cancelled: threading.Event = field(default_factory=threading.Event, kw_only=True)

    def cancel(self) -> None:
        """Skip the job, or stop it (a maker may also stop its model run here)."""
        self.cancelled.set()

    def deliver(self, result: Any) -> None:
        """Hand ``result`` (or an exception) to the event loop; called on a worker thread."""
        raise NotImplementedError

    def call_in_loop(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` on the job's event loop, without blocking this thread."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is gone: nobody is listening any more
            self.cancelled.set()


@dataclass(eq=False)
class Job(PoolJob, Generic[T]):
    """One segment made in one call, and the future its result is delivered to."""

    done: asyncio.Future[T]

    def deliver(self, result: T | BaseException) -> None:
        def put() -> None:
            if self.done.done():
                return
            if isinstance(result, BaseException):
                self.done.set_exception(result)
            else:
                self.done.set_result(result)

        self.call_in_loop(put)


class Capacity:
    """How many pieces a voice makes at once in real time, and how many it is making now:
    the one definition of capacity every voice with a pool uses. A piece counts from its
    submission until its result (or its cancel) reaches the loop. A reply makes one piece
    ahead of what plays, so it counts while that piece is being made and not while it waits
    on its reader: a client that stopped reading holds no slot."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        """Pieces being made at once beyond which a new reply speaks with another voice."""
        self.making = 0
        """Pieces submitted and not yet delivered or released."""
        self._held: set[int] = set()

    @property
    def full(self) -> bool:
        """Whether a reply beginning now should speak with another voice."""
        return self.making >= self.capacity

    def hold(self, job: Job[Any]) -> None:
        r"""Count ``job`` until it is delivered or :meth:`release`\ d (call before submitting)."""
        self._held.add(id(job))
        self.making += 1
        job.done.add_done_callback(lambda _: self.release(job))

    def release(self, job: Job[Any]) -> None:
        """Stop counting ``job`` (its reply no longer waits for it); once only."""
        if id(job) in self._held:
            self._held.discard(id(job))
            self.making -= 1


J = TypeVar("J", bound=PoolJob)


class SynthesisPool(Generic[J]):
    """``workers`` threads running ``make(job)`` for submitted jobs, first segments first.

    ``make``'s return value is delivered to the job; an exception from it is delivered
    as a :class:`TalkerError`, unless the job was cancelled (then nothing is). ``nice``
    is the threads' nice value; None leaves them at the process's.
    """

    def __init__(self, make: Callable[[J], Any], *, workers: int, nice: int | None, name: str) -> None:
        self._make = make
        self._nice = nice
        self.name = name
        self.started = 0
        """Jobs whose making began."""
        self.made = 0
        """Jobs made and delivered."""
        self.stopped = 0
        """Jobs cancelled before or while they were made."""
        self.skipped = 0
        """Jobs cancelled before their making began (counted in ``stopped`` too)."""
        self._jobs: queue.PriorityQueue[tuple[int, int, J | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._idle = threading.Condition()
        self._outstanding = 0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        if self._nice is not None:
            set_nice(self._nice)
        while (job := self._jobs.get()[2]) is not None:
            started = stopped = False
            try:
                if job.cancelled.is_set():
                    raise Cancelled
                started = True
                with self._idle:
                    self.started += 1
                result = self._make(job)
                if job.cancelled.is_set():
                    raise Cancelled
            except Exception as exc:  # a failed segment fails its reply, not the thread
                stopped = job.cancelled.is_set()
                if not stopped:
                    job.deliver(TalkerError(f"{self.name}: {exc}"))
            else:
                with self._idle:  # counted before the result can reach anyone who looks
                    self.made += 1
                job.deliver(result)
            finally:
                # Counted before the job stops being outstanding: wait_idle then sees them.
                with self._idle:
                    if stopped:
                        self.stopped += 1
                        self.skipped += 0 if started else 1
                    self._outstanding -= 1
                    self._idle.notify_all()

    def submit(self, job: J) -> None:
        """Queue ``job``; a reply's first segment goes ahead of every later one."""
        if not any(t.is_alive() for t in self._threads):
            raise TalkerError(f"the {self.name} synthesis threads have stopped")
        with self._idle:
            self._outstanding += 1
        self._jobs.put((0 if job.first else 1, next(self._order), job))

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has been made, stopped or skipped."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self) -> None:
        """Stop the threads once every queued job is done (or skipped)."""
        for _ in self._threads:
            self._jobs.put((2, next(self._order), None))
        for t in self._threads:
            t.join(timeout=5)
