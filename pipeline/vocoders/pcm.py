"""The built-in vocoder: PCM pass-through with a streaming resampler.

The talker speaks at 22050 Hz; the session wants 24 kHz (or another rate). soxr's
streaming resampler keeps its filter state between chunks, so chunked output
equals resampling the whole signal (no clicks at chunk boundaries) and only the
filter's short delay is held back until ``flush``.
"""

from __future__ import annotations

import numpy as np
import soxr

from duplex.pipeline.frames import PCM16, AudioBuffer


class PcmResampleStream:
    """One reply's resampling state."""

    def __init__(self, input_rate: int, output_rate: int, *, quality: str = "HQ") -> None:
        self.input_rate = input_rate
        self.output_rate = output_rate
        self._same = input_rate == output_rate
        self._rs = (
            None if self._same else soxr.ResampleStream(input_rate, output_rate, 1, dtype="float32", quality=quality)
        )

    def _wrap(self, samples: np.ndarray) -> AudioBuffer | None:
        if samples.size == 0:
            return None
        return AudioBuffer.pcm(samples, self.output_rate, "pcm-vocoder")

    def push(self, buf: AudioBuffer) -> AudioBuffer | None:
        if buf.format != PCM16:
            raise TypeError(f"pcm vocoder takes pcm16, got {buf.format}")
        if buf.rate != self.input_rate:
            raise ValueError(f"pcm vocoder opened at {self.input_rate} Hz, got {buf.rate} Hz")
        if self._rs is None:
            return buf if buf.length else None
        x = buf.data.astype(np.float32) / 32768.0
        return self._wrap(self._rs.resample_chunk(x, last=False))

    def flush(self) -> AudioBuffer | None:
        if self._rs is None:
            return None
        return self._wrap(self._rs.resample_chunk(np.zeros(0, np.float32), last=True))

    def output_position(self, input_position: int) -> int:
        return int(round(input_position * self.output_rate / self.input_rate))


class PcmVocoder:
    """Opens a :class:`PcmResampleStream` per reply; cheap enough to run inline."""

    name = "pcm"
    blocking = False

    def __init__(self, quality: str = "HQ") -> None:
        self.quality = quality

    def open(self, input_rate: int, output_rate: int) -> PcmResampleStream:
        return PcmResampleStream(input_rate, output_rate, quality=self.quality)

    async def aclose(self) -> None:
        """Nothing held: each stream's state goes with the stream."""
