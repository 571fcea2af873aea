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

    def taps(self, rate: int) -> list[tuple[int, float]]:
        """(delay in samples, gain) of each reflection, their powers summing to the level."""
        gains = np.array([0.7**k for k in range(self.reflections)])
        gains *= 10 ** (self.level_db / 20) / np.sqrt(np.sum(gains**2))
        signs = [1.0, -1.0] * self.reflections
        return [
            (int(round((self.delay_ms + SPREAD_MS[k % len(SPREAD_MS)] + 66.0 * (k // len(SPREAD_MS))) * rate / 1000)),
             float(g * signs[k]))
            for k, g in enumerate(gains)
        ]  # fmt: skip


class Echo:
    """The room's echo of a stream of played audio, frame by frame."""

    def __init__(self, room: Room, rate: int) -> None:
        self.taps = room.taps(rate)
        self._floor = 0.0 if room.floor_dbfs is None else 32768 * 10 ** (room.floor_dbfs / 20)
        self._noise = np.random.default_rng(0)
        self._history = np.zeros(max(d for d, _ in self.taps), np.float32)  # what played before this frame

    def __call__(self, played: np.ndarray) -> np.ndarray:
        """The echo over the frame in which ``played`` (int16) was played, and the
        microphone's noise floor (float32)."""
        n = played.size
        x = np.concatenate([self._history, played.astype(np.float32)])
        out = np.zeros(n, np.float32)
        for delay, gain in self.taps:
            start = self._history.size - delay
            out += gain * x[start : start + n]
        self._history = x[-self._history.size :]
        if self._floor:
            out += self._noise.standard_normal(n).astype(np.float32) * self._floor
        return out
