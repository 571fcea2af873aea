"""Turn taking and barge-in on the input sample clock (sans-I/O).

The :class:`Listener` feeds input audio to the VAD and keeps what a turn needs
(the audio of each speech segment with its prefix padding). It reports what
happened as signals the session acts on:

* :class:`Started` / :class:`Stopped`: speech boundaries (``speech_started`` /
  ``speech_stopped`` on the wire).
* :class:`Pause`: speech began while a reply is being heard: stop its output now
  (the talker is held by backpressure, not killed).
* :class:`Interrupt`: the speech lasted ``barge_in_min_ms`` (or became a turn):
  cancel the reply and truncate it at what was heard when the speech began.
* :class:`Resume`: the speech ended before that (a cough, a click, an "uh-huh"):
  the same reply carries on where it paused, and the segment is not a turn.
* :class:`Turn`: a segment of user speech to commit, transcribe and answer.

Outside a reply, a segment shorter than ``min_speech_ms`` is noise, not a turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.settings import TurnDetection
from pipeline.vad import SileroModel, StreamingVad

# How much audio to keep before a detected onset: the prefix padding plus the
# VAD's own decision lag (a window, the resampler, a late-firing window).
_LOOKBACK_MARGIN_MS = 500
TAIL_MS = 150
"""Audio kept after the VAD's end of speech for recognition (Silero already ends late)."""


@dataclass(frozen=True, slots=True)
class Started:
    onset: int
    """Input sample where speech begins (no padding): the barge-in watermark."""
    audio_start: int
    """onset minus the prefix padding, clamped to the session's first sample."""


@dataclass(frozen=True, slots=True)
class Stopped:
    audio_end: int
    """Input sample where the stop was decided (speech end + silence window)."""
    speech_end: int


@dataclass(frozen=True, slots=True)
class Pause:
    onset: int


@dataclass(frozen=True, slots=True)
class Resume:
    pass


@dataclass(frozen=True, slots=True)
class Interrupt:
    onset: int


@dataclass(frozen=True, slots=True)
class Turn:
    audio: np.ndarray
    """PCM16 at the input rate, from ``audio_start`` to the end of speech plus ``TAIL_MS``
    (at most ``audio_end``): what there is to recognise."""
    audio_start: int
    audio_end: int


Signal = Started | Stopped | Pause | Resume | Interrupt | Turn


class Listener:
    """Server VAD for one session: boundaries, segments and barge-in decisions."""

    def __init__(
        self, model: SileroModel, rate: int, td: TurnDetection, *, start: int = 0, max_segment_s: float = 300.0
    ) -> None:
        self.rate = rate
        self.td = td
        self.vad = StreamingVad(model, rate, threshold=td.threshold, silence_ms=td.silence_duration_ms, start=start)
        self._chunks: list[np.ndarray] = []
        self._buffer_start = start  # input sample of self._chunks[0][0]
        self._keep = (td.prefix_padding_ms + _LOOKBACK_MARGIN_MS) * rate // 1000
        self._max_segment = int(max_segment_s * rate)
        self._onset: int | None = None
        self._segment_start = start
        self._barge: str | None = None  # None | "paused" | "interrupted"

    @property
    def in_speech(self) -> bool:
        return self._onset is not None

    def _ms(self, ms: int) -> int:
        return ms * self.rate // 1000

    def push(self, pcm: np.ndarray, *, replying: bool) -> list[Signal]:
        """Feed input PCM16; ``replying`` says whether a reply is being heard now."""
        self._chunks.append(pcm)
        out: list[Signal] = []
        for ev in self.vad.push(pcm):
            if ev.kind == "start":
                self._onset = ev.sample
                self._segment_start = max(self._buffer_start, ev.sample - self._ms(self.td.prefix_padding_ms), 0)
                out.append(Started(ev.sample, self._segment_start))
                if replying and self.td.interrupt_response:
                    self._barge = "paused"
                    out.append(Pause(ev.sample))
            else:
                out += self._stop(ev.sample, ev.speech_end)
        if self._barge == "paused" and self._onset is not None:
            # Measured to the end of speech so far: the trailing silence window is not speech.
            if self.vad.speech_end - self._onset >= self._ms(self.td.barge_in_min_ms):
                self._barge = "interrupted"
                out.append(Interrupt(self._onset))
        self._trim()
        return out

    def _stop(self, audio_end: int, speech_end: int) -> list[Signal]:
        assert self._onset is not None
        onset, barge = self._onset, self._barge
        self._onset, self._barge = None, None
        out: list[Signal] = [Stopped(audio_end, speech_end)]
        lasted = speech_end - onset
        if barge == "paused" and lasted < self._ms(self.td.barge_in_min_ms):
            out.append(Resume())  # a cough or a backchannel: the reply goes on
            return out
        if barge == "paused":
            out.append(Interrupt(onset))
        elif barge is None and lasted < self._ms(self.td.min_speech_ms):
            return out  # a click: not a turn
        # The recogniser gets the speech and a short tail, not the whole silence window:
        # the rest is silence it would spend ~13% more CPU on (0.4 s of a 3 s turn).
        heard_end = min(audio_end, speech_end + self._ms(TAIL_MS))
        out.append(Turn(self._slice(self._segment_start, heard_end), self._segment_start, audio_end))
        return out

    def _slice(self, start: int, end: int) -> np.ndarray:
        if not self._chunks:
            return np.zeros(0, np.int16)
        audio = np.concatenate(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
        self._chunks = [audio]
        a = max(0, start - self._buffer_start)
        b = max(a, min(audio.size, end - self._buffer_start))
        return audio[a:b].copy()

    def _trim(self) -> None:
        """Keep only what a future segment can need."""
        if self._onset is not None:
            keep_from = self._segment_start
            if self.vad.samples - keep_from > self._max_segment:  # a monologue: keep the latest part
                keep_from = self.vad.samples - self._max_segment
                self._segment_start = keep_from
        else:
            keep_from = self.vad.samples - self._keep
        drop = keep_from - self._buffer_start
        if drop < self.rate:  # trim a second or more at a time: concatenation is not free
            return
        audio = np.concatenate(self._chunks)
        drop = min(drop, audio.size)
        self._chunks = [audio[drop:]]
        self._buffer_start += drop

    def take_segment(self) -> np.ndarray:
        """The current or pending segment's audio, for a manual commit."""
        start = self._segment_start if self._onset is not None else self._buffer_start
        audio = self._slice(start, self.vad.samples)
        self.clear()
        return audio

    def clear(self) -> None:
        """Forget buffered audio (``input_audio_buffer.clear``)."""
        self._chunks = [np.zeros(0, np.int16)]
        self._buffer_start = self.vad.samples
        self._segment_start = self.vad.samples
