"""Listening on the input sample clock (sans-I/O): speech, turns and barge-in.

The :class:`Listener` feeds a session's input audio to voice activity, follows
speech with hysteresis, asks the session's :class:`~duplex.app.core.turns.TurnDetector`
when silence ends a turn, hands speech over a reply to the
:class:`~duplex.app.core.bargein.BargeIn` policy, and keeps what a turn needs
(the audio of each speech segment with its prefix padding). It reports what
happened as :mod:`~duplex.app.core.signals`. Outside a reply, a segment shorter
than ``min_speech_ms`` is noise, not a turn.
"""

from __future__ import annotations

import numpy as np

from duplex.app.core.bargein import BargeIn, BargeState
from duplex.app.core.settings import TurnDetection
from duplex.app.core.signals import Resume, Signal, Started, Stopped, Turn
from duplex.app.core.turns import turn_detector
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.voice_activity import VadStream, VoiceActivity

# How much audio to keep before a detected onset: the prefix padding plus the
# VAD's own decision lag (a window, the resampler, a late-firing window).
_LOOKBACK_MARGIN_MS = 500
TAIL_MS = 150
"""Audio kept after the end of speech for recognition (Silero already ends late)."""
HYSTERESIS = 0.15
"""Once speech has started, windows down to ``threshold - HYSTERESIS`` still count as speech."""


class Listener:
    """One session's ears: speech boundaries, turns and barge-in decisions."""

    def __init__(
        self,
        vad: VoiceActivity,
        rate: int,
        td: TurnDetection,
        *,
        start: int = 0,
        max_segment_s: float = 300.0,
        floor_dbfs: float = -60.0,
    ) -> None:
        self.rate = rate
        self.td = td
        self.vad = VadStream(vad, rate, start=start, floor_dbfs=floor_dbfs)
        self.turns = turn_detector(td, rate)
        self.barge_in = BargeIn(td, rate)
        self._chunks: list[np.ndarray] = []
        self._buffer_start = start  # input sample of self._chunks[0][0]
        self._keep = ms_to_samples(td.prefix_padding_ms + _LOOKBACK_MARGIN_MS, rate)
        self._max_segment = int(max_segment_s * rate)
        self._onset: int | None = None
        self._speech_end = start  # input sample where the latest speech window ended
        self._segment_start = start

    @property
    def in_speech(self) -> bool:
        return self._onset is not None

    def push(self, pcm: np.ndarray, *, replying: bool) -> list[Signal]:
        """Feed input PCM16; ``replying`` says whether a reply is being heard now."""
        self._chunks.append(pcm)
        out: list[Signal] = []
        for w in self.vad.push(pcm, lambda: self.in_speech):
            if self._onset is None:
                if w.probability >= self.td.threshold:
                    self._speech_end = w.end
                    out += self._start(w.start, replying)
            elif w.probability >= self.td.threshold - HYSTERESIS:
                self._speech_end = w.end
            elif (audio_end := self.turns.ended(self._speech_end, w.end)) is not None:
                out += self._stop(audio_end, self._speech_end)
        if self._onset is not None:
            out += self.barge_in.speaking(self._onset, self._speech_end)
        self._trim()
        return out

    def _start(self, onset: int, replying: bool) -> list[Signal]:
        self._onset = onset
        self._segment_start = max(self._buffer_start, onset - ms_to_samples(self.td.prefix_padding_ms, self.rate), 0)
        return [Started(onset, self._segment_start), *self.barge_in.started(onset, replying)]

    def _stop(self, audio_end: int, speech_end: int) -> list[Signal]:
        assert self._onset is not None
        onset, self._onset = self._onset, None
        was = self.barge_in.state
        barge = self.barge_in.stopped(onset, speech_end)
        out: list[Signal] = [Stopped(audio_end, speech_end), *barge]
        if any(isinstance(s, Resume) for s in barge):
            return out  # a cough or a backchannel: the reply goes on, and this is not a turn
        if was is BargeState.NONE and speech_end - onset < ms_to_samples(self.td.min_speech_ms, self.rate):
            return out  # a click: not a turn
        # The recogniser gets the speech and a short tail, not the whole silence window:
        # the rest is silence it would spend ~13% more CPU on (0.4 s of a 3 s turn).
        heard_end = min(audio_end, speech_end + ms_to_samples(TAIL_MS, self.rate))
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
