"""The reply's echo taken out of the frames the user's voice passes in: a linear canceller.

AEC3 hears every frame, but the frames :class:`~duplex.pipeline.echo.NearEnd` judges the
user's voice pass around it (its suppressor cuts the start of a user talking over the
reply), and with them the echo under the voice: at -15 dB, interruptions were cancelled
0.11 s later than with no echo (held out), their words heard with the reply's under them.
What a room does to the reply is mostly a filter, so the reply through a learned filter
is most of that echo, and the voice over it is left as it came: no suppressor, nothing
taken that is not the reply's.

:class:`LinearEcho` is a partitioned-block frequency-domain adaptive filter (the
multidelay filter of Speex and WebRTC's AEC3 linear stage, in numpy): one 10 ms block a
partition, :data:`PARTITIONS` of them from just before the echo's delay found by
:class:`~duplex.pipeline.echo.EchoDelay`, normalised least mean squares per frequency
bin, each partition's step in proportion to its part of the room. It learns only on
frames of the reply's echo alone (never on the user's voice), and its output is used
only while what it removes from those frames shows it has learned the room
(:data:`MIN_ERLE_DB`), and only where the echo it predicts is no louder than the frame.

Measured (``scripts/bench_hearing.py --fast --over-reply --echo -15``, held out): the
cancel 0.55 -> 0.46 s after the interruption's onset (0.43 with no echo), its words'
WER 0.130 -> 0.065; under a tune voice 1.65 s into a reply, 7 dB of the echo taken out
in the bench's room, 10 dB in one with a diffuse tail and a distorting speaker
(``tests/test_linear_echo.py``, :data:`~duplex.app.clients.room.HARSH`). It costs ~20 ms
of one core per second of a reply whose echo is heard at 16 kHz, ~36 ms at 48 kHz
(nothing learned while no echo is found).
"""

from __future__ import annotations

import numpy as np

from duplex.pipeline.echo import MAX_LAG

PARTITIONS = 24
"""Blocks (10 ms each) of the room's response the filter models, from :data:`BEFORE`
blocks ahead of the echo's delay: reflections up to ~220 ms after the first (a diffuse
tail longer than that is left, as all of it was before)."""
BEFORE = 2
"""Blocks ahead of the found delay the filter starts (the delay is found to a block)."""
STEP = 0.8
"""The adaptation step (0 < STEP < 1; normalised by the reference's power in each bin, as
the partitions' shares weigh it). Fitted on the tune voices' reply through the bench's
room: 0.2-0.8 all converge, 0.8 to 12-15 dB within 1.65 s (0.5: 9-12 dB)."""
SMOOTH = 0.9
"""Per-frame smoothing of the reference's power per bin, and of the echo-alone powers."""
PROPORTION = 0.1
"""Each partition's step is its filter's size plus this share of the largest's."""
FLOOR_DBFS = -60.0
"""The reference's power below which a bin is not learned from (its step is damped by
this): a reply's quiet bins would otherwise take the microphone's noise for the room's."""
LOUDER = 2.0
"""Once the filter has learned the room, a frame with more power than this times the
echo it predicts holds something else (the user under the near-end judge's threshold,
the start of a word): nothing is learned from it, or the user's voice would be taken
for the room's."""
REPLAY = 100
"""Frames (1 s) heard before the echo's delay was found that the filter learns from when
it is: the delay takes 0.5-0.7 s of the reply's echo to find, and a user may talk over
the reply soon after it starts."""
MIN_ERLE_DB = 6.0
"""What the filter must take out of the echo alone (its power in, less its power out,
smoothed) before its output is used: until it has learned the room, the voice passes as
it came."""


