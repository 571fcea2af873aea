"""The request/event stream: ordered chunks between stages, bounded and epoch-fenced.

Two properties here are correctness, not bookkeeping:

* **An epoch fences cancellation.** A backend has work in flight when a reply is
  cancelled, and its output keeps arriving afterwards. Every event carries the
  epoch it was produced under; once an epoch is retired its events are dropped
  (and counted) on the way in, purged from the queue, and never delivered.
* **The queue is bounded on chunks and bytes, both.** A chunk may be a second of
  PCM, so a chunk count alone does not bound memory. A consumer that stops
  reading blocks the producer instead of growing the heap.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ChunkEvent:
    """One unit of output, with everything needed to order and retire it."""

    request_id: str
    stage_id: int
    seq: int
    """Monotonic from 0 within (request, epoch): a gap means loss, a repeat a bug."""
    epoch: int
    kind: str
    """What the payload is: ``audio``, ``codes``, ``text``, ``done`` or ``error``."""
    payload: Any
    """Incremental, never cumulative: a cumulative payload hides a lost chunk."""
    input_watermark: int = 0
    """Input samples the session had consumed when this was produced."""
    created: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        """What this event costs against a stream's byte bound."""
        return payload_nbytes(self.payload)


def payload_nbytes(payload: Any) -> int:
    """Byte size of a payload as the bound counts it."""
    if payload is None:
        return 0
    size = getattr(payload, "nbytes", None)
    if isinstance(size, int):
        return size
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return len(payload)
    if isinstance(payload, str):
        return len(payload.encode("utf-8"))
    return 0


class StreamClosed(RuntimeError):
    """Raised to a producer that puts into, or waits on, a closed stream."""


class SequenceError(RuntimeError):
    """A producer broke the per-(request, epoch) sequence: a gap or a repeat."""


class BoundedEventStream:
    """An async FIFO with credit bounds on chunks and bytes and epoch fencing.

    Producers ``await put(event)``, which waits while the bounds are full; that is
    the backpressure. Consumers ``await get()`` (or ``async for``) and credit is
    returned as each event leaves. ``close()`` ends the stream: consumers drain
    what is queued and then see the end, producers get :class:`StreamClosed`.
    """

    def __init__(self, *, max_chunks: int = 16, max_bytes: int = 256 * 1024, name: str = "") -> None:
        if max_chunks < 1 or max_bytes < 1:
            raise ValueError("stream bounds must be positive")
        self.name = name
        self.max_chunks = max_chunks
        self.max_bytes = max_bytes
        self._queue: deque[tuple[ChunkEvent, int]] = deque()
        self._bytes = 0
        self._closed = False
        self._min_epoch = 0
        self._next_seq: dict[tuple[str, int], int] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self.dropped_stale = 0
        """Events of retired epochs discarded, at put or purged from the queue."""
        self.delivered = 0
        self.high_water_chunks = 0
        self.high_water_bytes = 0

    # -- state -------------------------------------------------------------
    @property
    def chunks(self) -> int:
        """Events queued now."""
        return len(self._queue)

    @property
    def bytes(self) -> int:
        """Bytes queued now."""
        return self._bytes

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def min_epoch(self) -> int:
        """The lowest epoch still live; everything below it is retired."""
        return self._min_epoch

    def _has_credit(self, size: int) -> bool:
        if not self._queue:
            # One event larger than the whole byte bound must still pass an
            # empty queue, or producer and consumer deadlock.
            return True
        return len(self._queue) < self.max_chunks and self._bytes + size <= self.max_bytes

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _wait_change(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    # -- producer side -----------------------------------------------------
    async def put(self, event: ChunkEvent) -> bool:
        """Enqueue ``event``, waiting for credit.

        Returns False when the event was dropped because its epoch is retired
        (before or while waiting). Raises :class:`StreamClosed` if the stream is
        closed and :class:`SequenceError` if ``seq`` is not the next one.
        """
        size = event.nbytes
        while True:
            if self._closed:
                raise StreamClosed(f"stream {self.name!r} is closed")
            if event.epoch < self._min_epoch:
                self.dropped_stale += 1
                return False
            if self._has_credit(size):
                break
            await self._wait_change()
        key = (event.request_id, event.epoch)
        expected = self._next_seq.get(key, 0)
        if event.seq != expected:
            raise SequenceError(f"{self.name}: {key} expected seq {expected}, got {event.seq}")
        self._next_seq[key] = expected + 1
        self._queue.append((event, size))
        self._bytes += size
        self.high_water_chunks = max(self.high_water_chunks, len(self._queue))
        self.high_water_bytes = max(self.high_water_bytes, self._bytes)
        self._wake()
        return True

    def close(self) -> None:
        """End the stream. Idempotent; wakes every waiting producer and consumer."""
        self._closed = True
        self._wake()

    def retire_epoch(self, epoch: int) -> int:
        """Retire every epoch up to and including ``epoch``.

        Queued events of those epochs are purged now (their credit returns at
        once, so the next epoch's producer is not held back by audio nobody will
        hear). Returns how many were purged.
        """
        if epoch < self._min_epoch:
            return 0
        self._min_epoch = epoch + 1
        kept: deque[tuple[ChunkEvent, int]] = deque()
        purged = 0
        for event, size in self._queue:
            if event.epoch < self._min_epoch:
                purged += 1
                self._bytes -= size
            else:
                kept.append((event, size))
        self._queue = kept
        self._next_seq = {k: v for k, v in self._next_seq.items() if k[1] >= self._min_epoch}
        self.dropped_stale += purged
        self._wake()
        return purged

    # -- consumer side -----------------------------------------------------
    async def get(self) -> ChunkEvent | None:
        """The next live event, or None once the stream is closed and drained."""
        while not self._queue:
            if self._closed:
                return None
            await self._wait_change()
        event, size = self._queue.popleft()
        self._bytes -= size
        self.delivered += 1
        self._wake()
        return event

    def get_nowait(self) -> ChunkEvent | None:
        """The next event if one is queued now, else None (never waits)."""
        if not self._queue:
            return None
        event, size = self._queue.popleft()
        self._bytes -= size
        self.delivered += 1
        self._wake()
        return event

    def __aiter__(self) -> BoundedEventStream:
        return self

    async def __anext__(self) -> ChunkEvent:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event


class Sequencer:
    """Stamps a producer's events with gap-free seq numbers per (request, epoch)."""

    def __init__(self, request_id: str, stage_id: int, epoch: int) -> None:
        self.request_id = request_id
        self.stage_id = stage_id
        self.epoch = epoch
        self._seq = 0

    def event(self, kind: str, payload: Any, input_watermark: int = 0) -> ChunkEvent:
        """The next event of this producer."""
        ev = ChunkEvent(self.request_id, self.stage_id, self._seq, self.epoch, kind, payload, input_watermark)
        self._seq += 1
        return ev
