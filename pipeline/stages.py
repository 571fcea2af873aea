"""One reply's stages: thinker -> talker -> vocoder -> sink, in one TaskGroup.

The thinker streams the reply's text, cut into segments (the first at the first
clause boundary); the talker speaks each segment as it comes while the thinker
goes on; the vocoder turns the talker's buffers into PCM at the session's rate.
The stages are joined by bounded streams, so a sink that stops taking audio (a
paced or paused socket, a client that stops reading) fills the queues and holds
the talker back instead of growing memory. Cancelling the task that runs
:meth:`ReplyStages.run` cancels every stage; the thinker's and talker's generators are
closed, which aborts their backends, and :meth:`ReplyStages.retire` purges what was
still queued. A text-only reply runs the thinker alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, aclosing, nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.segmenter import Segment, Segmenter
from duplex.pipeline.stream import BoundedEventStream, ChunkEvent, Sequencer
from duplex.pipeline.talker import SpeechRequest, Talker, TalkerChunk, WordMark
from duplex.pipeline.thinker import Thinker, ThinkRequest
from duplex.pipeline.tools import ToolCallDelta
from duplex.pipeline.vocoder import Vocoder, VocoderStream

THINKER_STAGE = 0
TALKER_STAGE = 1
VOCODER_STAGE = 2


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """PCM16 ready for the wire, where it sits in the reply, the words it starts, and
    the reply text it makes known."""

    audio: AudioBuffer
    start: int
    """Output-sample offset of this chunk from the start of the reply."""
    words: tuple[WordMark, ...] = ()
    """Words whose audio begins by the end of this chunk; ``position`` is in output samples."""
    text: str = ""
    """Reply text that continues the text known so far (the thinker streams it)."""
    call: ToolCallDelta | None = None
    """A piece of a function call the thinker made, in its place among the reply's output."""

    @property
    def nbytes(self) -> int:
        return self.audio.nbytes + len(self.text) + (self.call.nbytes if self.call else 0)

    @property
    def end(self) -> int:
        return self.start + self.audio.length


@dataclass(frozen=True, slots=True)
class StreamBounds:
    """Credit for one inter-stage stream."""

    max_chunks: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class StageQueues:
    """Queue bounds between stages. The sink queue is where a paced reply waits."""

    text_queue: StreamBounds = StreamBounds(64, 64 * 1024)
    talker_queue: StreamBounds = StreamBounds(8, 128 * 1024)
    output_queue: StreamBounds = StreamBounds(16, 96 * 1024)


@dataclass(slots=True)
class ReplyStats:
    """What one reply did, for benchmarks, latency reports and metrics (seconds from start)."""

    started: float = field(default_factory=time.monotonic)
    response_start_s: float | None = None
    """When the reply became the response's (a reply prepared ahead of its turn starts before it)."""
    thinker_first_text_s: float | None = None
    thinker_first_segment_s: float | None = None
    thinker_done_s: float | None = None
    talker_first_chunk_s: float | None = None
    vocoder_first_chunk_s: float | None = None
    talker_chunks: int = 0
    output_samples: int = 0
    dropped_stale: int = 0
    talker_high_water_bytes: int = 0
    output_high_water_bytes: int = 0

    def since(self) -> float:
        return time.monotonic() - self.started

    def timings_ms(self) -> dict[str, float]:
        """The latency report a reply's ``response.done`` carries."""
        names = {
            "response_start": self.response_start_s,
            "thinker_first_text": self.thinker_first_text_s,
            "thinker_first_clause": self.thinker_first_segment_s,
            "thinker_done": self.thinker_done_s,
            "talker_first_chunk": self.talker_first_chunk_s,
            "vocoder_first_chunk": self.vocoder_first_chunk_s,
        }
        return {k: round(v * 1000, 2) for k, v in names.items() if v is not None}


Sink = Callable[[ChunkEvent], Awaitable[None]]


class Gate(Protocol):
    """Rations the event loop time a reply's stages use (a server shares it fairly
    between sessions): ``wait`` before a piece of work, ``charge`` around it."""

    async def wait(self) -> None: ...

    def charge(self) -> AbstractContextManager[None]: ...


class _Open:
    """No rationing."""

    async def wait(self) -> None:
        pass

    def charge(self) -> AbstractContextManager[None]:
        return nullcontext()


