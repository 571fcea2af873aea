"""Speech over a reply (barge-in), as a policy with explicit states.

Speech that starts while a reply is being heard pauses it at once. If the speech
lasts ``barge_in_min_ms`` (or becomes a turn) the reply is interrupted: cancelled
and truncated at what was heard when the speech began. If it ends sooner (a
cough, an "uh-huh") the reply resumes and the sound is not a turn.
"""

from __future__ import annotations

from enum import Enum

from duplex.app.core.settings import TurnDetection
from duplex.app.core.signals import Interrupt, Pause, Resume, Signal
from duplex.app.core.units import ms_to_samples


class BargeState(Enum):
    """Where the current speech stands with respect to the reply being heard."""

    NONE = "none"
    """No reply was being heard when the speech began (or barge-in is off)."""
    PAUSED = "paused"
    """The reply is paused: the speech may still turn out to be a backchannel."""
    INTERRUPTED = "interrupted"
    """The reply was interrupted: the speech is the user's turn."""


class BargeIn:
    """One session's barge-in decisions, speech segment by speech segment."""

    def __init__(self, td: TurnDetection, rate: int) -> None:
        self.enabled = td.interrupt_response
        self.min_speech = ms_to_samples(td.barge_in_min_ms, rate)
        self.state = BargeState.NONE

    def started(self, onset: int, replying: bool) -> list[Signal]:
        """Speech began at input sample ``onset``; ``replying``: a reply is being heard."""
        self.state = BargeState.PAUSED if replying and self.enabled else BargeState.NONE
        return [Pause(onset)] if self.state is BargeState.PAUSED else []

    def speaking(self, onset: int, speech_end: int) -> list[Signal]:
        """Speech goes on (to ``speech_end`` so far; the silence after it is not speech)."""
        if self.state is BargeState.PAUSED and speech_end - onset >= self.min_speech:
            self.state = BargeState.INTERRUPTED
            return [Interrupt(onset)]
        return []

    def stopped(self, onset: int, speech_end: int) -> list[Signal]:
        """The speech ended: a paused reply resumes if it was short, else it is interrupted now."""
        state, self.state = self.state, BargeState.NONE
        if state is not BargeState.PAUSED:
            return []
        return [Resume()] if speech_end - onset < self.min_speech else [Interrupt(onset)]
