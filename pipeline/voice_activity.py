"""Voice activity on the input sample clock: the :class:`VoiceActivity` seam and the
stream that feeds it.

A voice-activity model gives a speech probability for each window of audio at its
own rate; one model serves every session, and each stream keeps its own state
(:class:`ActivityState`). A :class:`VadStream` resamples one session's input to the
model's rate, cuts it into windows and places each on the session's input clock,
so the same audio yields the same windows however fast it arrives. What the
probabilities mean for turns is decided in the realtime core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from duplex.pipeline.resampling import LiveResampler


class ActivityState(Protocol):
    """One stream's state inside a voice-activity model."""

    def probability(self, window: np.ndarray) -> float:
        """Speech probability of the next ``window`` (float32 in [-1, 1] at the model's rate)."""
        ...

    def skip(self, window: np.ndarray) -> None:
        """The next window went by without a question (the energy gate): keep what
        context the model needs from it."""
        ...


class VoiceActivity(Protocol):
    """A voice-activity model, shared by every stream.

    Lifecycle: ready once built (a small model, loaded in the constructor); no
    ``start``. ``aclose`` frees what it holds (a no-op where that is only memory);
    no stream is opened after it.
    """

    name: str
    rate: int
    """Sample rate the model listens at."""
    window: int
    """Samples per decision at that rate."""

    def stream(self) -> ActivityState:
        """State for one new stream."""
        ...

    async def aclose(self) -> None:
        """Free the model's threads, if it has any."""
        ...


@dataclass(frozen=True, slots=True)
class VadWindow:
    """One window's speech probability, placed on the session's input clock."""

    start: int
    end: int
    """Input samples (from the start of the session) the window spans."""
    probability: float
    level: float = -120.0
    """The window's RMS level in dBFS."""


class VadStream:
    """Windows of one session's input and their speech probabilities.

    Windows quieter than ``floor_dbfs`` mostly skip the model (cheap, deterministic,
    and below any real microphone's noise): one in four still reaches it, and all
    of them do while it warms up or while the caller is ``in_speech``, so the
    model's state keeps track of the silence it is in. Fed one window in four during
    speech, the model had held some turns open ~130 ms longer (measured on eSpeak
    turns), which delays every reply.
    """

    def __init__(self, model: VoiceActivity, input_rate: int, *, start: int = 0, floor_dbfs: float = -60.0) -> None:
        self.model = model
        self.input_rate = input_rate
        self._state = model.stream()
        self._resampler = None if input_rate == model.rate else LiveResampler(input_rate, model.rate)
        self._pending = np.zeros(0, np.float32)
        self._windows = 0  # windows made so far
        self._origin = start  # input sample where this stream began listening
        self.samples = start
        """Input samples received, on the session's clock."""
        self._floor = 10 ** (floor_dbfs / 20)
        self.skipped = 0
        """Quiet windows the energy gate kept from the model."""

    def to_input(self, model_samples: int) -> int:
        """An offset at the model's rate as an input sample on the session's clock."""
        return self._origin + model_samples * self.input_rate // self.model.rate

    def push(self, pcm: np.ndarray, in_speech: Callable[[], bool]) -> list[VadWindow]:
        """Feed input PCM16; return the windows it completes. ``in_speech`` is asked
        before each quiet window (the caller's view may change window by window)."""
        self.samples += pcm.size
        x = pcm.astype(np.float32) / 32768.0
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        self._pending = np.concatenate([self._pending, x]) if self._pending.size else x
        size = self.model.window
        n = self._pending.size // size
        if n == 0:
            return []
        windows = self._pending[: n * size].reshape(n, size)
        self._pending = self._pending[n * size :]
        rms = np.sqrt((windows.astype(np.float64) ** 2).mean(axis=1))
        quiet = rms < self._floor
        levels = 20 * np.log10(np.maximum(rms, 1e-6))
        out: list[VadWindow] = []
        for w, hush, level in zip(windows, quiet, levels, strict=False):
            if hush and self._windows >= 16 and self._windows % 4 and not in_speech():
                self._state.skip(w)
                p = 0.0
                self.skipped += 1
            else:
                p = self._state.probability(w)
            start = self._windows * size
            self._windows += 1
            out.append(VadWindow(self.to_input(start), self.to_input(start + size), p, float(level)))
        return out