class ReplyStages:
    """One reply's stages and queues, in one epoch."""

    def __init__(
        self,
        talker: Talker | None,
        vocoder: Vocoder | None,
        request: SpeechRequest,
        *,
        epoch: int,
        output_rate: int,
        queues: StageQueues = StageQueues(),
        watermark: Callable[[], int] = lambda: 0,
        thinker: Thinker | None = None,
        think: ThinkRequest | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.talker = talker
        self.gate: Gate = gate or _Open()
        self.vocoder = vocoder
        self.thinker = thinker
        self.think = think
        self.request = request
        self.epoch = epoch
        self.output_rate = output_rate
        self.watermark = watermark
        self.stats = ReplyStats()
        rid = request.request_id

        def stream(bounds: StreamBounds, name: str) -> BoundedEventStream:
            return BoundedEventStream(max_chunks=bounds.max_chunks, max_bytes=bounds.max_bytes, name=f"{name}:{rid}")

        self.text_queue = stream(queues.text_queue, "text")
        self.talk_queue = stream(queues.talker_queue, "talker")
        self.output_queue = stream(queues.output_queue, "output")

    @property
    def queues(self) -> tuple[BoundedEventStream, ...]:
        return (self.text_queue, self.talk_queue, self.output_queue)

    async def run(self, sink: Sink) -> ReplyStats:
        """Run every stage to completion; ``sink`` is awaited for each output event."""
        rid = self.request.request_id
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._think(), name=f"thinker:{rid}")
            if self.talker is not None:
                tg.create_task(self._talk(), name=f"talker:{rid}")
                tg.create_task(self._vocode(), name=f"vocoder:{rid}")
            else:
                tg.create_task(self._write(), name=f"writer:{rid}")
            tg.create_task(self._drain(sink), name=f"sink:{rid}")
        self._collect()
        return self.stats

    def retire(self) -> int:
        """Retire this reply's epoch: purge queued chunks (counted), refuse late ones."""
        purged = sum(q.retire_epoch(self.epoch) for q in self.queues)
        self._collect()
        return purged

    def _collect(self) -> None:
        self.stats.dropped_stale = sum(q.dropped_stale for q in self.queues)
        self.stats.talker_high_water_bytes = self.talk_queue.high_water_bytes
        self.stats.output_high_water_bytes = self.output_queue.high_water_bytes

    async def _think(self) -> None:
        """Text in, segments out: from the thinker, or the request's own text."""
        seq = Sequencer(self.request.request_id, THINKER_STAGE, self.epoch)
        st = self.stats

        async def put(segment: Segment) -> None:
            if st.thinker_first_segment_s is None:
                st.thinker_first_segment_s = st.since()
            await self.text_queue.put(seq.event("text", segment, self.watermark()))

        try:
            if self.thinker is None or self.think is None:
                await put(Segment(0, self.request.text))
            else:
                segmenter = Segmenter()
                async with aclosing(self.thinker.think(self.think)) as deltas:  # type: ignore[type-var]
                    async for delta in deltas:
                        if st.thinker_first_text_s is None:
                            st.thinker_first_text_s = st.since()
                        if isinstance(delta, ToolCallDelta):
                            # What was said before the call is spoken before it.
                            for segment in segmenter.finish():
                                await put(segment)
                            await self.text_queue.put(seq.event("tool", delta, self.watermark()))
                            continue
                        for segment in segmenter.feed(delta, st.since()):
                            await put(segment)
                for segment in segmenter.finish():
                    await put(segment)
            st.thinker_done_s = st.since()
        finally:
            self.text_queue.close()

    async def _talk(self) -> None:
        """Speak each segment as it arrives; word positions and text offsets are the reply's."""
        assert self.talker is not None
        seq = Sequencer(self.request.request_id, TALKER_STAGE, self.epoch)
        spoken = 0  # talker units (samples or frames) spoken so far in this reply
        try:
            async for event in self.text_queue:
                if event.kind == "tool":  # passes on in order, unspoken
                    await self.talk_queue.put(seq.event("tool", event.payload, self.watermark()))
                    continue
                segment: Segment = event.payload
                request = replace(self.request, text=segment.text)
                text = segment.text  # goes out with the segment's first chunk
                base = spoken  # a talker places words from the start of its own request
                async with aclosing(self.talker.speak(request)) as chunks:  # type: ignore[type-var]
                    async for chunk in chunks:
                        if self.stats.talker_first_chunk_s is None:
                            self.stats.talker_first_chunk_s = self.stats.since()
                        self.stats.talker_chunks += 1
                        words = tuple(
                            WordMark(w.start + segment.offset, w.end + segment.offset, w.position + base)
                            for w in chunk.words
                        )
                        out = TalkerChunk(chunk.audio, words, text)
                        text = ""
                        spoken += chunk.audio.length
                        await self.talk_queue.put(seq.event(chunk.audio.format, out, self.watermark()))
                if text:  # a segment that made no sound still belongs to the reply's text
                    empty = AudioBuffer.pcm(np.zeros(0, np.int16), self.output_rate, "engine")
                    only_text = TalkerChunk(empty, (), text, text_only=True)
                    await self.talk_queue.put(seq.event("text", only_text, self.watermark()))
        finally:
            self.talker.release(self.request.request_id)  # its voice was the reply's, for its whole life
            self.talk_queue.close()

    async def _vocode(self) -> None:
        assert self.vocoder is not None
        seq = Sequencer(self.request.request_id, VOCODER_STAGE, self.epoch)
        stream: VocoderStream | None = None
        produced = 0
        pending: list[WordMark] = []
        text = ""

        async def emit(pcm: AudioBuffer | None, final: bool = False) -> None:
            nonlocal produced, text
            length = pcm.length if pcm is not None else 0
            ready = pending[:] if final else [w for w in pending if w.position < produced + length]
            if length == 0 and not ready and not text:
                return
            for w in ready:
                pending.remove(w)
            audio = pcm if pcm is not None else AudioBuffer.pcm(np.zeros(0, np.int16), self.output_rate, "engine")
            if self.stats.vocoder_first_chunk_s is None and length:
                self.stats.vocoder_first_chunk_s = self.stats.since()
            out = OutputChunk(audio, produced, tuple(ready), text)
            produced += length
            text = ""
            self.stats.output_samples = produced
            await self.output_queue.put(seq.event("audio", out, self.watermark()))

        async def call(delta: ToolCallDelta) -> None:
            await emit(None)  # the text before it first
            empty = AudioBuffer.pcm(np.zeros(0, np.int16), self.output_rate, "engine")
            await self.output_queue.put(seq.event("tool", OutputChunk(empty, produced, call=delta), self.watermark()))

        try:
            async for event in self.talk_queue:
                if event.kind == "tool":
                    await call(event.payload)
                    continue
                chunks = [event.payload]
                held: ToolCallDelta | None = None
                if self.vocoder.blocking:
                    # A neural decode costs nearly the same for a few frames as for one:
                    # take everything the talker has queued meanwhile (up to a call).
                    while len(chunks) < 32 and (more := self.talk_queue.get_nowait()) is not None:
                        if more.kind == "tool":
                            held = more.payload
                            break
                        chunks.append(more.payload)
                text += "".join(c.text for c in chunks)
                sounding = [c.audio for c in chunks if c.audio.length]
                talked = [c.audio for c in chunks if not c.text_only]
                if stream is None and talked:
                    stream = self.vocoder.open(talked[0].rate, self.output_rate)
                if stream is not None:
                    pending.extend(
                        WordMark(w.start, w.end, stream.output_position(w.position)) for c in chunks for w in c.words
                    )
                if not sounding:
                    await emit(None)
                else:
                    audio = _join(sounding)
                    assert stream is not None  # sounding audio came from the talker, which opened it
                    if self.vocoder.blocking:
                        pcm = await asyncio.to_thread(stream.push, audio)
                    else:
                        await self.gate.wait()
                        with self.gate.charge():
                            pcm = stream.push(audio)
                    await emit(pcm)
                if held is not None:
                    await call(held)
            await emit(stream.flush() if stream is not None else None, final=True)
        finally:
            self.output_queue.close()

    async def _write(self) -> None:
        """Text-only replies: the thinker's segments go straight to the sink."""
        seq = Sequencer(self.request.request_id, VOCODER_STAGE, self.epoch)
        empty = AudioBuffer.pcm(np.zeros(0, np.int16), self.output_rate, "engine")
        try:
            async for event in self.text_queue:
                if event.kind == "tool":
                    chunk = OutputChunk(empty, 0, call=event.payload)
                else:
                    chunk = OutputChunk(empty, 0, (), event.payload.text)
                await self.output_queue.put(seq.event(event.kind, chunk, self.watermark()))
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
