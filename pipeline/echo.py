"""Cleaning a session's microphone before it is heard: the :class:`Cleaning` seam.

A speakerphone hears the reply it plays. The server knows exactly what it sent and,
from the playout model and ``playback.ack``, when each sample was played: that is the
reference ("far end") an echo canceller needs. A :class:`Cleaner` takes the
microphone ("near end") with the far end that played over the same input samples
and returns the microphone with the echo (and, if asked, steady noise) taken out,
sample for sample: the input clock, and every watermark on it, is unchanged.

One :class:`Cleaning` serves every session; each session opens its own cleaner
(an echo canceller keeps state: the room's echo path, its delay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

FRAME_S = 0.01
"""The processing frame: WebRTC's audio processing takes exactly 10 ms at a time."""
TAIL_S = 0.5
"""How long after the far end falls silent its echo may still be heard (a room's tail,
the client's buffer): the canceller keeps running that long."""


class Cleaner(Protocol):
    """One session's microphone cleaner."""

    echo: bool
    """Whether it cancels the far end's echo."""
    noise: bool
    """Whether it suppresses steady noise."""
    cpu_s: float
    """Processing seconds spent so far (what it costs a session)."""

    def process(self, near: np.ndarray, far: np.ndarray | None) -> np.ndarray:
        """``near`` (int16) cleaned, the same length; ``far``: what played over the same
        samples (int16, the same length), None when nothing did."""
        ...


class Cleaning(Protocol):
    """Opens a cleaner for each session."""

    name: str

    def open(self, rate: int, *, echo: bool, noise: bool) -> Cleaner:
        """A cleaner for input at ``rate``."""
        ...


FAR_ACTIVE_DBFS = -50.0
"""A far-end frame louder than this is the reply sounding (its echo, if any, is heard)."""
NO_ECHO_DB = -55.0
"""A microphone this far below the reply while it sounds hears no echo of it."""
PRESENCE_FRAMES = 200
"""Frames of the reply sounding that the echo's presence is judged on (2 s)."""
PRESENCE_MIN = 20
"""...and at least this many before the judgement can be "no echo"."""


class EchoPresence:
    """Whether the microphone hears the far end at all.

    An echo canceller has nothing to do on a headset, or on a client that sends digital
    silence between words (a replay, a muted microphone, a text-to-speech client), and
    WebRTC's AEC3 then still assumes an echo: measured here, with a silent microphone it
    took 37-57 dB off the first quarter second of speech over the reply (and 8-18 dB off
    the rest). So the microphone's level is compared with the far end's while the reply
    sounds: where it sits more than :data:`NO_ECHO_DB` below the reply in most frames
    (the median over the last two seconds of the reply), there is no echo to take out
    and the microphone goes on as it came. The median, not a low percentile: the echo
    comes 60-400 ms after the reply, so the first frames of each of its words find the
    microphone still quiet even on a speakerphone (a low percentile took those for "no
    echo" and let a -30 dB echo through). With an echo, or a microphone with any room
    noise, most frames sit higher and the canceller works.
    """

    def __init__(self) -> None:
        self._gaps: list[float] = []  # near - far (dB) of recent frames with the far end sounding
        self.audible = True
        """Whether the echo is judged present (it is until shown otherwise)."""

    def add(self, near: np.ndarray, far: np.ndarray) -> bool:
        far_db = _dbfs(far)
        if far_db > FAR_ACTIVE_DBFS:
            self._gaps.append(_dbfs(near) - far_db)
            del self._gaps[:-PRESENCE_FRAMES]
            if len(self._gaps) >= PRESENCE_MIN:
                self.audible = float(np.median(self._gaps)) > NO_ECHO_DB
        return self.audible


def _dbfs(x: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) if x.size else 0.0
    return 20 * float(np.log10(max(rms, 1e-3) / 32768))


class Framed:
    """Cuts any slicing of the input into fixed frames for ``step`` (near, far) -> near,
    and gives back as many samples as it was given, every time.

    A client sending whole frames (10 ms multiples, as most do) gets its audio back with
    no delay. Otherwise the first piece that ends inside a frame is made up with silence
    at its front: from then on the output runs up to one frame (10 ms) behind the input,
    and the session's events with it. While nothing has played for :data:`TAIL_S` and
    noise is not suppressed, nothing is processed: a session costs nothing while no
    reply plays.
    """

    def __init__(self, rate: int, step: Callable[[np.ndarray, np.ndarray], np.ndarray], *, always: bool) -> None:
        self.frame = int(rate * FRAME_S)
        self._step = step
        self._always = always
        self._tail = int(rate * TAIL_S)
        self._quiet = self._tail + 1  # samples since the far end last sounded
        self._near = np.zeros(0, np.int16)  # not processed yet (less than a frame)
        self._far = np.zeros(0, np.int16)
        self._ready = np.zeros(0, np.int16)  # processed, not given back yet (the lag)

    @property
    def lag(self) -> int:
        """Samples the output runs behind the input."""
        return self._ready.size + self._near.size

    def process(self, near: np.ndarray, far: np.ndarray | None) -> np.ndarray:
        n = near.size
        if far is not None and np.any(far):
            self._quiet = 0
        else:
            self._quiet += n
        if not self._always and self._quiet > self._tail:  # nothing played lately: nothing to cancel
            if not self.lag:
                return near
            line = np.concatenate([self._ready, self._near, near])  # through the delay line as it is
            self._ready, self._near, self._far = line[n:], self._near[:0], self._far[:0]
            return line[:n]
        nears = np.concatenate([self._near, near])
        fars = np.concatenate([self._far, far if far is not None else np.zeros(n, np.int16)])
        whole = nears.size - nears.size % self.frame
        cleaned = [self._step(nears[i : i + self.frame], fars[i : i + self.frame]) for i in range(0, whole, self.frame)]
        self._near, self._far = nears[whole:], fars[whole:]
        ready = np.concatenate([self._ready, *cleaned])
        if ready.size < n:  # a piece ended inside a frame: fall behind by what is missing
            ready = np.concatenate([np.zeros(n - ready.size, np.int16), ready])
        self._ready = ready[n:]
        return ready[:n]
