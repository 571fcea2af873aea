"""Whose sound is it? Levels that tell the user's own speech from sound around them.

A voice-activity model hears babble, a TV or a song's vocals as speech. What it
cannot tell, the level can: the user speaks into their own microphone at a level
that stays put from turn to turn, and the sound around them is quieter. So a
session learns the user's speech level from their turns, and

* speech over a reply must start within :data:`ONSET_MARGIN_DB` of that level to
  duck it, and be within :data:`LOUD_MARGIN_DB` of it to interrupt it; a sound rising
  out of the quiet ducks it before it is known to be speech only within
  :data:`RISE_MARGIN_DB` (a word's first sound, an "s", is quieter than its vowel);
* a sound judged to be noise (see :mod:`duplex.app.core.listening.bargein`), or heard going
  on after the user's words (:mod:`duplex.app.core.listening.stall`), raises the bar for the
  next onsets to :data:`NOISE_MARGIN_DB` above its level, for a while (the bar falls
  back by :data:`NOISE_DECAY_DB_S`).

Before the first turn the user's level is taken to be :data:`NOMINAL_DB`.
"""

from __future__ import annotations

import math

NOMINAL_DB = -26.0
"""The speech level assumed before the user has taken a turn (dBFS, active speech)."""
ONSET_MARGIN_DB = 12.0
LOUD_MARGIN_DB = 8.0
RISE_MARGIN_DB = 24.0
"""Fitted on the tune part's turn onsets over a reply (clean, -35 dBFS, phone band; offline):
at 18 dB the onset's p95 in clean speech stayed at 268 ms, at 24 dB it came to 64 ms."""
NOISE_MARGIN_DB = 6.0
NOISE_DECAY_DB_S = 1.0
_LEARN = 0.5
"""Weight of the latest turn in the user's level."""


class Levels:
    """One listener's levels: the user's, the current segment's, and the noise's."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.user_db: float | None = None
        self._power = 0.0  # sum of the current segment's speech-window powers
        self._windows = 0
        self._noise_db = -math.inf
        self._noise_at = 0  # input sample where the noise was judged

    @property
    def user(self) -> float:
        return NOMINAL_DB if self.user_db is None else self.user_db

    @property
    def segment_db(self) -> float:
        """The current segment's speech level (dBFS; -inf before its first window)."""
        return 10 * math.log10(self._power / self._windows) if self._windows and self._power > 0 else -math.inf

    def onset_allowed(self, level_db: float, now: int, *, replying: bool) -> bool:
        """Whether a speech window at ``level_db`` may start a segment at input sample ``now``."""
        bar = self._noise_bar(now)
        if replying:
            bar = max(bar, self.user - ONSET_MARGIN_DB)
        return level_db >= bar

    def rise_allowed(self, level_db: float, now: int) -> bool:
        """Whether a sound at ``level_db`` rising out of the quiet over a reply may duck it
        at input sample ``now``, before it is known to be speech."""
        return level_db >= max(self._noise_bar(now), self.user - RISE_MARGIN_DB)

    def start(self) -> None:
        """A new segment."""
        self._power, self._windows = 0.0, 0

    def speech(self, level_db: float) -> None:
        """A speech window of the current segment."""
        self._power += 10 ** (level_db / 10)
        self._windows += 1

    def _noise_bar(self, now: int) -> float:
        """The bar a sound judged noise set for onsets, at input sample ``now``."""
        return self._noise_db - NOISE_DECAY_DB_S * (now - self._noise_at) / self.rate + NOISE_MARGIN_DB

    @property
    def loud(self) -> bool:
        """Whether the current segment is at the user's own level."""
        return self.segment_db >= self.user - LOUD_MARGIN_DB

    def turn(self) -> None:
        """The current segment was the user's turn: learn their level from it."""
        level = self.segment_db
        if math.isfinite(level):
            self.user_db = level if self.user_db is None else (1 - _LEARN) * self.user_db + _LEARN * level

    def noise(self, now: int, level_db: float | None = None) -> None:
        """Sound judged noise at input sample ``now``: the current segment, or sound at ``level_db``."""
        level = self.segment_db if level_db is None else level_db
        if math.isfinite(level):
            self._noise_db, self._noise_at = level, now
