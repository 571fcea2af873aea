"""Listening offline: the real listener in process, every model answer handed back
before the next frame (as the synced replay gets them), the answers cached by audio
slice so a policy can be varied in the same process in seconds.

Silero, Whisper tiny.en and Smart Turn run here; the decode time is left out, so the
decisions are the server's and the latencies are audio time. Whisper's raw answer is
kept with its scores, and its drop-a-guess rule applied per call at :attr:`Answers.low`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from duplex.app.core.listening import AskTurn, Ears, Listener, Partial, Signal, SpeechPaused, Turn
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.log_mel import HOP, RATE, log_mel
from duplex.pipeline.recognizers import whisper as W

EARS = Ears(transcripts=True, partials=True, turn_model=True)


@dataclass(frozen=True, slots=True)
class Raw:
    """Whisper's answer before its drop-a-guess rule."""

    text: str
    score: float
    no_speech: float
    seconds: float


class Answers:
    """The models' answers, cached by audio."""

    def __init__(self) -> None:
        self.whisper = W.WhisperRecognizer()
        self.whisper.load()
        self.turns = SmartTurn()
        self.turns.load()
        self.low = W.LOW_CONFIDENCE
        """Mean log-probability under which a short transcript is dropped as a guess."""
        self._texts: dict[tuple[bool, str], Raw] = {}
        self._probabilities: dict[str, float] = {}

    def _raw(self, pcm: np.ndarray, rate: int, partial: bool) -> Raw:
        import ctranslate2
        import soxr

        w = self.whisper
        x = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
        frames = min(W.MAX_FRAMES, int(np.ceil(x.size / HOP)) + W.TAIL_FRAMES)
        result = w._model.generate(  # noqa: SLF001 (transcribe_blocking's decode, its scores kept)
            ctranslate2.StorageView.from_array(log_mel(x, frames)[None]),
            [w._prompt],  # noqa: SLF001
            beam_size=1 if partial else 5,
            suppress_blank=True,
            max_length=W.max_length(x.size / RATE),
            no_repeat_ngram_size=3,
            repetition_penalty=W.REPETITION_PENALTY,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        text = W.drop_echoes(W.detokenize(w._vocabulary, result.sequences_ids[0]))  # noqa: SLF001
        return Raw(text, result.scores[0], result.no_speech_prob, x.size / RATE)

    def text(self, pcm: np.ndarray, rate: int, *, partial: bool) -> str:
        key = (partial, hashlib.sha1(pcm.tobytes()).hexdigest())
        raw = self._texts.get(key)
        if raw is None:
            raw = self._texts[key] = self._raw(pcm, rate, partial)
        if raw.score < self.low and (raw.no_speech > W.NO_SPEECH or raw.seconds < W.SHORT_S):
            return ""  # transcribe_blocking's rule, at this run's threshold
        return raw.text

    def probability(self, pcm: np.ndarray, rate: int) -> float:
        key = hashlib.sha1(pcm.tobytes()).hexdigest()
        if key not in self._probabilities:
            self._probabilities[key] = self.turns.complete_blocking(pcm, rate)
        return self._probabilities[key]


@dataclass(frozen=True, slots=True)
class Heard:
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
) -> list[Heard]:
    """Feed ``pcm`` to a new listener frame by frame (``replying``: over a reply the
    whole time); every model answer comes back before the next frame. Every signal, in
    order, with the input sample it came at; the listening stops at the first turn
    (over a reply it goes on: the reply's fate is the question)."""
    ears = Listener(vad, rate, td, ears=EARS)
    heard: list[Heard] = []

    def handle(signals: list[Signal], source: str = "") -> None:
        for s in signals:
            heard.append(Heard(ears.vad.samples, s, source))
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
