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
SILENT_DBFS = -90.0
"""Below one least significant bit: digital silence, which no real microphone gives."""
SILENT_RUN = 8
"""Frames in a row of digital silence while the reply sounds that show a microphone
with no room around it (80 ms: a synthetic room's echo comes sooner, in the tests 32-64
ms; a real microphone is never digitally silent)."""
WINDOW = 300
"""Frames (3 s) the echo's presence is judged on."""
MAX_LAG = 40
"""The latest an echo may come after its sound is played: 400 ms, in frames."""
JUDGE_EVERY = 10
"""Frames between judgements (100 ms)."""
JUDGE_FROM = 50
"""Frames of the reply sounding before the first judgement (0.5 s)."""
ECHO_CORRELATION = 0.4
"""The microphone's level follows the reply's, at some lag, at least this closely:
an echo (measured: 0.57-0.97 at -15 to -40 dB; a user talking over a reply with no
echo, under 0.1)."""


ECHO_RELEASE = 0.3
"""An echo judged present is judged gone only below this correlation (the judge swung
across 0.4 while held-out backchannels were judged over a reply at -15 dB)."""


class EchoPresence:
    """Whether the microphone hears the far end at all.

    WebRTC's AEC3 (as the livekit wheel builds it) has no headset detection: with no
    echo to find it still takes the user's speech over the reply for echo. Measured
    here, with a microphone that heard none of the reply it took 32-40 dB off the first
    quarter second of the user's speech and 12-19 dB off the rest, with or without a
    noise floor (-75 to -55 dBFS). So whether there is an echo is judged, and where there
    is none the microphone goes on as it came:

    * an echo makes the microphone's level (10 ms frames, in dB) follow the reply's at
      the echo's lag: the correlation at the best lag up to :data:`MAX_LAG` over the last
      :data:`WINDOW` frames, judged every :data:`JUDGE_EVERY` once the reply has
      sounded for :data:`JUDGE_FROM` frames and every lag can be tried, must reach
      :data:`ECHO_CORRELATION`;
    * until then, a microphone that is digitally silent for :data:`SILENT_RUN` frames
      while the reply sounds (a replay, a text-to-speech client, a muted input) has no
      room around it: no echo.
      Otherwise an echo is assumed (the canceller works) until shown otherwise.

    Only frames an echo could be in (something played in the last 400 ms) and not
    taken by :class:`NearEnd` for the user's voice are judged on, and an echo judged
    present is judged gone only below :data:`ECHO_RELEASE`: the user talking over the
    reply, and on after it was cut, makes the microphone's level their own (the
    correlation fell to 0.39 in the mic demo's room, and swung about 0.4 over held-out
    backchannels at -15 dB), and judged over those seconds the echo seemed gone, so the
    next reply reached the recogniser raw and interrupted itself.
    """

    def __init__(self) -> None:
        self._far: list[float] = []
        self._near: list[float] = []
        self._sounded = 0  # frames with the far end sounding
        self._silent_run = 0  # ...in a row, with the microphone digitally silent
        self._frames = 0
        self.audible = True
        """Whether the echo is judged present."""
        self.correlation: float | None = None
        """The last judgement's correlation (None before the first)."""

    def add(self, near: np.ndarray, far: np.ndarray, *, user: bool = False) -> bool:
        """A frame of the microphone and what played over it (``user``: the user's voice,
        left out of the judgement): whether the echo is judged present."""
        far_db, near_db = dbfs(far), dbfs(near)
        self._far.append(far_db)
        reach = max(self._far[-(MAX_LAG + 1) :]) > FAR_ACTIVE_DBFS  # (else no echo could be in it)
        self._near.append(near_db if reach and not user else np.nan)
        del self._far[: -(WINDOW + MAX_LAG)], self._near[:-WINDOW]
        self._frames += 1
        if far_db > FAR_ACTIVE_DBFS:
            self._sounded += 1
            self._silent_run = self._silent_run + 1 if near_db < SILENT_DBFS else 0
            if self.correlation is None and self._silent_run >= SILENT_RUN:
                self.audible = False  # digital silence under the reply: no room, no echo
        if self._sounded >= JUDGE_FROM and len(self._far) > JUDGE_FROM + MAX_LAG and self._frames % JUDGE_EVERY == 0:
            self.correlation = self._follows()
            self.audible = self.correlation >= (ECHO_RELEASE if self.audible else ECHO_CORRELATION)
        return self.audible

    def _follows(self) -> float:
        """The best correlation of the microphone's levels with the reply's, lagged."""
        near = np.maximum(np.array(self._near), SILENT_DBFS)
        far = np.maximum(np.array(self._far), SILENT_DBFS)
        lags = MAX_LAG
        n = min(near.size, far.size - lags)
        near = near[-n:]
        # far[size - n - lag : size - lag] lines up with near: the reply `lag` frames earlier.
        rows = np.stack([far[far.size - n - lag : far.size - lag] for lag in range(lags + 1)])
        mine = ~np.isnan(near)  # the frames that are not the user's voice
        if mine.sum() < JUDGE_FROM:
            return self.correlation if self.correlation is not None else 1.0  # nothing to judge on: as it was
        near, rows = near[mine], rows[:, mine]
        rows = rows - rows.mean(axis=1, keepdims=True)
        centred = near - near.mean()
        denom = np.sqrt((rows**2).sum(axis=1) * (centred**2).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(denom > 0, rows @ centred / np.where(denom > 0, denom, 1.0), 0.0)
        return float(r.max())


def dbfs(x: np.ndarray) -> float:
    """The level of ``x`` (int16 scale) in dBFS."""
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
            line: np.ndarray = np.concatenate([self._ready, self._near, near])  # through the delay line as it is
            self._ready, self._near, self._far = line[n:], self._near[:0], self._far[:0]
            return line[:n]
        nears = np.concatenate([self._near, near])
        fars = np.concatenate([self._far, far if far is not None else np.zeros(n, np.int16)])
        whole = nears.size - nears.size % self.frame
        cleaned = [self._step(nears[i : i + self.frame], fars[i : i + self.frame]) for i in range(0, whole, self.frame)]
        self._near, self._far = nears[whole:], fars[whole:]
        ready: np.ndarray = np.concatenate([self._ready, *cleaned])  # (typed: some numpy stubs say Any)
        if ready.size < n:  # a piece ended inside a frame: fall behind by what is missing
            ready = np.concatenate([np.zeros(n - ready.size, np.int16), ready])
        self._ready = ready[n:]
        return ready[:n]
