"""When the user's turn is over: the turn-detection policy that ``turn_detection.type`` chooses.

A :class:`TurnDetector` is asked, at each window of silence after speech, whether
the turn has ended. ``server_vad`` ends it after a fixed silence window; another
policy (a semantic one, say) registers in :data:`DETECTORS` under its type name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from duplex.app.core.settings import TurnDetection
from duplex.app.core.units import ms_to_samples


class TurnDetector(Protocol):
    """Decides whether silence after speech ends the user's turn."""

    def ended(self, speech_end: int, now: int) -> int | None:
        """At input sample ``now``, with the last speech ending at ``speech_end``:
        the input sample where the turn ended, or None to keep listening."""
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


DETECTORS: dict[str, Callable[[TurnDetection, int], TurnDetector]] = {
    "server_vad": lambda td, rate: SilenceWindow(td.silence_duration_ms, rate),
}


def turn_detector(td: TurnDetection, rate: int) -> TurnDetector:
    """The detector for ``td.type`` at input ``rate``."""
    return DETECTORS[td.type](td, rate)
