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
        far_db, near_db = _dbfs(far), _dbfs(near)
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


NEAR_MARGIN_DB = 6.0
"""How far above the loudest echo expected in a frame the microphone must be for the
frame to be the user's voice, passed as it came. Fitted on the tune part with the gain
below (bench_hearing --echo -15/-30): the 75th percentile and 6 dB let the reply's echo
duck it (6 of 6 at -15 dB); 75th and 10 dB or 95th and 6 dB did not, and kept the cancel
within 0.05 s of no echo (75th and 14 dB: 0.06 s later, more words lost)."""
ECHO_GAIN_PERCENTILE = 95
"""The echo's gain (microphone level less the reply's) is taken near the top of its
spread over the last 3 s: a frame is the user's only above the loudest echo the room
has given, so a room whose echo varies more needs the user louder over it."""
FLOOR_PERCENTILE = 10
"""The microphone's noise floor is its quietest tenth of frames."""
HOLD = 15
"""Frames (150 ms) the microphone stays passed through after the last frame well above
the echo: the quieter sounds between a word's loud parts (a "p", a "k" before the vowel)
are the user's too, and AEC3 takes them for echo. Fitted on the tune part at -15 dB
(bench_hearing --fast --over-reply): 5 -> 15 frames took the cancel 0.45 -> 0.42 s, the
duck's p90 0.26 -> 0.12 s and the cut's p90 116 -> 64 ms, for one backchannel more (4 -> 5
of 56); 10 frames gave the tune part's figures to the digit, 30 one backchannel more again.
Held out: backchannels 7 -> 4 of 40, WER 0.120 -> 0.087."""


DELAY_WINDOW = 100
"""Frames (1 s) of the microphone and the reply the echo's delay is found over."""
DELAY_EVERY = (20, 50)
"""Frames between two searches for it: until it is found (200 ms), then to follow it (500 ms)."""
DELAY_PEAK = 0.25
"""The phase-transform correlation's peak that shows the echo: measured 0.4-0.7 over a
second of echo alone, under 0.14 while the user's voice, not yet passed, filled it."""
DELAY_PROMINENCE = 10.0
"""...and how far above the correlation's typical (median) value the peak must stand."""
SPAN = (1, 4)
"""Frames before and after the echo's delay whose reply a frame's echo can hold: the room's
reflections (the bench's four spread over 31 ms) and the frames' edges."""
TAIL_DB = 10.0
"""Beyond :data:`SPAN`, a room's reverberant tail still carries the reply: at least this far
under it..."""
DECAY_DB = 1.2
"""...and this much less each frame later (a room dying away by 60 dB in half a second).
In a room with a 300 ms diffuse tail (``app/clients/room.py``, ``HARSH``), the tail after
the reply's words was taken for the user at -15 dB, and the reply alone ducked itself (6
of 6, held out); a room with no tail needs the user only a little louder just after the
reply's words."""


class EchoDelay:
    """Where the reply's echo comes in the microphone, to the frame.

    The phase-transform cross-correlation (GCC-PHAT) of the last second of microphone
    and reply (both decimated to ~6 kHz: a frame's precision is all it must have), every
    :data:`DELAY_EVERY` frames; frames the user's voice was passed in are left out.
    A delay is taken once two searches in a row agree on it (within a frame) with a
    clear peak (:data:`DELAY_PEAK`, :data:`DELAY_PROMINENCE`): the user's voice under
    its threshold still fills the window while they talk, and the peak falls there.
    """

    def __init__(self) -> None:
        self._near: list[np.ndarray] = []
        self._far: list[np.ndarray] = []
        self._frames = 0
        self._candidate: int | None = None
        self.lag: int | None = None
        """The echo's delay in frames (None until found)."""

    def add(self, near: np.ndarray, far: np.ndarray, *, user: bool) -> None:
        """A frame of the microphone (``user``: the user's voice) and what played over it."""
        step = max(1, round(near.size / 60))
        self._near.append(np.zeros(near[::step].size, np.float32) if user else near[::step].astype(np.float32))
        self._far.append(far[::step].astype(np.float32))
        del self._near[:-DELAY_WINDOW], self._far[:-DELAY_WINDOW]
        self._frames += 1
        if self._frames % DELAY_EVERY[self.lag is not None] or len(self._near) < DELAY_WINDOW // 2:
            return
        n, f = np.concatenate(self._near), np.concatenate(self._far)
        if not np.any(f) or not np.any(n):
            return
        size = 1 << int(np.ceil(np.log2(2 * n.size)))
        cross = np.fft.rfft(n, size) * np.conj(np.fft.rfft(f, size))
        cc = np.fft.irfft(cross / (np.abs(cross) + 1e-9), size)[: (MAX_LAG + 1) * self._near[-1].size]
        peak = int(np.argmax(cc))
        found = peak // self._near[-1].size
        clear = cc[peak] > DELAY_PEAK and cc[peak] > DELAY_PROMINENCE * float(np.median(np.abs(cc)))
        if clear and self._candidate is not None and abs(found - self._candidate) <= 1:
            self.lag = found
        self._candidate = found if clear else None


