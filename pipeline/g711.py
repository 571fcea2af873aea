"""G.711 μ-law and A-law (ITU-T G.711), the telephone network's 8 kHz audio.

Encoding goes through a table of every 16-bit sample and decoding through a table of
every byte, both built once from the reference algorithm (Sun's ``g711.c``, as
Python's ``audioop`` implemented it), so a whole chunk is one NumPy lookup.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from duplex.pipeline.resampling import LiveResampler

ULAW = "pcmu"
ALAW = "pcma"
RATE = 8000
HEARD_RATE = 16000
"""What telephone input is heard at: the voice activity and end-of-turn models and the
recogniser take 16 kHz."""

_BIAS = 0x84
_ULAW_CLIP = 8159
_ULAW_SEGMENT_ENDS = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)
_ALAW_SEGMENT_ENDS = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)


def _ulaw_byte(sample: int) -> int:
    value = sample >> 2  # μ-law codes 14 bits
    if value < 0:
        mask, value = 0x7F, -value
    else:
        mask = 0xFF
    value = min(value, _ULAW_CLIP) + (_BIAS >> 2)
    segment = next((i for i, end in enumerate(_ULAW_SEGMENT_ENDS) if value <= end), 8)
    if segment >= 8:
        return 0x7F ^ mask
    return ((segment << 4) | ((value >> (segment + 1)) & 0x0F)) ^ mask


def _ulaw_sample(byte: int) -> int:
    u = ~byte & 0xFF
    magnitude = (((u & 0x0F) << 3) + _BIAS) << ((u >> 4) & 0x07)
    return _BIAS - magnitude if u & 0x80 else magnitude - _BIAS


def _alaw_byte(sample: int) -> int:
    value = sample >> 3  # A-law codes 13 bits
    if value >= 0:
        mask = 0xD5
    else:
        mask, value = 0x55, -value - 1
    segment = next((i for i, end in enumerate(_ALAW_SEGMENT_ENDS) if value <= end), 8)
    if segment >= 8:
        return 0x7F ^ mask
    shift = 1 if segment < 2 else segment
    return ((segment << 4) | ((value >> shift) & 0x0F)) ^ mask


def _alaw_sample(byte: int) -> int:
    a = byte ^ 0x55
    t = (a & 0x0F) << 4
    segment = (a & 0x70) >> 4
    if segment == 0:
        t += 8
    else:
        t = (t + 0x108) << (segment - 1)
    return t if a & 0x80 else -t


@cache
def _encoder(law: str) -> np.ndarray:
    byte = _ulaw_byte if law == ULAW else _alaw_byte
    return np.array([byte(s) for s in range(-32768, 32768)], dtype=np.uint8)


@cache
def _decoder(law: str) -> np.ndarray:
    sample = _ulaw_sample if law == ULAW else _alaw_sample
    return np.array([sample(b) for b in range(256)], dtype=np.int16)


def encode(pcm: np.ndarray, law: str) -> bytes:
    """PCM16 samples as G.711 bytes (one per sample)."""
    return _encoder(law)[pcm.astype(np.int32) + 32768].tobytes()


def decode(data: bytes, law: str) -> np.ndarray:
    """G.711 bytes as PCM16 samples."""
    return _decoder(law)[np.frombuffer(data, dtype=np.uint8)]


class TelephoneInput:
    """One session's G.711 microphone stream, decoded and brought to :data:`HEARD_RATE`
    (a streaming resampler: chunk edges leave no seams)."""

    def __init__(self, law: str) -> None:
        self.law = law
        self._up = LiveResampler(RATE, HEARD_RATE)

    def pcm(self, data: bytes) -> bytes:
        """PCM16 at :data:`HEARD_RATE` for the next G.711 bytes."""
        y = self._up.resample_chunk(decode(data, self.law).astype(np.float32))
        return bytes(np.clip(np.rint(y), -32768, 32767).astype("<i2").tobytes())
