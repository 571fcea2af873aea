"""A turn that ends while the sound goes on: the words stopped, the babble did not.

Voice activity hears babble, a TV or a busy café as speech, so under steady
background talk a segment never falls silent and its turn never ends. What does
end is the user's words: partial transcripts stop growing (Whisper, at 10 dB SNR,
does not transcribe the babble behind the speaker), and the sound since is quieter
than the user's own voice. :class:`Stall` notices both and names the input sample
where the words stopped; the listener then treats the quieter sound after it as
the silence after speech (for ``semantic_vad``, which asks the end-of-turn model
and the transcript as it would at any pause). Words that grow again, or sound back
at the user's level, end the stall.

The words must be *heard* not to grow: a partial must have come back for audio
:data:`STALL_MS` past the last new word with words in it, none of them new (in
babble Whisper hears the user's words again, sometimes fewer). Partials are spare
work (a busy recogniser skips them), and Whisper drops a whole guess it is unsure of
(the start of a word, cut off): time without a partial, or an empty one, says nothing
about the words. "Sorry" heard, then nothing for a second, is not the end of "Sorry
to interrupt you there".

A transcript alone is not enough either: a recogniser that lags (a partial stuck on "I need
a recipe" while the user says "for a quick vegetarian dinner") would end turns mid-
sentence; the level rules that out, since the user is still speaking at their level.
"""

from __future__ import annotations

import math
import re
from collections import deque

from duplex.app.core.units import ms_to_samples

STALL_MS = 800
"""Words heard not to grow over this much audio (two partials or more), and..."""
DROP_DB = 6.0
"""...the sound since this much quieter than the speech before: the words have ended."""
_WORD = re.compile(r"[\w']+")


class Stall:
    """One segment's words and levels, to tell when its words ended under ongoing sound."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.after = ms_to_samples(STALL_MS, rate)
        self.start(0)

    def start(self, onset: int) -> None:
        """A new segment began at input sample ``onset``."""
        self.words = 0
        self.grew_at = onset  # input sample where the words last grew (the partial's end)
        self.heard_to = onset  # input sample up to which a partial heard no new words
        self._before = [0.0, 0]  # power sum and count of speech windows up to grew_at
        self._since: deque[tuple[int, float]] = deque()  # (end, power) of speech windows after it
        self.at: int | None = None
        """Where the words stopped, while the stall lasts."""
        self.since_db = -math.inf
        """The level of the sound after the words (the background), once stalled."""
        self._bar = -math.inf

    def window(self, end: int, level_db: float) -> None:
        """A speech window of the segment (its end, its level)."""
        self._since.append((end, 10 ** (level_db / 10)))

    def heard(self, text: str, upto: int) -> None:
        """A partial transcript of the segment up to input sample ``upto``."""
        n = len(_WORD.findall(text))
        if 0 < n <= self.words:  # words, but no new ones, over more audio: heard not to grow
            self.heard_to = max(self.heard_to, upto)
        if n <= self.words:
            return  # (none at all is a recogniser unsure of a word cut short: no news)
        self.words, self.grew_at, self.heard_to, self.at = n, upto, upto, None
        while self._since and self._since[0][0] <= upto:
            self._before[0] += self._since.popleft()[1]
            self._before[1] += 1

    def stalled(self) -> int | None:
        """The input sample where the words stopped, if a partial has heard them stopped
        for :data:`STALL_MS` (and the sound since is quieter)."""
        if self.at is not None:
            return self.at
        if not self.words or self.heard_to - self.grew_at < self.after or not self._before[1] or not self._since:
            return None  # (no partial has heard the words stop for long enough yet)
        before = 10 * math.log10(self._before[0] / self._before[1])
        since = 10 * math.log10(sum(p for _, p in self._since) / len(self._since))
        if since > before - DROP_DB:
            return None  # as loud as the words were: the user goes on (the transcript lags)
        self.at, self._bar, self.since_db = self.grew_at, before - DROP_DB, since
        return self.at

    def background(self, level_db: float) -> bool:
        """In a stall: whether a window this loud is the sound behind the user."""
        return self.at is not None and level_db < self._bar

    def resumed(self) -> None:
        """Sound at the user's level again: the stall is over."""
        self.at = None
