"""Two Whisper models: the better one for a turn whenever the CPU can afford it.

A turn's transcript (the pause's candidate, a committed turn's final) is what the
thinker answers, so its words matter; a partial only ducks or resumes a reply and is
replaced 100 ms later. So partials always go to the fast model (tiny.en), and a turn
goes to the accurate one (base: on the held-out voices under the bench's conditions,
live WER 0.083 against 0.152, for ~1.7x the CPU) when all of these hold:

* this CPU decodes it in time: at start, base's decode of a shipped 1.9 s sentence
  takes at most :data:`FITS_MS`, or base is never used (a turn's candidate is asked
  ~120 ms after the speech and the turn can end ~300 ms after it);
* nothing else is being decoded: a second decode shares the cores, and base's then
  misses the turn's end (10 sessions with base whenever the CPU was under half busy:
  first audio p95 1.30 s against tiny.en's 0.92 s; with this rule too, 0.92 s);
* the process used under :data:`BUSY` of the cores over the last second (20 sessions
  use ~0.65 of them, one ~0.1-0.25).

So the words of a turn depend on the load: a quiet server hears base's, a busy one
tiny.en's (docs/models.md and docs/benchmarks.md have both models' figures).
"""

from __future__ import annotations

import asyncio
import io
import os
import time
import wave
from collections.abc import Callable

import numpy as np

from duplex.pipeline.enhancer import Enhancer
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.weights import AssetFile

PROBE = AssetFile("speech/the_weather_is_nice.wav", "c6a88a2337f7740b709bfe50618ea07dc3f44e90094030e163b19a1f991644d8")

FITS_MS = 200.0
"""Base's decode of the probe sentence (1.9 s) may take this long: ~85 ms on an AVX-512
CPU, where base's turns added nothing to first audio; a CPU that needs more than twice
that would make turns wait (on a 2-core CPU without AVX-512, tiny.en alone took ~350 ms a turn)."""
BUSY = 0.5
"""Share of the cores the process may have used over the last second for a turn to get base."""
WINDOW_S = 1.0


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _probe() -> tuple[np.ndarray, int]:
    """The shipped sentence base is timed on (PCM16 mono)."""
    with wave.open(io.BytesIO(PROBE.read())) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16), w.getframerate()


class Load:
    """The process's CPU use as a share of its cores, over the last :data:`WINDOW_S` or more."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, cpu: Callable[[], float] = time.process_time):
        self._clock, self._cpu, self._cores = clock, cpu, cores()
        self._since = (clock(), cpu())
        self.share = 0.0

    def now(self) -> float:
        """The share, refreshed once a window has passed since the last refresh."""
        t, c = self._clock(), self._cpu()
        t0, c0 = self._since
        if t - t0 >= WINDOW_S:
            self.share, self._since = (c - c0) / (t - t0) / self._cores, (t, c)
        return self.share


class TieredWhisper:
    """Whisper tiny.en for partials and a busy CPU; Whisper base for turns when it can be afforded."""

    name = "whisper"
    partials = True

    def __init__(
        self, fast: str = "tiny.en", accurate: str = "base", *, workers: int = 2, enhancer: Enhancer | None = None
    ) -> None:
        self.fast = WhisperRecognizer(fast, workers=workers, enhancer=enhancer)
        # One at a time: only with nothing else in flight.
        self.accurate = WhisperRecognizer(accurate, workers=1, enhancer=enhancer)
        self.workers = workers
        self.load = Load()
        self.fits: bool | None = None
        """Whether this CPU decodes a turn with the accurate model in time (known after :meth:`start`)."""
        self.probe_ms: float | None = None
        """The accurate model's quickest decode of the probe at start."""
        self.busy = 0
        """Decodes in flight."""
        self.turns = {fast: 0, accurate: 0}
        """Turn transcriptions (a pause's candidate, a committed turn's final) each model made:
        ``duplex_turn_transcripts_total{model}`` in /metrics."""

    @property
    def concurrency(self) -> int:
        return self.workers

    async def start(self) -> None:
        await asyncio.gather(self.fast.start(), self.accurate.start())
        pcm, rate = _probe()
        best = float("inf")
        for _ in range(3):  # the quickest of three: a busy moment at start must not rule base out
            t = time.perf_counter()
            await asyncio.get_running_loop().run_in_executor(None, self.accurate.decode, pcm, rate)
            best = min(best, (time.perf_counter() - t) * 1000)
        self.fits = best <= FITS_MS
        self.probe_ms = best
        self.load = Load()  # from now: the start's own decodes are not load

    def choose(self, partial: bool) -> WhisperRecognizer:
        """The model this decode goes to."""
        if partial or not self.fits or self.busy or self.load.now() >= BUSY:
            return self.fast
        return self.accurate

    async def transcribe(
        self, pcm: np.ndarray, rate: int, *, partial: bool = False, go_on: Callable[[], None] | None = None
    ) -> str:
        model = self.choose(partial)
        if not partial:
            self.turns[model.weights.name] += 1
        self.busy += 1
        try:
            return await model.transcribe(pcm, rate, partial=partial, go_on=go_on)
        finally:
            self.busy -= 1

    async def aclose(self) -> None:
        await asyncio.gather(self.fast.aclose(), self.accurate.aclose())