class LinearEcho:
    """One session's linear echo canceller, frame by frame (int16 in, int16 out)."""

    def __init__(self, frame: int) -> None:
        self.n = frame
        self._lag: int | None = None
        # Per frame, newest last: the reference's block spectrum, the microphone, whether
        # the user's; kept for the longest delay and :data:`REPLAY` frames more.
        self._spectra: list[np.ndarray] = []
        self._near: list[np.ndarray] = []
        self._user: list[bool] = []
        self._previous: np.ndarray = np.zeros(frame, np.float32)  # the reference's last block
        bins = frame + 1
        self._w: np.ndarray = np.zeros((PARTITIONS, bins), np.complex64)
        self._power: np.ndarray = np.zeros(bins, np.float32)
        self._floor = 2 * frame * 10 ** (FLOOR_DBFS / 10)  # a bin's power at FLOOR_DBFS
        self._echo_in = 0.0  # smoothed power of the echo alone, before and after
        self._echo_out = 0.0
        self.erle_db = 0.0
        """What the filter takes out of the echo alone, dB (smoothed)."""

    def reset(self) -> None:
        """Forget the room (the echo's delay moved)."""
        self._w[:] = 0
        self._power[:] = 0
        self._echo_in = self._echo_out = 0.0
        self.erle_db = 0.0

    def process(self, near: np.ndarray, far: np.ndarray, *, lag: int | None, user: bool) -> np.ndarray:
        """``near`` with the reply's echo estimate taken out, once the filter has learned
        the room; else ``near`` as it came. ``far``: what played over the same samples;
        ``lag``: the echo's delay in frames (None: not found, nothing is learned);
        ``user``: the frame is the user's voice (nothing is learned from it)."""
        x = far.astype(np.float32) / 32768
        self._spectra.append(np.fft.rfft(np.concatenate([self._previous, x])))
        self._previous = x
        self._near.append(near.astype(np.float32) / 32768)
        self._user.append(user)
        keep = MAX_LAG + PARTITIONS + REPLAY
        del self._spectra[:-keep], self._near[:-keep], self._user[:-keep]
        if lag != self._lag:
            if self._lag is None or lag is None or abs(lag - self._lag) > 1:
                self.reset()
                if lag is not None:  # learn the room from what was heard already
                    for back in range(min(REPLAY, len(self._near) - 1), 0, -1):
                        self._frame(back, lag)
            self._lag = lag
        if lag is None:
            return near
        cleaned = self._frame(0, lag)
        if cleaned is None:
            return near
        out: np.ndarray = np.clip(np.round(cleaned * 32768), -32768, 32767).astype(np.int16)
        return out

    def _frame(self, back: int, lag: int) -> np.ndarray | None:
        """The frame ``back`` frames before the newest with the echo's estimate taken out
        (None: the filter has not learned the room, or the estimate is wrong); learns from
        it if it is the echo alone."""
        delay = max(0, lag - BEFORE)
        newest = len(self._spectra) - 1 - back
        if newest - delay - PARTITIONS + 1 < 0:
            return None
        # blocks[p]: the reference `delay + p` frames before this one.
        blocks = np.stack(self._spectra[newest - delay - PARTITIONS + 1 : newest - delay + 1][::-1])
        d = self._near[newest]
        y = np.fft.irfft((self._w * blocks).sum(axis=0), 2 * self.n)[self.n :]
        e = d - y
        learned = self.erle_db >= MIN_ERLE_DB
        if not self._user[newest] and (not learned or float(d @ d) <= LOUDER * float(y @ y)):
            self._learn(blocks, e, d)
        # (the echo it predicts can be no louder than the frame it is in: else it is wrong)
        return e if learned and float(y @ y) <= float(d @ d) else None

    def _learn(self, blocks: np.ndarray, e: np.ndarray, d: np.ndarray) -> None:
        """One normalised step towards the room on a frame of the echo alone."""
        if not np.any(blocks[0]):
            return  # nothing played in the newest block: nothing to learn the room from
        err = np.fft.rfft(np.concatenate([np.zeros(self.n, np.float32), e]))
        # Each partition's share of the step follows its part of the room (proportionate,
        # as Speex's filter does): a room's early reflections are few, and learned sooner.
        size = np.sqrt((self._w.real**2 + self._w.imag**2).sum(axis=1))
        share = size + PROPORTION * size.max() + 1e-9
        share = share / share.sum()
        power = blocks.real**2 + blocks.imag**2
        norm = (share[:, None] * power).sum(axis=0)  # the reference's power the step sees, per bin
        self._power = np.maximum(SMOOTH * self._power + (1 - SMOOTH) * norm, norm)  # (an onset at once)
        gradient = share[:, None] * np.conj(blocks) * err / (self._power + self._floor)
        w = np.fft.irfft(self._w + STEP * gradient, 2 * self.n, axis=1)
        w[:, self.n :] = 0  # the gradient constraint: each partition a block long
        self._w = np.fft.rfft(w, axis=1)
        self._echo_in = SMOOTH * self._echo_in + (1 - SMOOTH) * float(d @ d)
        self._echo_out = SMOOTH * self._echo_out + (1 - SMOOTH) * float(e @ e)
        self.erle_db = 10 * float(np.log10((self._echo_in + 1e-12) / (self._echo_out + 1e-12)))
