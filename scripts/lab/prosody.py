"""The prosody of a turn's end, as evidence for an end-of-turn policy to be weighed on:
the final pitch (level and slope against the speaker's own), the energy of the last
syllables, and the length of the last voiced stretch against the speaker's others
(final lengthening). An autocorrelation pitch tracker over 40 ms frames, 10 ms apart.

Measured, not used: over the natural-voice set these told finished turns from the
first parts of paused sentences no better than chance (``scripts/bench_eot.py
--evidence``), so the policy does not read them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr

RATE = 16000
HOP = RATE // 100
WINDOW = 4 * HOP
VOICED = 0.45
"""Normalised autocorrelation at the pitch lag above which a frame is voiced."""
ACTIVE_DB = 25.0
"""Frames within this much of the segment's loud frames (its 90th percentile) are speech."""


@dataclass(frozen=True, slots=True)
class Prosody:
    """The end of one stretch of speech."""

    final_st: float
    """Pitch of the last five voiced frames, semitones from the speaker's median."""
    slope_st_s: float
    """Pitch slope over the last 250 ms of voicing, semitones per second."""
    end_db: float
    """Level of the last 150 ms of speech against the segment's loud frames."""
    last_run_ratio: float
    """The last voiced stretch's length over the mean voiced stretch's."""


def track(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pitch in Hz or 0 where unvoiced, level in dB) per frame of float ``x`` at :data:`RATE`."""
    n = max(0, (x.size - WINDOW) // HOP + 1)
    f0, db = np.zeros(n), np.full(n, -120.0)
    lo, hi = RATE // 400, RATE // 60
    window = np.hanning(WINDOW)
    for i in range(n):
        frame = x[i * HOP : i * HOP + WINDOW]
        db[i] = 10 * np.log10(float(np.mean(frame * frame)) + 1e-12)
        spectrum = np.fft.rfft((frame - frame.mean()) * window, 2 * WINDOW)
        ac = np.fft.irfft(np.abs(spectrum) ** 2)[:WINDOW]
        if ac[0] <= 0:
            continue
        lag = lo + int(np.argmax(ac[lo:hi] / ac[0]))
        if ac[lag] / ac[0] > VOICED:
            f0[i] = RATE / lag
    return f0, db


def prosody(pcm: np.ndarray, rate: int) -> Prosody | None:
    """The prosody of the end of PCM16 ``pcm``; None with under 50 ms of voicing."""
    x = pcm.astype(np.float32) / 32768.0
    f0, db = track(soxr.resample(x, rate, RATE) if rate != RATE else x)
    if f0.size == 0:
        return None
    active = db > np.percentile(db, 90) - ACTIVE_DB
    voiced = (f0 > 0) & active
    if voiced.sum() < 5:
        return None
    st = 12 * np.log2(np.where(voiced, f0, 1.0) / np.median(f0[voiced]))
    at = np.nonzero(voiced)[0]
    tail = at[at > at[-1] - 25]
    slope = float(np.polyfit(tail * 0.01, st[tail], 1)[0]) if tail.size >= 4 else 0.0
    edges = np.diff(np.concatenate([[0], voiced.astype(np.int8), [0]]))
    runs = np.nonzero(edges == -1)[0] - np.nonzero(edges == 1)[0]
    return Prosody(
        final_st=float(np.median(st[at[-5:]])),
        slope_st_s=slope,
        end_db=float(np.mean(db[np.nonzero(active)[0][-15:]]) - np.percentile(db, 90)),
        last_run_ratio=float(runs[-1] / runs.mean()),
    )
