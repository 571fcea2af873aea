"""The far end of a session's echo canceller: what the client played over each piece of
its microphone input.

A reply's audio is kept from when it is sent until it has been played (:class:`Tape`).
Over input samples that span session times ``t0..t1``, the client played the reply's
samples ``played(t0)..played(t1)``, the reply's :class:`~duplex.app.core.pacing.Playout`
says (its model of the client's buffer, or the client's own ``playback.ack``s). Those
samples, brought to the input's rate and length, are the reference the canceller
subtracts; the acoustic path and the client's own latency are the canceller's to find.
"""

from __future__ import annotations

import numpy as np

from duplex.app.core.pacing import Playout


class Tape:
    """A reply's audio as sent, by output sample; what has been played is let go."""

    def __init__(self) -> None:
        self._pcm = np.zeros(0, np.int16)
        self._start = 0  # the output sample _pcm[0] is

    def append(self, pcm: np.ndarray) -> None:
        self._pcm = np.concatenate([self._pcm, pcm.astype(np.int16, copy=False)])

    def span(self, a: int, b: int) -> np.ndarray:
        """Samples ``a..b`` (what is still kept of them)."""
        lo, hi = max(a - self._start, 0), max(b - self._start, 0)
        return self._pcm[lo:hi]

    def forget(self, before: int) -> None:
        """Samples before ``before`` will not be asked for again."""
        drop = min(max(before - self._start, 0), self._pcm.size)
        if drop:
            self._pcm = self._pcm[drop:]
            self._start += drop


def far_end(
    tape: Tape, playout: Playout, t0: float, t1: float, n: int, in_rate: int, gain: float = 1.0
) -> np.ndarray | None:
    """What played over ``n`` input samples at session times ``t0..t1`` (int16 at
    ``in_rate``, length ``n``), or None if nothing did."""
    p0, p1 = playout.played(t0), playout.played(t1)
    pcm = tape.span(p0, p1)
    tape.forget(p0)
    if pcm.size == 0:
        return None
    want = max(1, round(n * playout.rate / in_rate))
    if pcm.size > want:  # an ack moved playback on: the newest is what sounded last
        pcm = pcm[-want:]
    elif pcm.size < want:  # it began, or ran out, within these samples
        ran_out = p1 >= playout.sent
        pcm = np.pad(pcm, (0, want - pcm.size) if ran_out else (want - pcm.size, 0))
    x = pcm.astype(np.float32) * gain
    if want != n:
        x = np.interp(np.arange(n) * (want / n), np.arange(want), x).astype(np.float32)
    out: np.ndarray = np.clip(x, -32768, 32767).astype(np.int16)
    return out
