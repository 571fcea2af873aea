"""Listening offline: the real listener in process, every model answer handed back
before the next frame (as the synced replay gets them), the answers cached by audio
slice so a policy can be varied in the same process in seconds.

Silero, Whisper (tiny.en, or the model asked for) and Smart Turn run here; the decode
time is left out, so the decisions are the server's and the latencies are audio time.
Whisper's decode is kept with its scores, and its drop-a-guess rule applied per call at
:attr:`Answers.low`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from duplex.app.core.listening import AskTurn, Ears, Listener, Partial, Signal, SpeechPaused, Turn
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.enhancer import Enhancer
from duplex.pipeline.recognizers import whisper as W

EARS = Ears(transcripts=True, partials=True, turn_model=True)


class Answers:
    """The models' answers, cached by audio."""

    def __init__(self, asr_model: str = "tiny.en", *, enhancer: Enhancer | None = None) -> None:
        self.whisper = W.WhisperRecognizer(asr_model, enhancer=enhancer)
        self.whisper.load()
        self.turns = SmartTurn()
        self.turns.load()
        self.low = W.LOW_CONFIDENCE
        """Mean log-probability under which a short transcript is dropped as a guess."""
        self._texts: dict[tuple[bool, str], W.Decoded] = {}
        self._probabilities: dict[str, float] = {}

    def text(self, pcm: np.ndarray, rate: int, *, partial: bool) -> str:
        key = (partial, hashlib.sha1(pcm.tobytes()).hexdigest())
        decoded = self._texts.get(key)
        if decoded is None:
            decoded = self._texts[key] = self.whisper.decode(pcm, rate, partial)
        return decoded.words(self.low)

    def probability(self, pcm: np.ndarray, rate: int) -> float:
        key = hashlib.sha1(pcm.tobytes()).hexdigest()
        if key not in self._probabilities:
            self._probabilities[key] = self.turns.complete_blocking(pcm, rate)
        return self._probabilities[key]


@dataclass(frozen=True, slots=True)
class Signalled:
    """A signal and the input sample at which it came."""

    at: int
    signal: Signal
    source: str = ""
    """What decided it: "partial 'text'", "candidate 'text'", or "" (the audio itself)."""


def hear(
    vad: SileroVad,
    answers: Answers,
    pcm: np.ndarray,
    rate: int,
    td: TurnDetection,
    *,
    replying: bool = False,
    frame_ms: int = 20,
) -> list[Signalled]:
    """Feed ``pcm`` to a new listener frame by frame (``replying``: over a reply the
    whole time); every model answer comes back before the next frame. Every signal, in
    order, with the input sample it came at; the listening stops at the first turn
    (over a reply it goes on: the reply's fate is the question)."""
    ears = Listener(vad, rate, td, ears=EARS)
    heard: list[Signalled] = []

    def handle(signals: list[Signal], source: str = "") -> None:
        for s in signals:
            heard.append(Signalled(ears.vad.samples, s, source))
            if isinstance(s, Partial):
                text = answers.text(s.audio, rate, partial=True)
                handle(ears.on_partial(text, s.upto), f"partial {text!r}")
            elif isinstance(s, SpeechPaused):
                text = answers.text(s.audio, rate, partial=False)
                handle(ears.on_candidate(s.speech_end, text), f"candidate {text!r}")
            elif isinstance(s, AskTurn):
                handle(ears.on_turn_probability(s.speech_end, answers.probability(s.audio, rate)))

    frame = rate * frame_ms // 1000
    for i in range(0, pcm.size, frame):
        handle(ears.push(pcm[i : i + frame], replying=replying))
        if not replying and any(isinstance(h.signal, Turn) for h in heard):
            break
    return heard
