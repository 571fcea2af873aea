"""The buffer reference: what one stage hands the next.

A talker hands a vocoder either PCM (the built-in voice) or codec frames
(integer codes ``[codebooks, T]`` at the codec's frame rate); a vocoder hands the
socket PCM16. The reference says what it holds, at what rate, and who made it,
and its byte size is what the stream bounds count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PCM16 = "pcm16"
CODES = "codes"


@dataclass(frozen=True, slots=True)
class AudioBuffer:
    """A read-only reference to PCM samples or codec frames."""

    data: np.ndarray
    format: str
    """``pcm16``: int16 mono samples ``[n]``; ``codes``: integer codes ``[codebooks, T]``."""
    rate: float
    """Samples per second for PCM (an integer); codec frames per second for codes
    (SNAC at 24 kHz: 11.71875)."""
    owner: str
    """The stage that produced it, for debugging and accounting."""

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("rate must be positive")
        if self.format == PCM16:
            if self.data.dtype != np.int16 or self.data.ndim != 1:
                raise ValueError(f"pcm16 wants int16 [n], got {self.data.dtype} {self.data.shape}")
        elif self.format == CODES:
            if not np.issubdtype(self.data.dtype, np.integer) or self.data.ndim != 2:
                raise ValueError(f"codes want integer [codebooks, T], got {self.data.dtype} {self.data.shape}")
        else:
            raise ValueError(f"unknown buffer format {self.format!r}")
        # Consumers read, never write: a stage must not scribble on a buffer
        # its producer may still hold.
        self.data.flags.writeable = False

    @classmethod
    def pcm(cls, samples: np.ndarray, rate: float, owner: str) -> AudioBuffer:
        """PCM16 from int16 samples, or from floats in [-1, 1] (clipped)."""
        if samples.dtype != np.int16:
            samples = np.clip(np.rint(np.asarray(samples, np.float32) * 32767.0), -32768, 32767).astype(np.int16)
        return cls(np.ascontiguousarray(samples), PCM16, rate, owner)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def length(self) -> int:
        """Samples (PCM) or frames (codes) along time."""
        return int(self.data.shape[-1])

    @property
    def duration_s(self) -> float:
        return self.length / self.rate

    def to_bytes(self) -> bytes:
        """Little-endian PCM16 bytes, as the wire carries them."""
        if self.format != PCM16:
            raise TypeError("only PCM converts to wire bytes")
        return self.data.astype("<i2", copy=False).tobytes()
