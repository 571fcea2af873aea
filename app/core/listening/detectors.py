"""When the user's turn is over: the turn-detection policy that ``turn_detection.type`` chooses.

A :class:`TurnDetector` is asked, at each window of silence after speech, whether
the turn has ended. ``server_vad`` ends it after a fixed silence window;
``semantic_vad`` (:mod:`duplex.app.core.listening.semantic`) weighs an end-of-turn model's
answer and the transcript of the speech so far. The detector is sans-I/O: it asks
for the model's answer (:meth:`TurnDetector.ask`) and is told it, and the
transcript, when they arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from duplex.app.core.listening.ears import Ears
from duplex.app.core.listening.semantic import SemanticTurns
from duplex.app.core.settings import TurnDetection, TurnDetectionType
from duplex.app.core.units import ms_to_samples


class TurnDetector(Protocol):
    """Decides whether silence after speech ends the user's turn."""

    def ended(self, speech_end: int, now: int) -> int | None:
        """At input sample ``now``, with the last speech ending at ``speech_end``:
        the input sample where the turn ended, or None to keep listening."""
        ...

    def ask(self, speech_end: int, now: int) -> int | None:
        """The input sample up to which the end-of-turn model should hear the speech
        now (at most once per pause), or None. It may be past ``now``: the model hears
        the silence still to come as zeros."""
        ...

    def on_probability(self, speech_end: int, probability: float) -> None:
        """The model's P(complete) for the speech that ended at ``speech_end``."""
        ...

    def on_transcript(self, speech_end: int, text: str) -> None:
        """The transcript of the turn as it stood when the speech ended at ``speech_end``."""
        ...

    def resumed(self, speech_end: int, onset: int) -> None:
        """Speech went on at input sample ``onset`` after a pause that began at ``speech_end``."""
        ...


class SilenceWindow:
    """``server_vad``: the turn ends once ``silence_duration_ms`` of silence has passed."""

    def __init__(self, silence_ms: int, rate: int) -> None:
        self.silence_ms = silence_ms
        self.rate = rate

    def ended(self, speech_end: int, now: int) -> int | None:
        if (now - speech_end) * 1000 >= self.silence_ms * self.rate:
            return speech_end + ms_to_samples(self.silence_ms, self.rate)
        return None

    def ask(self, speech_end: int, now: int) -> int | None:
        return None

    def on_probability(self, speech_end: int, probability: float) -> None:
        pass

    def on_transcript(self, speech_end: int, text: str) -> None:
        pass

    def resumed(self, speech_end: int, onset: int) -> None:
        pass


DETECTORS: dict[TurnDetectionType, Callable[[TurnDetection, int, Ears], TurnDetector]] = {
    "server_vad": lambda td, rate, ears: SilenceWindow(td.silence_duration_ms, rate),
    "semantic_vad": lambda td, rate, ears: SemanticTurns(td.eagerness, rate, ears),
}
"""Detector factories by type: (settings, input rate, what the backends can do); one for
each of :data:`~duplex.app.core.settings.TURN_DETECTION_TYPES` (a test keeps it so)."""


def turn_detector(td: TurnDetection, rate: int, ears: Ears) -> TurnDetector:
    """The detector for ``td.type`` at input ``rate``."""
    return DETECTORS[td.type](td, rate, ears)
