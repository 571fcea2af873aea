"""A streaming resampler for live input, where every millisecond it holds back counts.

What the microphone sends is heard (voice activity, the onset of a barge-in, the end of a
turn) only once it is at the rate the models listen at. soxr's streaming resampler
holds audio back and releases it in blocks: measured with 20 ms chunks, its default
quality held 21 ms at 24 -> 16 kHz, 32 ms at 48 -> 24 kHz (a call's Opus) and 66 ms at
8 -> 16 kHz (G.711), each released every 40-100 ms; every decision on the input waited
that long. :class:`LiveResampler` is a polyphase windowed-sinc filter that holds half
its span (1.5 ms) and releases every sample it can on every chunk: flat to 0.85 of the
lower rate's Nyquist (1-2 dB down at 0.9), 60 dB and more down from 1.1 of it (72-77 dB
measured at 1.1 and 1.2; what folds back lands above 0.9 of it, where neither Silero nor
Whisper listens much). It costs ~2 ms of one core per second of audio (soxr: 0.24 ms),
numpy's calls more than the arithmetic.
"""

from __future__ import annotations

from math import ceil, gcd

import numpy as np

SPAN_MS = 3.0
"""The filter's length in time: the resampler holds half of it."""
PASSBAND = 0.85
"""Where the response starts to fall, as a share of the lower rate's Nyquist."""
BETA = 6.0
"""The Kaiser window's shape: ~60 dB of stopband."""


class LiveResampler:
    """One stream's resampler from ``src`` to ``dst`` Hz, float32 in, float32 out, aligned
    (output sample ``k`` is input time ``k * src / dst``), holding back ~:data:`SPAN_MS` / 2."""

    def __init__(self, src: int, dst: int) -> None:
        if src <= 0 or dst <= 0:
            raise ValueError("rates must be positive")
        self.src, self.dst = src, dst
        g = gcd(src, dst)
        self.up, self.down = dst // g, src // g
        taps = max(4, ceil(SPAN_MS / 1000 * src))  # input samples under the filter
        n = self.up * taps
        # The cut-off sits between the passband and the lower Nyquist, in the upsampled rate's terms.
        nyquist = min(src, dst) / 2
        cutoff = (PASSBAND * nyquist + nyquist) / 2 / (src * self.up)
        # An odd length (a zero last tap where n is even) puts the centre on a sample.
        odd = n - 1 + n % 2
        t = np.arange(odd) - (odd - 1) / 2
        h = np.zeros(n)
        h[:odd] = 2 * cutoff * np.sinc(2 * cutoff * t) * np.kaiser(odd, BETA) * self.up
        # [phase, tap], the taps newest-last so one window of the input is one dot product.
        self._phases = np.ascontiguousarray(h.reshape(taps, self.up).T[:, ::-1], np.float32)
        self._taps = taps
        self._delay = (odd - 1) // 2  # upsampled samples: the filter's centre
        self._buffer = np.zeros(taps - 1, np.float32)  # silence before the stream began
        self._first = -(taps - 1)  # the input index of _buffer[0]
        self._inputs = 0
        self._outputs = 0

    @property
    def held(self) -> float:
        """Seconds of input the resampler holds back (at most)."""
        return self._delay / self.up / self.src

    def resample_chunk(self, x: np.ndarray) -> np.ndarray:
        """The output that ``x`` (the next input samples) completes."""
        x = np.asarray(x, np.float32).reshape(-1)
        self._buffer = np.concatenate([self._buffer, x])
        self._inputs += x.size
        # Output k needs input (k * down + delay) // up: every k whose newest input is in hand.
        end = (self._inputs * self.up - 1 - self._delay) // self.down + 1
        if end <= self._outputs:
            return np.zeros(0, np.float32)
        k = np.arange(self._outputs, end)
        t = k * self.down + self._delay
        oldest = t // self.up - (self._taps - 1) - self._first
        windows = np.lib.stride_tricks.sliding_window_view(self._buffer, self._taps)
        phase = t % self.up
        y = np.empty(k.size, np.float32)
        if self.up > 4:  # (44.1 kHz: 80 phases) one gather of the taps beats a pass per phase
            np.einsum("ij,ij->i", windows[oldest], self._phases[phase], out=y)
        else:
            for p in range(self.up):
                rows = phase == p
                y[rows] = windows[oldest[rows]] @ self._phases[p]
        self._outputs = end
        # Keep what the next output reaches back to.
        keep = (end * self.down + self._delay) // self.up - (self._taps - 1) - self._first
        if keep > 0:
            self._buffer = self._buffer[keep:]
            self._first += keep
        return y
