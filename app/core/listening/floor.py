"""The floor of the sound around the user: where their words end under babble.

Voice activity hears babble, a TV or music as speech, so under a steady bed of it a
segment never falls silent. :mod:`~duplex.app.core.listening.stall` notices the words
stop growing in the partial transcripts, which takes most of a second of them. The
level tells sooner: a steady bed has a floor, the lowest the short-term level goes
over the few seconds before (between the user's words and before them it is the bed
alone), and once the user's words end the level sits at that floor again. Only
sound heard before counts: a level still falling is no floor yet. :class:`Floor`
follows it (minimum statistics over :data:`HORIZON_S`) and names the input sample
where the level came down to it for :data:`QUIET_MS` running, provided the floor
is well under the user's speech (:data:`GAP_DB`). The listener then treats the
sound after that sample as the silence after speech, so the end-of-turn model and
the transcript decide the turn as at any pause.

In a quiet room the floor is the microphone's own noise, and voice activity calls
the sound at that level silence before this could. Digital silence is no floor at all
(nothing was heard: a microphone starting or muted, a replay's padding): babble that
began a second after it would otherwise have had no floor to come down to until that
silence was 4 s old. After digital silence the floor counts only if the sound first
heard sat at it: a clean line's words have no bed under them, and their floor would be
their own quietest stretch.
"""

from __future__ import annotations

import math
from collections import deque

from duplex.app.core.units import ms_to_samples
from duplex.pipeline.echo import SILENT_DBFS

SMOOTH_MS = 250
"""The short-term level: power averaged over this much audio."""
HORIZON_S = 4.0
"""The floor is the lowest short-term level over this much audio."""
NEAR_DB = 6.0
"""A short-term level within this of the floor is the bed alone (babble's 250 ms level
is within 4-5 dB of its 4 s minimum 95% of the time; fitted with QUIET_MS on the tune
part of ``scripts/bench_eot.py --babble 10 --babble 5``: 5 -> 6 dB took the 10 dB p90
0.98 -> 0.90 s, no pause taken over)..."""
QUIET_MS = 150
"""...and this much of it running after the words: they have ended."""
GAP_DB = 5.0
"""Only where the floor is at least this far under the user's speech: nearer, the
user's own quieter sounds sit at it. (At 5 dB SNR the speech's mean window level is
~8 dB over the bed's floor; 7 dB here left a third of those turns to the stall.)"""
SOFT_TAIL_MS = 200
"""The words' end is put this much after the last window loud over the floor (in the first
short-term span that sat at it): under a bed the level does not hear a soft last sound
(the "s" of "means", the "-ble" of "table"), which voice activity hears in a quiet room,
and the end-of-turn waits were fitted on voice activity's ends. Fitted on the tune part's
mid-sentence pauses (``scripts/bench_eot.py --babble 10 --babble 5``): with voice
activity's own 64 ms, babble at 5 dB took over 6 of its 26; with this, 4 (at 5 dB the
level can miss the whole last word); held out 0 of 17 either way."""
RESUME_DB = 8.0
"""Once ended, the words go on only when the short-term level rises this far over the
floor (a bed's own swells stay under it)."""


class Floor:
    """One session's background floor and the quiet at it (input samples)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._smooth = ms_to_samples(SMOOTH_MS, rate)
        self._horizon = int(HORIZON_S * rate)
        self._quiet = ms_to_samples(QUIET_MS, rate)
        self._tail = ms_to_samples(SOFT_TAIL_MS, rate)
        self._settle = self._smooth + self._quiet  # the latest audio is not yet the floor's
        self._recent: deque[tuple[int, float]] = deque()  # (end, power) of the windows over SMOOTH_MS
        # (end, short-term dB, its span's first end, the window's own dB)
        self._history: deque[tuple[int, float, int, float]] = deque()
        self._settled = 0  # how many of _history the floor has taken
        self._lows: deque[tuple[int, float]] = deque()  # (end, short-term dB), increasing: the running minimum
        self._after_zeros: int | None = None  # a short-term span after the last digital silence...
        self._after_zeros_db: float | None = None  # ...and its level
        self.level_db = -math.inf
        """The short-term level at the latest window."""
        self.at: int | None = None
        """Where the words ended at the floor, while the level stays there."""

    @property
    def db(self) -> float:
        """The floor (dBFS; -inf before any window has settled)."""
        return self._lows[0][1] if self._lows else -math.inf

    def window(self, start: int, end: int, level_db: float) -> None:
        """Every window of input, speech or not (its span and level)."""
        if level_db < SILENT_DBFS:  # digital silence (a microphone starting or muted, padding): nothing heard
            self._recent.clear()
            self._after_zeros, self._after_zeros_db = end + self._smooth, None
            return
        self._recent.append((end, 10 ** (level_db / 10)))
        while self._recent[0][0] <= end - self._smooth:
            self._recent.popleft()
        power = sum(p for _, p in self._recent) / len(self._recent)
        self.level_db = 10 * math.log10(max(power, 1e-12))
        self._history.append((end, self.level_db, self._recent[0][0], level_db))
        if self._after_zeros is not None and self._after_zeros_db is None and end >= self._after_zeros:
            self._after_zeros_db = self.level_db
        while self._history[0][0] <= end - self._horizon:
            self._history.popleft()
            self._settled -= 1
        self._settled = max(self._settled, 0)
        while self._history[self._settled][0] <= end - self._settle:
            low = self._history[self._settled][:2]
            self._settled += 1
            while self._lows and self._lows[-1][1] >= low[1]:
                self._lows.pop()
            self._lows.append(low)
        while self._lows and self._lows[0][0] <= end - self._horizon:
            self._lows.popleft()

    def ended(self, now: int, speech_db: float, *, since: int) -> int | None:
        """Whether the words of speech at ``speech_db`` (begun at input sample ``since``)
        have ended at the floor, as of input sample ``now``: where, or None."""
        if self.at is not None:
            return self.at
        if not self._lows or speech_db - self.db < GAP_DB:
            return None
        floor_at, floor = self._lows[0]
        run = None
        for end, level, first, _ in reversed(self._history):  # (while the user speaks: one step)
            if level > floor + NEAR_DB:
                break
            run, last = first, end  # the words ended in the first short-term span that sat at the floor...
        if run is not None:  # ...after its last window still loud over it (a soft last syllable)
            run = max((e for e, _, _, raw in self._history if run <= e <= last and raw > floor + NEAR_DB), default=run)
        if run is None or run < since or now - run < self._quiet:
            return None
        # The bed must have been heard before the words ended, not only after them: a
        # voice trailing off is quieter too.
        if not any(level >= floor + GAP_DB for end, level, _, _ in self._history if end > floor_at):
            return None
        # After digital silence, the sound first heard must have been at the floor: a clean
        # line (silence, then words with nothing under them) has no bed, only the words'
        # own quietest stretch.
        if self._after_zeros is not None and (self._after_zeros_db is None or self._after_zeros_db > floor + NEAR_DB):
            return None
        self.at = run + self._tail
        return self.at

    def background(self) -> bool:
        """Once ended: whether the latest window is still the bed alone."""
        return self.at is not None and self.level_db <= self.db + RESUME_DB

    def resumed(self) -> None:
        """Sound over the floor again: the words go on."""
        self.at = None
