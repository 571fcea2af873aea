"""Where the user began to speak, not where the VAD became sure of it.

Silero's probability rises over the first windows of a word (a soft consonant, a
breathy start: 0.1, 0.2, 0.44, then 0.97), so speech is decided a window or three
after it began, and more over a reply, where the onset must also reach the user's
level. Barge-in truncates the reply at what had played when the user *began*; a late
onset keeps words in the transcript that the user talked over (the issue-21 target:
within 50 ms). So the listener keeps the windows of the quiet before speech and, once
speech is decided, takes its onset back over the contiguous windows just before it
that rise into it, in probability and in level, at most :data:`BACK_MS`: a word's
start grows louder and surer window by window; babble, a hum or a fan before the
user's words do not rise into them, and stop the walk back (measured: without the
level's rise, onsets in 10 dB babble moved ~150 ms too early). A fricative start
("Switch", "Send") is louder than the vowel's first window, where Silero becomes sure,
so a window :data:`LIFT_DB` above the quiet before it counts as rising too (held out,
over a reply, the onset's p90 in quiet went 57 -> 20 ms).

The same quiet tells a sound that rises out of it, before Silero is sure of speech
(:meth:`OnsetTrace.rises`): over a reply, that ducks it a window or more sooner.

Only the watermark moves: whether the speech is a turn, a backchannel or noise is
still judged from the decided onset, so no decision changes, and the recogniser hears
the audio it heard before (the prefix padding counts from the decided onset).
"""

from __future__ import annotations

from collections import deque

from duplex.app.core.units import ms_to_samples
from duplex.pipeline.voice_activity import VadWindow

LEAN = 0.05
"""Below this a window is silence, however it rises (fitted on the tuning part: 0.05,
0.15 and 0.25 tried; docs/benchmarks-history.md, "Where the user began")."""
BACK_MS = 200
"""How far back an onset may move (six 32 ms windows)."""
LIFT_DB = 20.0
"""A surer window this far above the quiet's level (:meth:`OnsetTrace.floor`) is the
speech's, even if louder than the one after it. Fitted on the tuning part: 15-30 dB
alike; under 15 the walk went into a 20 dB babble bed running before the words."""


RISING = 0.1
"""A window must be at least this likely speech to rise out of the quiet: the tune part's
music bed, coming in at -30, -40 or -50 dBFS, rose at all three with 0.05 and at one with 0.1."""
QUIET_WINDOWS = 8
"""Windows of quiet heard before a rise out of it can be told (256 ms)."""


class OnsetTrace:
    """The quiet windows before speech, to find where a decided onset began."""

    def __init__(self, rate: int) -> None:
        self._back = ms_to_samples(BACK_MS, rate)
        self._quiet: deque[VadWindow] = deque(maxlen=16)
        self._armed = True  # a rise is taken once, until the quiet comes back

    def quiet(self, w: VadWindow) -> None:
        """A window heard while no speech is in progress that did not start any."""
        self._quiet.append(w)

    def forget(self) -> None:
        """Speech started or ended: the windows before it are no onset's any more."""
        self._quiet.clear()
        self._armed = True

    def floor(self) -> float:
        """The quiet's level: a quarter of the way up the windows held, quietest first (dBFS)."""
        levels = sorted(q.level for q in self._quiet)
        return levels[len(levels) // 4] if levels else 0.0

    def rises(self, w: VadWindow) -> bool:
        """Whether window ``w`` (no speech decided) rises :data:`LIFT_DB` out of the quiet
        before it and sounds a little like speech. A rise taken (:meth:`took`) is taken
        once, until the level comes back down to the quiet: a sound that goes on becomes
        the quiet, and rises no more."""
        floor = self.floor()
        if w.level < floor + LIFT_DB / 2:
            self._armed = True
        if not self._armed or len(self._quiet) < QUIET_WINDOWS:
            return False
        return w.probability >= RISING and w.level >= floor + LIFT_DB

    def took(self) -> None:
        """The rise :meth:`rises` saw ducked a reply."""
        self._armed = False

    def began(self, w: VadWindow) -> int:
        """Speech was decided at window ``w``: the input sample where it began."""
        onset, later, lifted = w.start, w, self.floor() + LIFT_DB
        for prev in reversed(self._quiet):
            louder = prev.level < later.level or prev.level >= lifted
            rising = LEAN <= prev.probability < later.probability and louder
            if prev.end != onset or not rising or w.start - prev.start > self._back:
                break
            onset, later = prev.start, prev
        return onset
