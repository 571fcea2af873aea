"""Property tests of the event stream contract: bounds, epochs, order, wake-ups."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex.pipeline.stream import BoundedEventStream, ChunkEvent, SequenceError, Sequencer, StreamClosed

FAST = settings(max_examples=150, deadline=None)


async def _yield(n: int = 1) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@FAST
@given(
    sizes=st.lists(st.integers(0, 5000), max_size=60),
    max_chunks=st.integers(1, 8),
    max_bytes=st.integers(1, 8000),
    pauses=st.lists(st.integers(0, 3), min_size=1, max_size=10),
)
def test_bounds_never_exceeded_and_order_kept(sizes, max_chunks, max_bytes, pauses):
    async def run() -> None:
        s = BoundedEventStream(max_chunks=max_chunks, max_bytes=max_bytes)
        seq = Sequencer("r", 0, 0)

        def check() -> None:
            assert s.chunks <= max_chunks
            # Only a lone oversized event may exceed the byte bound.
            assert s.bytes <= max_bytes or s.chunks == 1

        async def produce() -> None:
            for n in sizes:
                assert await s.put(seq.event("audio", b"x" * n))
                check()
            s.close()

        got: list[ChunkEvent] = []

        async def consume() -> None:
            i = 0
            while (ev := await s.get()) is not None:
                got.append(ev)
                check()
                await _yield(pauses[i % len(pauses)])
                i += 1

        await asyncio.gather(produce(), consume())
        assert [e.seq for e in got] == list(range(len(sizes)))
        assert [e.nbytes for e in got] == sizes
        assert s.high_water_chunks <= max_chunks

    asyncio.run(run())


@FAST
@given(
    ops=st.lists(st.sampled_from(["put", "put", "put", "stale", "retire", "yield"]), max_size=80),
    max_chunks=st.integers(1, 6),
    pauses=st.lists(st.integers(0, 2), min_size=1, max_size=8),
)
def test_retired_epochs_never_delivered_and_drops_counted(ops, max_chunks, pauses):
    async def run() -> None:
        s = BoundedEventStream(max_chunks=max_chunks, max_bytes=10_000)
        epoch = 0
        seqs = {0: Sequencer("r", 0, 0)}
        attempted = 0

        async def produce() -> None:
            nonlocal epoch, attempted
            for op in ops:
                if op == "put":
                    attempted += 1
                    await s.put(seqs[epoch].event("audio", b"ab"))
                elif op == "stale" and epoch > 0:
                    # Work in flight from a cancelled reply keeps arriving.
                    attempted += 1
                    assert not await s.put(seqs[epoch - 1].event("audio", b"ab"))
                elif op == "retire":
                    s.retire_epoch(epoch)
                    epoch += 1
                    seqs[epoch] = Sequencer("r", 0, epoch)
                else:
                    await _yield()
            s.close()

        delivered: list[ChunkEvent] = []

        async def consume() -> None:
            i = 0
            while (ev := await s.get()) is not None:
                assert ev.epoch >= s.min_epoch, "an event of a retired epoch was delivered"
                delivered.append(ev)
                await _yield(pauses[i % len(pauses)])
                i += 1

        await asyncio.gather(produce(), consume())
        assert s.delivered + s.dropped_stale == attempted
        # Per (request, epoch), what was delivered is a gap-free prefix.
        by_epoch: dict[int, list[int]] = {}
        for ev in delivered:
            by_epoch.setdefault(ev.epoch, []).append(ev.seq)
        for seqs_seen in by_epoch.values():
            assert seqs_seen == list(range(len(seqs_seen)))

    asyncio.run(run())


async def test_seq_gap_or_repeat_is_refused():
    s = BoundedEventStream()
    await s.put(ChunkEvent("r", 0, 0, 0, "text", "a"))
    with pytest.raises(SequenceError):
        await s.put(ChunkEvent("r", 0, 2, 0, "text", "gap"))
    with pytest.raises(SequenceError):
        await s.put(ChunkEvent("r", 0, 0, 0, "text", "repeat"))
    # Another request or epoch has its own sequence.
    await s.put(ChunkEvent("other", 0, 0, 0, "text", "b"))
    await s.put(ChunkEvent("r", 0, 0, 1, "text", "c"))


async def test_blocked_producer_resumes_when_credit_returns():
    s = BoundedEventStream(max_chunks=2, max_bytes=100)
    seq = Sequencer("r", 0, 0)
    await s.put(seq.event("audio", b"x" * 40))
    await s.put(seq.event("audio", b"x" * 40))
    blocked = asyncio.create_task(s.put(seq.event("audio", b"x" * 40)))
    await _yield(5)
    assert not blocked.done(), "a full stream must hold the producer back"
    await s.get()
    assert await asyncio.wait_for(blocked, 1) is True
    assert s.chunks == 2


async def test_byte_bound_blocks_even_with_chunk_credit():
    s = BoundedEventStream(max_chunks=10, max_bytes=100)
    seq = Sequencer("r", 0, 0)
    await s.put(seq.event("audio", b"x" * 80))
    blocked = asyncio.create_task(s.put(seq.event("audio", b"x" * 30)))
    await _yield(5)
    assert not blocked.done()
    await s.get()
    await asyncio.wait_for(blocked, 1)


async def test_close_wakes_every_waiter():
    full = BoundedEventStream(max_chunks=1, max_bytes=10)
    seqs = [Sequencer(f"r{i}", 0, 0) for i in range(4)]
    await full.put(seqs[0].event("audio", b"x"))
    producers = [asyncio.create_task(full.put(sq.event("audio", b"x"))) for sq in seqs[1:]]
    empty = BoundedEventStream()
    consumers = [asyncio.create_task(empty.get()) for _ in range(3)]
    await _yield(5)
    assert not any(t.done() for t in producers + consumers)
    full.close()
    empty.close()
    for t in producers:
        with pytest.raises(StreamClosed):
            await asyncio.wait_for(t, 1)
    assert [await asyncio.wait_for(t, 1) for t in consumers] == [None, None, None]
    # What was queued before close is still delivered, then the end.
    assert (await full.get()).payload == b"x"
    assert await full.get() is None


async def test_one_oversized_event_passes_an_empty_queue():
    s = BoundedEventStream(max_chunks=4, max_bytes=10)
    seq = Sequencer("r", 0, 0)
    await asyncio.wait_for(s.put(seq.event("audio", b"x" * 1000)), 1)
    assert s.bytes == 1000
    small = asyncio.create_task(s.put(seq.event("audio", b"x")))
    await _yield(5)
    assert not small.done(), "nothing may join an oversized event"
    await s.get()
    await asyncio.wait_for(small, 1)


async def test_retire_purges_queue_counts_and_returns_credit():
    s = BoundedEventStream(max_chunks=3, max_bytes=1000)
    old, new = Sequencer("r", 0, 0), Sequencer("r", 0, 1)
    for _ in range(3):
        await s.put(old.event("audio", b"x" * 100))
    blocked = asyncio.create_task(s.put(new.event("audio", b"y")))
    await _yield(3)
    assert not blocked.done()
    assert s.retire_epoch(0) == 3
    assert s.dropped_stale == 3
    await asyncio.wait_for(blocked, 1)  # the purge returned the credit at once
    assert s.bytes == 1 and s.chunks == 1
    assert not await s.put(old.event("audio", b"late"))
    assert s.dropped_stale == 4
    assert (await s.get()).payload == b"y"
