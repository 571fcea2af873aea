"""A speakerphone's room for simulated clients: what the speaker plays comes back into
the microphone, late, through a few reflections, at a set level.

The echo benchmark (``scripts/bench_hearing.py --echo``) and the tests play each reply
through a :class:`Room` into the client's own microphone, as a laptop without a
headset does: ``-15`` dB is a laptop with no canceller, ``-30`` dB about what a
browser's canceller leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPREAD_MS = (0.0, 7.0, 19.0, 31.0, 47.0, 66.0)
"""Where the reflections come after the first one (ms)."""


@dataclass(frozen=True, slots=True)
class Room:
    """The path from the speaker to the microphone."""

    level_db: float = -30.0
    """The echo's power relative to what the speaker played."""
    delay_ms: float = 60.0
    """When the first reflection arrives after the sound is played."""
    reflections: int = 4
    floor_dbfs: float | None = -70.0
    """The microphone's own noise (a real one is never digitally silent); None: none."""
    drive: float = 0.0
    """A small speaker driven into distortion: it plays ``tanh(drive x) / drive`` of
    full-scale ``x``, quiet sounds as they are and loud ones flattened (at 3, a peak at
    -6 dBFS comes out 4.4 dB lower; 0: it plays what it is sent)."""
    tail_ms: float = 0.0
    """A diffuse tail from the first reflection, dying away by 60 dB over this long, its
    power 10 dB under the reflections' (0: none)."""

    def taps(self, rate: int) -> list[tuple[int, float]]:
        """(delay in samples, gain) of each reflection, their powers (and the tail's)
        summing to the level."""
        gains = np.array([0.7**k for k in range(self.reflections)])
        share = 1.0 / (1.0 + TAIL_SHARE) if self.tail_ms else 1.0
        gains *= np.sqrt(share) * 10 ** (self.level_db / 20) / np.sqrt(np.sum(gains**2))
        signs = [1.0, -1.0] * self.reflections
        return [
            (int(round((self.delay_ms + SPREAD_MS[k % len(SPREAD_MS)] + 66.0 * (k // len(SPREAD_MS))) * rate / 1000)),
             float(g * signs[k]))
            for k, g in enumerate(gains)
        ]  # fmt: skip

    def tail(self, rate: int) -> np.ndarray:
        """The diffuse tail's response from the first reflection on (empty: none)."""
        if not self.tail_ms:
            return np.zeros(0, np.float32)
        n = int(rate * self.tail_ms / 1000)
        t = np.random.default_rng(5).standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
        power = TAIL_SHARE / (1.0 + TAIL_SHARE) * 10 ** (self.level_db / 10)
        tail: np.ndarray = (t * np.sqrt(power / np.sum(t**2))).astype(np.float32)
        return tail


TAIL_SHARE = 0.1
"""The diffuse tail's power against the reflections' (10 dB under)."""
HARSH = Room(drive=3.0, tail_ms=300.0)
"""A harsher room than the default's four clean reflections: a small speaker driven into
distortion and a 300 ms diffuse tail (``scripts/bench_hearing.py --room harsh``); the
speakerphone's constants were fitted in the default one. ``dataclasses.replace`` sets its level."""


class Echo:
    """The room's echo of a stream of played audio, frame by frame."""

    def __init__(self, room: Room, rate: int) -> None:
        self.taps = room.taps(rate)
        self._tail = room.tail(rate)
        self._drive = room.drive
        self._floor = 0.0 if room.floor_dbfs is None else 32768 * 10 ** (room.floor_dbfs / 20)
        self._noise = np.random.default_rng(0)
        longest = max(max(d for d, _ in self.taps), self.taps[0][0] + self._tail.size)
        self._history = np.zeros(longest, np.float32)  # what played before this frame

    def __call__(self, played: np.ndarray) -> np.ndarray:
        """The echo over the frame in which ``played`` (int16) was played, and the
        microphone's noise floor (float32)."""
        n = played.size
        sounded = played.astype(np.float32)
        if self._drive:
            sounded = (np.tanh(self._drive * sounded / 32768) / self._drive * 32768).astype(np.float32)
        x = np.concatenate([self._history, sounded])
        out = np.zeros(n, np.float32)
        for delay, gain in self.taps:
            start = self._history.size - delay
            out += gain * x[start : start + n]
        if self._tail.size:  # from the first reflection on
            end = self._history.size - self.taps[0][0] + n
            out += np.convolve(x[end - n - self._tail.size + 1 : end], self._tail, "valid").astype(np.float32)
        self._history = x[-self._history.size :]
        if self._floor:
            out += self._noise.standard_normal(n).astype(np.float32) * self._floor
        return out
