"""How much of the event loop listening to microphones takes, and whether one more fits.

Voice activity runs on the loop thread for every slice of audio a session sends. Audio
at the pace of speech is heard at once and not charged to the session's loop share
(:class:`~duplex.app.edge.fairness.RealTime`), so enough real-time microphones together
could take the whole loop: 120 sessions of quiet noise from one client held every
other session's round trip at 440 ms. So the server measures what hearing real-time
audio costs the loop (seconds of the loop thread's CPU per second of wall time, decayed
over a few seconds: CPU, since time spent waiting for a core that the models hold is not
what one microphone fewer would give back), admits a new session only while that is
under ``admit_below``, and while it is over ``shed_above`` closes the newest session
that streams (1013, try again later), one every ``settle_s``, so the sessions it keeps
are heard in real time.
"""

from __future__ import annotations

import math


class HearingLoad:
    """The loop's load from hearing real-time microphones, and what it allows."""

    def __init__(self, *, admit_below: float, shed_above: float, settle_s: float = 2.0) -> None:
        self.admit_below = admit_below
        self.shed_above = shed_above
        self.settle_s = settle_s
        """The decay time of the measure, and the wait between two sheddings."""
        self._spent = 0.0  # loop seconds spent hearing, exponentially decayed
        self._at = 0.0
        self._shed_at = -math.inf

    def add(self, seconds: float, now: float) -> None:
        """``seconds`` of the loop were spent hearing real-time audio, at ``now``."""
        self._spent = self._decayed(now) + seconds
        self._at = now

    def load(self, now: float) -> float:
        """Loop seconds per second spent hearing, lately (a share of one core)."""
        return self._decayed(now) / self.settle_s

    def admits(self, now: float) -> bool:
        """Whether a new session may open: the loop hears everyone in real time with room."""
        return self.load(now) < self.admit_below

    def sheds(self, now: float) -> bool:
        """Whether a session should be closed now (and, if so, that one is)."""
        if self.load(now) <= self.shed_above or now - self._shed_at < self.settle_s:
            return False
        self._shed_at = now
        return True

    def _decayed(self, now: float) -> float:
        return self._spent * math.exp(-max(0.0, now - self._at) / self.settle_s)
