"""The near-end judge: which microphone frames over a reply are the user's voice.

AEC3's suppressor takes the start of a user talking over the reply for echo; the server
knows what the reply played and when, so the loudest echo a frame can hold is known, and
a frame well above it is the user's (:class:`NearEnd`), the echo's delay found to the
frame (:class:`EchoDelay`), over the whole band and over its high band alone (:class:`Band`).
"""

from __future__ import annotations

import numpy as np

from duplex.pipeline.echo import FAR_ACTIVE_DBFS, JUDGE_EVERY, JUDGE_FROM, MAX_LAG, SILENT_DBFS, WINDOW, dbfs

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


HIGH_HZ = 3000.0
"""The band a fricative is told in: a user's "s", "f" or "sh" (most of it 4-8 kHz) under a
reply's echo is often quieter than the echo's vowels, yet louder there than any echo of
what the reply played in that band."""
HIGH_ACTIVE_DBFS = -75.0
"""A reply louder than this in that band is sounding there: its echo in the band is learned."""


def high_dbfs(x: np.ndarray, rate: int) -> float:
    """The level of ``x`` above :data:`HIGH_HZ` (dBFS, on the whole frame's scale)."""
    power = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    above = float(power[int(HIGH_HZ * x.size / rate) :].sum()) * 2 / x.size**2
    return 10 * float(np.log10(max(above / 32768.0**2, 1e-9)))


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

    The same is asked of the band above :data:`HIGH_HZ` on its own (a 16 kHz input or
    more), with the echo's gain in that band learned the same way: a fricative under the
    echo's vowels ("Switch", "Send") is the user's there 100-150 ms before their vowel is
    loud enough overall, and is passed, so a reply over a speakerphone ducks as soon as
    with no echo (held out at -15 dB: 0.090 / 0.160 s -> 0.060 / 0.100 s after the onset).
    """

    def __init__(self, rate: int) -> None:
        self.delay = EchoDelay()
        self.overall = Band()
        """The frames' levels over the whole band."""
        self.high = Band() if rate >= 16000 else None
        """...and above :data:`HIGH_HZ` (None: a narrowband input, with little or none of it)."""
        self.rate = rate
        self._frames = 0
        self._held = 0
        self.by = ""
        """What passed the last frame judged well above the echo: "level" (the whole
        band's) or "hiss" (the high band's alone); "" before any."""

    @property
    def gain(self) -> float | None:
        """The room's echo gain (dB), once learned."""
        return self.overall.gain

    def add(self, near: np.ndarray, far: np.ndarray) -> bool:
        """A frame of the microphone and what played over it: whether it is the user's."""
        self._frames += 1
        judge = self._frames % JUDGE_EVERY == 0
        reach = self.overall.far_frame(dbfs(far)) > FAR_ACTIVE_DBFS  # (else no echo to take the user for)
        lag = self.delay.lag
        level = self.overall.above(dbfs(near), lag, judge)
        hiss = False
        if self.high is not None:
            self.high.far_frame(high_dbfs(far, self.rate))
            hiss = self.high.above(high_dbfs(near, self.rate), lag, judge)
        if reach and (level or hiss):
            self._held, self.by = HOLD, "level" if level else "hiss"
        elif self._held:
            self._held -= 1
        elif self.overall.learn(FAR_ACTIVE_DBFS) and self.high is not None:  # echo alone: the room's gain
            self.high.learn(HIGH_ACTIVE_DBFS)
        self.delay.add(near, far, user=self._held > 0)
        return self._held > 0


class Band:
    """One band's levels for :class:`NearEnd`: the reply's frames, the microphone's, and
    the room's echo gain and noise floor learned from them."""

    def __init__(self) -> None:
        self._far: list[float] = []
        self._gains: list[float] = []  # microphone less the reply's envelope, frames of echo alone
        self._levels: list[float] = []  # the microphone's
        self._last = (SILENT_DBFS, SILENT_DBFS)  # the last frame's (microphone, envelope)
        self.gain: float | None = None
        """The room's echo gain in this band (dB), once learned."""
        self.floor = SILENT_DBFS
        """The microphone's own noise in this band (dBFS): under a faint echo, what a frame holds."""

    def far_frame(self, far_db: float) -> float:
        """What played over the frame (dBFS); returns the loudest of the last :data:`MAX_LAG` frames."""
        self._far.append(far_db)
        del self._far[: -(MAX_LAG + 1)]
        return max(self._far)

    def above(self, near_db: float, lag: int | None, judge: bool) -> bool:
        """The microphone's frame (dBFS; the echo's delay ``lag`` in frames, if found):
        whether it is :data:`NEAR_MARGIN_DB` above the loudest echo it could hold (and
        the noise). ``judge``: refresh the gain and floor first."""
        envelope = self._envelope(lag)
        self._last = (near_db, envelope)
        self._levels.append(near_db)
        del self._levels[:-WINDOW]
        if judge:
            self.floor = float(np.percentile(self._levels, FLOOR_PERCENTILE))
            if len(self._gains) >= JUDGE_FROM:
                self.gain = float(np.percentile(self._gains, ECHO_GAIN_PERCENTILE))
        return self.gain is not None and near_db > max(envelope + self.gain, self.floor) + NEAR_MARGIN_DB

    def learn(self, active_dbfs: float) -> bool:
        """The last frame was echo alone (or quiet speech under it): learn the room's gain
        from it if the reply sounded over ``active_dbfs``; whether it did."""
        near_db, envelope = self._last
        if envelope <= active_dbfs:
            return False
        self._gains.append(near_db - envelope)
        del self._gains[:-WINDOW]
        return True

    def _envelope(self, lag: int | None) -> float:
        """The reply's loudest frame (dBFS) whose echo this frame can hold."""
        if lag is None:
            return max(self._far)
        last = len(self._far) - max(0, lag - SPAN[0])
        first = max(0, len(self._far) - 1 - lag - SPAN[1])
        span = self._far[first:last]
        # Older frames, as a room's tail would still carry them: TAIL_DB under, DECAY_DB less a frame.
        older = np.array(self._far[:first][::-1])  # the frame just before the span first
        tail = float(np.max(older - TAIL_DB - DECAY_DB * np.arange(1, older.size + 1))) if older.size else -np.inf
        return max(max(span), tail) if span else max(self._far)
