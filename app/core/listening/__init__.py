"""Listening: one session's ears, from input audio to speech, turns and barge-in.

The :class:`Listener` is the way in; what it reports are its :mod:`signals`. Inside:
voice activity with hysteresis (:mod:`listener`), where speech began (:mod:`onset`),
whose sound it is (:mod:`levels`), words that have stopped under sound that goes on
(:mod:`stall`), speech over a reply (:mod:`bargein`), and when the turn is over
(:mod:`detectors`: ``server_vad``'s silence window, :mod:`semantic`'s ``semantic_vad``).
Outside this package only what is exported here is used (tests/test_architecture.py
keeps it so).
"""

from duplex.app.core.listening.detectors import DETECTORS, TurnDetector, turn_detector
from duplex.app.core.listening.ears import DEAF, Ears
from duplex.app.core.listening.listener import Listener
from duplex.app.core.listening.semantic import EAGERNESS, Eagerness, SemanticTurns, words_hang
from duplex.app.core.listening.signals import (
    AskTurn,
    Continued,
    Duck,
    Hold,
    Interrupt,
    Partial,
    Resume,
    Signal,
    SpeechPaused,
    Started,
    Stopped,
    Turn,
)

__all__ = [
    "DEAF",
    "DETECTORS",
    "EAGERNESS",
    "AskTurn",
    "Continued",
    "Duck",
    "Eagerness",
    "Ears",
    "Hold",
    "Interrupt",
    "Listener",
    "Partial",
    "Resume",
    "SemanticTurns",
    "Signal",
    "SpeechPaused",
    "Started",
    "Stopped",
    "Turn",
    "TurnDetector",
    "turn_detector",
    "words_hang",
]
