"""Runs one reply as stages: talker -> vocoder -> sink, in one TaskGroup.

The stages are joined by bounded streams, so a sink that stops taking audio
(a paced or paused socket, a client that stops reading) fills the queues and
holds the talker back instead of growing memory. Cancelling the task that runs
:meth:`Reply.run` cancels every stage; the talker's generator is closed, which
aborts its backend, and :meth:`Reply.retire` purges what was still queued.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import numpy as np

from pipeline.frames import AudioBuffer
from pipeline.stream import BoundedEventStream, ChunkEvent, Sequencer
from pipeline.talker import SpeechRequest, Talker, WordMark
from pipeline.vocoder import Vocoder, VocoderStream

TALKER_STAGE = 0
VOCODER_STAGE = 1


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """PCM16 ready for the wire, where it sits in the reply, and the words it starts."""

    audio: AudioBuffer
    start: int
    """Output-sample offset of this chunk from the start of the reply."""
    words: tuple[WordMark, ...] = ()
    """Words whose audio begins by the end of this chunk; ``position`` is in output samples."""

    @property
    def nbytes(self) -> int:
        return self.audio.nbytes

    @property
    def end(self) -> int:
        return self.start + self.audio.length


@dataclass(frozen=True, slots=True)
class StreamBounds:
    """Credit for one inter-stage stream."""

    max_chunks: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Queue bounds between stages. The sink queue is where a paced reply waits."""

    talker_queue: StreamBounds = StreamBounds(8, 128 * 1024)
    output_queue: StreamBounds = StreamBounds(16, 96 * 1024)


@dataclass(slots=True)
class ReplyStats:
    """What one reply did, for benchmarks, latency reports and metrics."""

    started: float = field(default_factory=time.monotonic)
    talker_first_chunk_s: float | None = None
    vocoder_first_chunk_s: float | None = None
    talker_chunks: int = 0
    output_samples: int = 0
    dropped_stale: int = 0
    talker_high_water_bytes: int = 0
    output_high_water_bytes: int = 0


Sink = Callable[[ChunkEvent], Awaitable[None]]


class Reply:
    """One reply's stages and queues, in one epoch."""

    def __init__(
        self,
        talker: Talker,
        vocoder: Vocoder,
        request: SpeechRequest,
        *,
        epoch: int,
        output_rate: int,
        config: EngineConfig = EngineConfig(),
        watermark: Callable[[], int] = lambda: 0,
    ) -> None:
        self.talker = talker
        self.vocoder = vocoder
        self.request = request
        self.epoch = epoch
        self.output_rate = output_rate
        self.watermark = watermark
        self.stats = ReplyStats()
        self.talk_queue = BoundedEventStream(
            max_chunks=config.talker_queue.max_chunks, max_bytes=config.talker_queue.max_bytes, name="talker"
        )
        self.output_queue = BoundedEventStream(
            max_chunks=config.output_queue.max_chunks, max_bytes=config.output_queue.max_bytes, name="output"
        )

    async def run(self, sink: Sink) -> ReplyStats:
        """Run every stage to completion; ``sink`` is awaited for each output event."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._talk(), name=f"talker:{self.request.request_id}")
            tg.create_task(self._vocode(), name=f"vocoder:{self.request.request_id}")
            tg.create_task(self._drain(sink), name=f"sink:{self.request.request_id}")
        self._collect()
        return self.stats

    def retire(self) -> int:
        """Retire this reply's epoch: purge queued chunks (counted), refuse late ones."""
        purged = self.talk_queue.retire_epoch(self.epoch) + self.output_queue.retire_epoch(self.epoch)
        self._collect()
        return purged

    def _collect(self) -> None:
        self.stats.dropped_stale = self.talk_queue.dropped_stale + self.output_queue.dropped_stale
        self.stats.talker_high_water_bytes = self.talk_queue.high_water_bytes
        self.stats.output_high_water_bytes = self.output_queue.high_water_bytes

    async def _talk(self) -> None:
        seq = Sequencer(self.request.request_id, TALKER_STAGE, self.epoch)
        try:
            async with aclosing(self.talker.speak(self.request)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    if self.stats.talker_first_chunk_s is None:
                        self.stats.talker_first_chunk_s = time.monotonic() - self.stats.started
                    self.stats.talker_chunks += 1
                    await self.talk_queue.put(seq.event(chunk.audio.format, chunk, self.watermark()))
        finally:
            self.talk_queue.close()

    async def _vocode(self) -> None:
        seq = Sequencer(self.request.request_id, VOCODER_STAGE, self.epoch)
        stream: VocoderStream | None = None
        produced = 0
        pending: list[WordMark] = []

        async def emit(pcm: AudioBuffer | None, final: bool = False) -> None:
            nonlocal produced
            length = pcm.length if pcm is not None else 0
            ready = pending[:] if final else [w for w in pending if w.position < produced + length]
            if length == 0 and not ready:
                return
            for w in ready:
                pending.remove(w)
            audio = pcm if pcm is not None else AudioBuffer.pcm(np.zeros(0, np.int16), self.output_rate, "engine")
            if self.stats.vocoder_first_chunk_s is None and length:
                self.stats.vocoder_first_chunk_s = time.monotonic() - self.stats.started
            out = OutputChunk(audio, produced, tuple(ready))
            produced += length
            self.stats.output_samples = produced
            await self.output_queue.put(seq.event("audio", out, self.watermark()))

        try:
            async for event in self.talk_queue:
                chunks = [event.payload]
                if self.vocoder.blocking:
                    # A neural decode costs nearly the same for a few frames as for one:
                    # take everything the talker has queued meanwhile.
                    while len(chunks) < 32 and (more := self.talk_queue.get_nowait()) is not None:
                        chunks.append(more.payload)
                audio = _join([c.audio for c in chunks])
                if stream is None:
                    stream = self.vocoder.open(audio.rate, self.output_rate)
                pending.extend(
                    WordMark(w.start, w.end, stream.output_position(w.position)) for c in chunks for w in c.words
                )
                if self.vocoder.blocking:
                    pcm = await asyncio.to_thread(stream.push, audio)
                else:
                    pcm = stream.push(audio)
                await emit(pcm)
            if stream is not None:
                await emit(stream.flush(), final=True)
        finally:
            self.output_queue.close()

    async def _drain(self, sink: Sink) -> None:
        async for event in self.output_queue:
            await sink(event)


def _join(buffers: list[AudioBuffer]) -> AudioBuffer:
    """One buffer for several consecutive ones of the same kind."""
    if len(buffers) == 1:
        return buffers[0]
    first = buffers[0]
    data = np.concatenate([b.data for b in buffers], axis=-1)
    return AudioBuffer(data, first.format, first.rate, first.owner)
