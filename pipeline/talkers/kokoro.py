"""The default voice: Kokoro-82M (int8 ONNX, 24 kHz) on onnxruntime, streamed segment by segment.

The model (Apache-2.0 weights, MIT ONNX export) ships split across four registry
packages; :mod:`~duplex.pipeline.talkers.kokoro_model` joins the parts in memory and
checks every file (the parts, the voices' style vectors and the phoneme vocabulary
carried in ``assets/voices/kokoro``) against its pinned sha256 before use. Phonemes are eSpeak
NG's IPA, from the library the built-in voice already loads.

Kokoro makes a segment's audio in one call, so a reply streams as segments (cut by
:mod:`~duplex.pipeline.talkers.segments`): the first few words alone (what the
listener waits for), then segments that grow so each is made while the last plays. The
next segment is made while the current one is handed over (one ahead: bounded
work). Synthesis runs on a small pool of worker threads (onnxruntime releases the
GIL), a reply's first segment jumping the queue; cancelling a reply skips its
queued segments and terminates the run in progress. When more replies are being
made than the CPU can make in real time (``capacity``), a new reply speaks with
eSpeak NG instead, with a log line, so that no reply stutters.

The ONNX export does not expose the model's predicted durations, so word positions
are estimated from the phonemes (each word's share of the segment's weighted
phoneme count); ``scripts/bench_voice.py`` measures the estimate against forced
alignment by Whisper.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from duplex.pipeline.niceness import built_at
from duplex.pipeline.talker import (
    DEFAULT_VOICE,
    OpenAIVoice,
    SpeechRequest,
    TalkerChunk,
    is_openai_voice,
)
from duplex.pipeline.talkers import espeak
from duplex.pipeline.talkers.kokoro_model import MODEL_SHA256, VOICES, KokoroModel
from duplex.pipeline.talkers.pool import Cancelled, Capacity, Job, SynthesisPool
from duplex.pipeline.talkers.router import Choice, Routed, Router
from duplex.pipeline.talkers.segments import speech_chunks, split_segments

RATE = 24000
CHUNK = RATE // 10
"""Samples per chunk handed on (100 ms): the pacing and cancel granularity."""
NICE = 10
"""The synthesis threads' nice value: listening comes first when the CPU is short."""


# OpenAI's voice names map onto Kokoro voices, so unmodified Realtime clients work.
VOICE_ALIASES: dict[OpenAIVoice, str] = {
    "alloy": "af_heart",
    "marin": "af_bella",
    "coral": "af_nicole",
    "sage": "af_sarah",
    "shimmer": "bf_emma",
    "cedar": "am_michael",
    "ash": "am_fenrir",
    "echo": "am_puck",
    "ballad": "bm_george",
    "verse": "bm_fable",
}
ESPEAK_PREFIX = "espeak:"


@dataclass(eq=False)
class _Job(Job[tuple[np.ndarray, list[str]]]):
    """One segment to make."""

    text: str = ""
    voice: str = ""
    speed: float = 1.0
    options: Any = None

    def cancel(self) -> None:
        super().cancel()
        if self.options is not None:
            self.options.terminate = True  # stops the run in progress


