"""One reply as stages in one TaskGroup: output, cancel, backpressure, failure."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from duplex.pipeline.stages import OutputChunk, ReplyStages, StageQueues, StreamBounds
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest, TalkerError
from duplex.pipeline.talkers.espeak import EspeakRuntime, EspeakTalker
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.vocoders.pcm import PcmVocoder
from tests.util import stage_tasks, until

MANY_SENTENCES = " ".join(f"This is sentence number {i}." for i in range(20))


def _reply(talker, text: str, queues: StageQueues | None = None, epoch: int = 1) -> ReplyStages:
    return ReplyStages(
        talker,
        PcmVocoder(),
        SpeechRequest("resp_1", text),
        epoch=epoch,
        output_rate=24000,
        queues=queues or StageQueues(),
        watermark=lambda: 1234,
    )


async def test_reply_streams_resampled_audio_with_words(talker: EspeakTalker):
    text = "Stages joined by bounded streams."
    direct = sum([c.audio.length async for c in talker.speak(SpeechRequest("d", text))])
    got: list[ChunkEvent] = []

    async def sink(ev: ChunkEvent) -> None:
        got.append(ev)

    stats = await _reply(talker, text).run(sink)
    chunks: list[OutputChunk] = [e.payload for e in got]
    total = sum(c.audio.length for c in chunks)
    assert abs(total - direct * 24000 / 22050) <= 2
    assert stats.output_samples == total
    assert [e.seq for e in got] == list(range(len(got)))
    assert all(e.epoch == 1 and e.input_watermark == 1234 for e in got)
    assert [c.start for c in chunks] == list(np.cumsum([0] + [c.audio.length for c in chunks[:-1]]))
    words = [w for c in chunks for w in c.words]
    assert [text[w.start : w.end] for w in words] == ["Stages", "joined", "by", "bounded", "streams"]
    for c in chunks:  # a word is announced with the chunk its audio starts in (or earlier)
        assert all(w.position < c.end for w in c.words)
    assert stage_tasks() == []


async def test_cancel_stops_every_stage_and_the_talker(talker: EspeakTalker, espeak_runtime: EspeakRuntime):
    await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    started = espeak_runtime.jobs_started
    first = asyncio.Event()

    async def stuck_sink(ev: ChunkEvent) -> None:
        first.set()
        await asyncio.Event().wait()  # a sink that never takes more

    reply = _reply(talker, MANY_SENTENCES)
    task = asyncio.create_task(reply.run(stuck_sink))
    await asyncio.wait_for(first.wait(), 10)
    await until(lambda: reply.output_queue.chunks == reply.output_queue.max_chunks, what="output queue full")
    assert len(stage_tasks()) == 3
    reply.retire()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stage_tasks() == [], "a stage outlived the cancel"
    assert await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    clauses = espeak_runtime.jobs_started - started
    assert clauses < 20 // 4, f"the talker went on to synthesise {clauses} of 20 sentences"
    assert reply.talk_queue.chunks == 0 and reply.output_queue.chunks == 0
    assert reply.stats.dropped_stale > 0, "queued audio of the cancelled epoch is purged and counted"


async def test_slow_sink_slows_the_talker_not_memory(talker: EspeakTalker, espeak_runtime: EspeakRuntime):
    queues = StageQueues(talker_queue=StreamBounds(4, 16 * 1024), output_queue=StreamBounds(4, 16 * 1024))
    taken: list[ChunkEvent] = []
    gate = asyncio.Event()

    async def slow_sink(ev: ChunkEvent) -> None:
        taken.append(ev)
        await gate.wait()

    await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    started = espeak_runtime.jobs_started
    reply = _reply(talker, MANY_SENTENCES, queues)
    task = asyncio.create_task(reply.run(slow_sink))
    await until(lambda: reply.output_queue.chunks == 4 and reply.talk_queue.chunks == 4, what="queues full")
    assert await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    held = reply.stats.talker_chunks
    assert held <= 4 + 4 + 2 + 40, "the talker ran ahead of a stalled sink"
    assert espeak_runtime.jobs_started - started <= 2
    assert reply.output_queue.high_water_bytes <= 16 * 1024
    assert reply.talk_queue.high_water_bytes <= 16 * 1024
    gate.set()
    stats = await asyncio.wait_for(task, 30)
    assert espeak_runtime.jobs_started - started == 20
    assert stats.output_samples == sum(e.payload.audio.length for e in taken)
    assert stats.output_samples / 24000 > 20


class _FailingTalker:
    name = "failing"

    def __init__(self, inner: EspeakTalker, after: int) -> None:
        self.inner, self.after = inner, after

    def release(self, request_id: str) -> None:
        pass

    async def speak(self, request):
        n = 0
        async for chunk in self.inner.speak(request):
            if n == self.after:
                raise TalkerError("injected talker fault")
            n += 1
            yield chunk


async def test_talker_failure_fails_the_reply_and_leaves_no_task(talker: EspeakTalker):
    reply = ReplyStages(
        _FailingTalker(talker, 3), PcmVocoder(), SpeechRequest("r", MANY_SENTENCES), epoch=1, output_rate=24000
    )

    async def sink(ev: ChunkEvent) -> None:
        pass

    with pytest.raises(ExceptionGroup) as info:
        await reply.run(sink)
    assert info.group_contains(TalkerError)
    assert stage_tasks() == []


class _SilentFirst:
    """Says nothing for a segment with "Hush" in it, the rest in eSpeak NG's voice."""

    name = "silent-first"

    def __init__(self, inner: EspeakTalker) -> None:
        self.inner = inner

    def release(self, request_id: str) -> None:
        pass

    async def speak(self, request):
        if "Hush" in request.text:
            return
        async for chunk in self.inner.speak(request):
            yield chunk


class _Script:
    """A thinker that says its deltas."""

    name = "script"
    tools = False

    def __init__(self, *deltas: str) -> None:
        self.deltas = deltas

    async def think(self, request):
        for delta in self.deltas:
            yield delta


async def test_a_segment_that_makes_no_sound_keeps_its_text_and_opens_no_stream(talker: EspeakTalker):
    """The text of a silent segment rides on a text-only chunk, which must not open the
    vocoder at its own rate: the talker's audio that follows is at 22050 Hz."""
    reply = ReplyStages(
        _SilentFirst(talker),
        PcmVocoder(),
        SpeechRequest("r", ""),
        epoch=1,
        output_rate=24000,
        thinker=_Script("Hush, ", "and now some speech."),
        think=ThinkRequest("r", ()),
    )
    got: list[OutputChunk] = []

    async def sink(ev: ChunkEvent) -> None:
        got.append(ev.payload)

    await reply.run(sink)
    assert "".join(c.text for c in got) == "Hush, and now some speech."
    assert got[0].text == "Hush," and got[0].audio.length == 0 and got[0].audio.rate == 24000
    assert sum(c.audio.length for c in got) > 0.5 * 24000
    assert all(c.audio.rate == 24000 for c in got)