class NearEnd:
    """Whether a frame is the user's voice well above any echo of the reply it could hold.

    AEC3's suppressor (as the livekit wheel builds it, with no setting to soften it)
    takes the start of a user talking over the reply for echo: measured on held-out
    voices over a reply at -30 dB, 15-40 dB off 150-400 ms of their first words, which
    the recogniser then misses (interruptions were cancelled ~0.2 s later than with no
    echo, their words heard worse). The server knows the reply's level as it played, so
    the loudest echo a frame can hold is known too: the reply's loudest frame over the
    lags an echo may come at (:data:`MAX_LAG`), plus the room's gain, learned from the
    frames that held only echo (or the microphone's own noise, if louder). A frame
    :data:`NEAR_MARGIN_DB` above that is the user's voice, the echo in it at least that
    far below: it passes as it came. AEC3 still hears every frame, so it stays adapted.

    Once the echo's delay is found (:class:`EchoDelay`), the reply's loudest frame is
    taken around it (:data:`SPAN`) rather than over every lag: between the reply's words
    the user need not be as loud to be heard as the user. At -15 dB this passed 94% of
    the user's voiced frames over a reply, against 71% (30 voices of each part of the
    corpus, 6 dB under the reply; at -6 dB 55% against 11%, at -30 dB 99.9% against
    99.5%), and no frame of echo alone.
    """

    def __init__(self) -> None:
        self.delay = EchoDelay()
        self._far: list[float] = []
        self._gains: list[float] = []  # microphone less the reply's envelope, frames of echo alone
        self._levels: list[float] = []  # the microphone's
        self._frames = 0
        self._held = 0
        self.gain: float | None = None
        """The room's echo gain (dB), once learned."""
        self.floor = SILENT_DBFS
        """The microphone's own noise (dBFS): under a faint echo, what a frame holds."""

    def add(self, near: np.ndarray, far: np.ndarray) -> bool:
        """A frame of the microphone and what played over it: whether it is the user's."""
        self._far.append(_dbfs(far))
        del self._far[: -(MAX_LAG + 1)]
        near_db, envelope = _dbfs(near), self._envelope()
        self._levels.append(near_db)
        del self._levels[:-WINDOW]
        self._frames += 1
        if self._frames % JUDGE_EVERY == 0:
            self.floor = float(np.percentile(self._levels, FLOOR_PERCENTILE))
            if len(self._gains) >= JUDGE_FROM:
                self.gain = float(np.percentile(self._gains, ECHO_GAIN_PERCENTILE))
        reach = max(self._far) > FAR_ACTIVE_DBFS  # (else there is no echo to take the user's voice for)
        if reach and self.gain is not None and near_db > max(envelope + self.gain, self.floor) + NEAR_MARGIN_DB:
            self._held = HOLD
        elif self._held:
            self._held -= 1
        elif envelope > FAR_ACTIVE_DBFS:  # echo alone (or quiet speech under it): the room's gain
            self._gains.append(near_db - envelope)
            del self._gains[:-WINDOW]
        self.delay.add(near, far, user=self._held > 0)
        return self._held > 0

    def _envelope(self) -> float:
        """The reply's loudest frame (dBFS) whose echo this frame can hold."""
        lag = self.delay.lag
        if lag is None:
            return max(self._far)
        last = len(self._far) - max(0, lag - SPAN[0])
        first = max(0, len(self._far) - 1 - lag - SPAN[1])
        span = self._far[first:last]
        # Older frames, as a room's tail would still carry them: TAIL_DB under, DECAY_DB less a frame.
        older = np.array(self._far[:first][::-1])  # the frame just before the span first
        tail = float(np.max(older - TAIL_DB - DECAY_DB * np.arange(1, older.size + 1))) if older.size else -np.inf
        return max(max(span), tail) if span else max(self._far)


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