class KokoroRuntime(Capacity):
    """The model and its worker threads, shared by every session; its capacity counts
    segments being made (beyond it a new reply speaks with another voice). At 1, a reply
    begins with Kokoro only while nothing else waits to be made."""

    def __init__(self, *, workers: int = 1, threads: int = 2, capacity: int = 1, nice: int = NICE) -> None:
        import onnxruntime as ort

        super().__init__(capacity)
        self._ort = ort
        # Built niced: onnxruntime's threads inherit it, so under load the listening
        # (VAD, recognition, the event loop) is served first and a reply makes way.
        self.model = built_at(nice, lambda: KokoroModel(threads=threads), "kokoro-load")
        self.pool: SynthesisPool[_Job] = SynthesisPool(self._make, workers=workers, nice=nice, name="kokoro")

    @property
    def made(self) -> int:
        """Segments made."""
        return self.pool.made

    @property
    def stopped(self) -> int:
        """Segments cancelled before or while they were made."""
        return self.pool.stopped

    def _make(self, job: _Job) -> tuple[np.ndarray, list[str]]:
        clauses = espeak.phonemize(job.text, "en" if job.voice.startswith("b") else "en-us")
        job.options = self._ort.RunOptions()
        if job.cancelled.is_set():  # (cancel sets terminate on options made from here on)
            raise Cancelled
        return self.model.run(self.model.tokens(clauses), job.voice, job.speed, job.options), clauses

    def submit(self, job: _Job) -> None:
        self.pool.submit(job)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted segment has been made or stopped."""
        return self.pool.wait_idle(timeout)

    @staticmethod
    def cancel(job: _Job) -> None:
        job.cancel()

    def warm(self) -> None:
        """One short synthesis: the first real one does not pay for set-up."""
        self.model.run(self.model.tokens(espeak.phonemize("Hello.")), VOICES[0], 1.0)

    def shrink(self) -> None:
        self.model.shrink()

    def close(self) -> None:
        self.pool.close()


class KokoroTalker:
    """Kokoro-82M voices (24 kHz PCM16), with eSpeak NG as ``espeak:<voice>`` and as the
    fallback when the CPU is full."""

    name = "kokoro"
    artifact_id = f"kokoro-82m-int8@{MODEL_SHA256[:12]}"
    sample_rate = RATE

    def __init__(
        self,
        runtime: KokoroRuntime | None = None,
        fallback: espeak.EspeakTalker | None = None,
        *,
        default_voice: str = DEFAULT_VOICE,
    ) -> None:
        self._own_runtime = runtime is None
        self.runtime = runtime or KokoroRuntime()
        self._own_fallback = fallback is None
        self.fallback = fallback or espeak.EspeakTalker()
        self.default_voice = default_voice
        self.router = Router()
        self.check_voice(default_voice)

    @property
    def fallbacks(self) -> int:
        """Replies spoken with eSpeak NG because the neural voice was at capacity."""
        return self.router.to("espeak")

    def resolve_voice(self, voice: str | None) -> str:
        """An OpenAI voice name, a Kokoro voice, or ``espeak:<voice>`` (returned as is)."""
        voice = voice or self.default_voice
        return VOICE_ALIASES[voice] if is_openai_voice(voice) else voice

    def check_voice(self, voice: str) -> None:
        """Raise ValueError if ``voice`` is neither a Kokoro voice nor an eSpeak NG one."""
        resolved = self.resolve_voice(voice)
        if resolved.startswith(ESPEAK_PREFIX):
            self.fallback.check_voice(resolved.removeprefix(ESPEAK_PREFIX))
        elif resolved not in VOICES:
            known = ", ".join([*VOICE_ALIASES, *VOICES])
            raise ValueError(f"unknown voice {voice!r} (one of {known}, or espeak:<voice>)")

    def voices(self) -> list[str]:
        return [*VOICE_ALIASES, *VOICES, *(ESPEAK_PREFIX + v for v in self.fallback.voices())]

    async def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]:
        """Stream the request's audio segment by segment, with estimated word positions.
        A reply's text segments (one request each, the same ``request_id``) keep one voice:
        Kokoro, or eSpeak NG if the reply began while Kokoro was at capacity."""
        voice = self.resolve_voice(request.voice)
        if voice.startswith(ESPEAK_PREFIX):
            source = self.fallback.speak(replace(request, voice=voice.removeprefix(ESPEAK_PREFIX)))
        elif (reply := self.router.reply(request.request_id, lambda: self._chain(voice))).route == "espeak":
            source = self.fallback.speak(replace(request, voice=reply.voice))
        else:
            source = self._speak(request, voice, reply)
        # Closed here, not whenever it is collected: a cancel frees its work at once.
        async with contextlib.aclosing(cast(AsyncGenerator[TalkerChunk, None], source)):
            async for chunk in source:
                yield chunk

    def _chain(self, voice: str) -> list[Choice]:
        """A Kokoro voice while Kokoro has room, else eSpeak NG."""
        return [Choice("kokoro", voice, self.runtime), Choice("espeak", self._espeak_voice(voice))]

    @staticmethod
    def _espeak_voice(voice: str) -> str | None:
        """The eSpeak NG voice standing in for a Kokoro one (by its OpenAI name)."""
        return next((name for name, v in VOICE_ALIASES.items() if v == voice), None)

    async def _speak(self, request: SpeechRequest, voice: str, reply: Routed) -> AsyncIterator[TalkerChunk]:
        loop = asyncio.get_running_loop()
        speed = float(min(2.0, max(0.5, request.speed)))
        segments = split_segments(request.text, reply.spoken)
        first = reply.spoken == 0
        reply.spoken += len(request.text)

        def submit(index: int) -> _Job | None:
            if index >= len(segments):
                return None
            job = _Job(
                loop, first and index == 0, loop.create_future(), text=segments[index][1], voice=voice, speed=speed
            )
            self.runtime.hold(job)
            self.runtime.submit(job)
            return job

        base = 0
        job = submit(0)
        try:
            for index, (offset, text) in enumerate(segments):
                assert job is not None
                audio, clauses = await job.done
                job = submit(index + 1)  # the next segment is made while this one plays
                chunks = speech_chunks(
                    audio,
                    text,
                    clauses,
                    offset=offset,
                    base=base,
                    last=index == len(segments) - 1,
                    rate=RATE,
                    size=CHUNK,
                    owner=self.name,
                    keep_empty=True,
                )
                for chunk in chunks:
                    yield chunk
                base += sum(c.audio.data.size for c in chunks)
        finally:
            if job is not None:
                self.runtime.cancel(job)
                self.runtime.release(job)  # no longer awaited: it no longer counts

    def release(self, request_id: str) -> None:
        """The reply is over: its voice is chosen afresh if the id ever comes again."""
        self.router.release(request_id)

    def shrink(self) -> None:
        """Give back what the voice's arena holds beyond the runs in progress."""
        self.runtime.shrink()

    async def aclose(self) -> None:
        if self._own_runtime:
            await asyncio.to_thread(self.runtime.close)
        if self._own_fallback:
            await self.fallback.aclose()
