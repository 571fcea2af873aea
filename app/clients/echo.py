"""The echo gate of ``duplex mic``: speakers without headphones, no self-interruption.

Everything here counts device samples, not wall-clock time. In a full-duplex
callback stream the input block and the output block of one callback share a
sample index, so the echo of output sample ``i`` reaches the microphone at
input sample ``i + D`` for a delay ``D`` that is fixed while the stream runs
(output latency, air, input latency). Wall-clock stamps would add the
scheduling jitter of the callback to that delay; under load that jitter is
tens of milliseconds, which is the size of a syllable.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np


class Envelope:
    """The speaker's level by output sample index, one RMS value per ``hop`` samples.

    Written by the audio callback, read by the event loop; a lock keeps a read
    from seeing a half-written hop."""

    def __init__(self, rate: int, hop_s: float = 0.005, keep_s: float = 10.0) -> None:
        self.rate = rate
        self.hop = max(1, int(rate * hop_s))
        self._sq = np.zeros(int(keep_s * rate) // self.hop, np.float64)  # sum of squares per hop, a ring
        self._top = -1  # highest hop written
        self._lock = threading.Lock()

    def add(self, start: int, x: np.ndarray) -> None:
        """Record output samples ``[start, start + len(x))``."""
        if x.size == 0:
            return
        hops = np.arange(start, start + x.size) // self.hop
        with self._lock:
            keep = self._sq.size
            for h in range(max(self._top + 1, int(hops[-1]) - keep + 1), int(hops[-1]) + 1):
                self._sq[h % keep] = 0.0  # a hop seen for the first time starts empty
            self._top = max(self._top, int(hops[-1]))
            np.add.at(self._sq, hops % keep, x.astype(np.float64) ** 2)

    def level(self, start: float, end: float) -> float:
        """Loudest hop overlapping samples ``[start, end)`` (0 where nothing was recorded)."""
        first, last = int(start) // self.hop, int(np.ceil(end) - 1) // self.hop
        with self._lock:
            keep = self._sq.size
            first, last = max(first, self._top - keep + 1, 0), min(last, self._top)
            if last < first:
                return 0.0
            sq = self._sq[np.arange(first, last + 1) % keep].max()
        return float(np.sqrt(sq / self.hop))


@dataclass
class EchoGate:
    """Lets a microphone frame through while the speaker plays only when it is
    clearly louder than the echo expected for it.

    The echo path is measured at the start of each reply (its first half second,
    when the user has just stopped talking): the delay ``D`` that best lines the
    microphone's level up with the speaker's, and the coupling (microphone level
    over speaker level at that delay, 75th percentile where the speaker was
    loud). Each microphone frame ``[s, e)`` is then compared with the loudest
    speaker output in ``[s - D - slack, e - D + slack)``. Before any reply has
    been measured: 50 ms and 6 dB down.
    """

    rate: int  # device samples per second
    margin: float = 2.0  # admit speech 6 dB above the expected echo
    coupling: float = 0.5
    delay_s: float = 0.05
    floor: float = 0.003
    calibrate_s: float = 0.5
    slack_s: float = 0.02  # the gate's tolerance for a delay that moved since it was measured
    max_delay_s: float = 0.4
    min_loud_frames: int = 5  # 100 ms of loud speaker output at least, or the fit is noise
    max_coupling: float = 0.7  # an echo as loud as the speaker means the user talked (or the audio dropped)
    fits: int = 0  # calibrations that changed the estimate (the demo reports each)
    opened: int = 0  # frames let through over an expected echo (the demo reports per reply)
    _samples: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, mic_rms) while calibrating

    def admit(self, mic_rms: float, start: float, end: float, speaker: Envelope, reply_age_s: float | None) -> bool:
        """Whether the microphone frame of input samples ``[start, end)`` may go out."""
        if reply_age_s is not None and 0 <= reply_age_s < self.calibrate_s:
            self._samples.append((start, end, mic_rms))
            return False  # the start of a reply calibrates; nobody barges in within half a second
        if self._samples:
            self._calibrate(speaker)
        expected = self.coupling * self._echo_source(speaker, start, end, self.delay_s, self.slack_s)
        if expected < self.floor * self.coupling:
            return True
        if mic_rms > self.margin * expected + self.floor:
            self.opened += 1
            return True
        return False

    def _echo_source(self, speaker: Envelope, start: float, end: float, delay_s: float, slack_s: float) -> float:
        d, slack = delay_s * self.rate, slack_s * self.rate
        return speaker.level(start - d - slack, end - d + slack)

    def _calibrate(self, speaker: Envelope) -> None:
        frames, self._samples = self._samples, []
        mic = np.array([m for _, _, m in frames])
        if mic.max() < self.floor:
            return  # no echo heard at all (headphones): keep the last estimate
        best = None
        for delay in np.arange(0.0, self.max_delay_s, speaker.hop / self.rate):
            spk = np.array([self._echo_source(speaker, s, e, float(delay), 0.0) for s, e, _ in frames])
            if spk.max() < self.floor or spk.std() == 0 or mic.std() == 0:
                continue
            score = float(np.corrcoef(mic, spk)[0, 1])
            if best is None or score > best[0]:
                best = (score, delay, spk)
        if best is None:
            return
        score, delay, spk = best
        # Only where the speaker was loud: between words a late echo over a quiet
        # block would make the coupling look far bigger than it is.
        loud = spk >= max(self.floor, 0.3 * spk.max())
        if score <= 0.3 or loud.sum() < self.min_loud_frames:
            return  # a reply that began softly says little about the echo: keep the last estimate
        coupling = float(np.percentile(mic[loud] / spk[loud], 75))
        if coupling > self.max_coupling:
            return  # not an echo path: someone spoke over the calibration; keep the last estimate
        self.delay_s = float(delay)
        self.coupling = float(max(coupling, 0.02))
        self.fits += 1

    def invalidate(self) -> None:
        """Drop the calibration under way: the audio dropped out (an xrun), so input and
        output sample indices no longer line up for it."""
        self._samples = []
