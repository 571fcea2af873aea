"""Listening on the input sample clock (sans-I/O): speech, turns and barge-in.

The :class:`Listener` feeds a session's input audio to voice activity, follows
speech with hysteresis, asks the session's :class:`~duplex.app.core.listening.detectors.TurnDetector`
when silence ends a turn, hands speech over a reply to the
:class:`~duplex.app.core.listening.bargein.BargeIn` policy, and keeps what a turn needs
(the audio of each speech segment with its prefix padding). It reports what
happened as :mod:`~duplex.app.core.listening.signals`. Outside a reply, a segment shorter
than ``min_speech_ms`` is noise, not a turn. Levels (:mod:`~duplex.app.core.listening.levels`)
keep quieter sound around the user from starting speech over a reply.

While the user speaks it asks for partial transcripts, and when speech pauses for
a candidate transcript of the turn as it stands and (for ``semantic_vad``) the
end-of-turn model's view; their answers come back through :meth:`Listener.on_candidate`
and :meth:`Listener.on_turn_probability`.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from duplex.app.core.listening.bargein import BargeIn, BargeState
from duplex.app.core.listening.detectors import turn_detector
from duplex.app.core.listening.ears import DEAF, Ears
from duplex.app.core.listening.floor import Floor
from duplex.app.core.listening.levels import Levels
from duplex.app.core.listening.onset import OnsetTrace
from duplex.app.core.listening.signals import (
    AskTurn,
    Continued,
    Partial,
    Resume,
    Signal,
    SpeechPaused,
    Started,
    Stopped,
    Turn,
)
from duplex.app.core.listening.stall import Stall
from duplex.app.core.settings import TurnDetection
from duplex.app.core.states import Table
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.voice_activity import VadStream, VoiceActivity

# How much audio to keep before a detected onset: the prefix padding plus the
# VAD's own decision lag (a window, the resampler, a late-firing window).
_LOOKBACK_MARGIN_MS = 500
TAIL_MS = 100
"""Audio kept after the end of speech for recognition (Silero already ends ~70 ms late)."""
PAUSE_MS = 64
"""Silence the VAD has judged (two windows) before a pause is considered: its candidate
transcript is asked for as soon as the audio to ``TAIL_MS`` is in hand, not once the VAD
has judged all of it (it judges a window 40-80 ms after the audio came: the resampler and
the window). The candidate is on a turn's critical path (~420 ms of a core on a CPU
without VNNI, ~60 ms with VNNI and AMX)."""
PARTIAL_EVERY_MS = 400
"""Speech between two partial transcripts."""
JUDGE_EVERY_MS = 100
"""...while the speech is over a ducked reply: its first words decide whether the reply is
cancelled, so they are asked for sooner (an interruption silences the reply sooner; see
docs/benchmarks-history.md, "Asked as soon as the audio is in hand"). A slow CPU asks no more often
than it decodes: a session's partials wait in a lane of their own, one at a time, the
newest replacing the one not yet begun."""
JUDGE_FROM_MS = 200
"""...but not before this much of it: Whisper guesses at ~100 ms of a hum ("Thank you."
for eSpeak's "hm", two words that cancel a reply); at 200 ms it hears "Hmm"."""
HYSTERESIS = 0.15
"""Once speech has started, windows down to ``threshold - HYSTERESIS`` still count as speech."""


class Hearing(Enum):
    """Where the listener is in the user's speech."""

    QUIET = "quiet"
    """No speech in progress."""
    SPEECH = "speech"
    """Speech, its latest window speech."""
    PAUSE = "pause"
    """Silence after speech, the turn undecided."""
    PAUSE_SEEN = "pause_seen"
    """...and this pause has been considered (its :class:`SpeechPaused`, if it was long
    enough for one): speech that goes on now voids what was prepared for it."""


class HearingEvent(Enum):
    """What the listener hears: speech beginning, a window of speech or of silence, a
    pause considered, the speech ended (a turn or not)."""

    ONSET = "onset"
    SPEECH = "speech"
    SILENCE = "silence"
    SEEN = "seen"
    ENDED = "ended"


_H, _HE = Hearing, HearingEvent
MOVES: Table[Hearing, HearingEvent] = Table(
    "listener",
    {
        (_H.QUIET, _HE.ONSET): _H.SPEECH,
        (_H.SPEECH, _HE.SPEECH): _H.SPEECH,
        (_H.PAUSE, _HE.SPEECH): _H.SPEECH,
        (_H.PAUSE_SEEN, _HE.SPEECH): _H.SPEECH,
        (_H.SPEECH, _HE.SILENCE): _H.PAUSE,
        (_H.PAUSE, _HE.SILENCE): _H.PAUSE,
        (_H.PAUSE_SEEN, _HE.SILENCE): _H.PAUSE_SEEN,
        (_H.PAUSE, _HE.SEEN): _H.PAUSE_SEEN,
        **{(state, _HE.ENDED): _H.QUIET for state in (_H.SPEECH, _H.PAUSE, _H.PAUSE_SEEN)},
    },
)
"""The listener's moves: speech begins only in quiet, a pause is seen once."""


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
        ears: Ears = DEAF,
    ) -> None:
        self.rate = rate
        self.td = td
        self.ears = ears
        self.vad = VadStream(vad, rate, start=start, floor_dbfs=floor_dbfs)
        self.detector = turn_detector(td, rate, ears)
        self.barge_in = BargeIn(td, rate, words=ears.transcripts)
        self.levels = Levels(rate)
        self.stall = Stall(rate)
        self.floor = Floor(rate)
        self.trace = OnsetTrace(rate)
        self._stall_on = td.type == "semantic_vad" and ears.partials  # words end turns under babble
        self._chunks: list[np.ndarray] = []
        self._buffer_start = start  # input sample of self._chunks[0][0]
        self._keep = ms_to_samples(td.prefix_padding_ms + _LOOKBACK_MARGIN_MS, rate)
        self._max_segment = int(max_segment_s * rate)
        self.state = Hearing.QUIET
        self._onset = start  # input sample where the speech in progress began
        self._speech_end = start  # input sample where the latest speech window ended
        self._segment_start = start
        self._partial_at = start  # input sample of the last partial (or of the onset)

    def _move(self, event: HearingEvent) -> Hearing:
        was, self.state = self.state, MOVES.move(self.state, event)
        if event in (HearingEvent.ONSET, HearingEvent.ENDED):
            self.trace.forget()
        return was

    @property
    def in_speech(self) -> bool:
        return self.state is not Hearing.QUIET

    @property
    def _silent(self) -> bool:
        return self.state in (Hearing.PAUSE, Hearing.PAUSE_SEEN)

    def push(self, pcm: np.ndarray, *, replying: bool) -> list[Signal]:
        """Feed input PCM16; ``replying`` says whether a reply is being heard now."""
        self._chunks.append(pcm)
        out: list[Signal] = []
        for w in self.vad.push(pcm, lambda: self.in_speech):
            self.floor.window(w.start, w.end, w.level)
            if not self.in_speech:
                if w.probability >= self.td.threshold and self.levels.onset_allowed(w.level, w.end, replying=replying):
                    self._speech_end = w.end
                    out += self._start(w.start, replying, began=self.trace.began(w))
                    self.levels.speech(w.level)
                else:
                    if replying and self.trace.rises(w) and self.levels.rise_allowed(w.level, w.end):
                        self.trace.took()
                        out += self.barge_in.rose(w.start, replying)
                    out += self.barge_in.quiet(w.end)  # (a reply ducked for a rise that came to nothing)
                    self.trace.quiet(w)
            elif w.probability >= self.td.threshold - HYSTERESIS and not self._background(w.end, w.level):
                was = self._move(HearingEvent.SPEECH)
                if was is Hearing.PAUSE_SEEN:
                    out.append(Continued())  # what was prepared for that pause is void
                if was is not Hearing.SPEECH:
                    self.detector.resumed(self._speech_end, w.start)
                self._speech_end = w.end
                self.stall.resumed()
                self.floor.resumed()
                if w.probability >= self.td.threshold:
                    self.levels.speech(w.level)
                    self.stall.window(w.end, w.level)
            else:
                self._move(HearingEvent.SILENCE)
                out += self._silence(w.end)
        if self.in_speech:
            out += self.barge_in.speaking(self._onset, self._speech_end, loud=self.levels.loud)
            if self.barge_in.state is BargeState.IGNORED:  # noise: end it, so the user's speech starts afresh
                out += self._stop(self.vad.samples, self._speech_end)
        if self.in_speech:
            judging = self.barge_in.judging
            every = ms_to_samples(JUDGE_EVERY_MS if judging else PARTIAL_EVERY_MS, self.rate)
            early = judging and self.vad.samples - self._onset < ms_to_samples(JUDGE_FROM_MS, self.rate)
            if self.ears.partials and not self._silent and not early and self.vad.samples - self._partial_at >= every:
                self._partial_at = self.vad.samples
                audio = self._slice(self._segment_start, self.vad.samples)
                out.append(Partial(audio, self.vad.samples, judging))
        self._trim()
        return out

    def _background(self, end: int, level_db: float) -> bool:
        """Whether a speech-like window (ending at input sample ``end``) is the sound
        behind the user: their words have stopped, heard in the transcripts (see
        :mod:`~duplex.app.core.listening.stall`) or in the level coming down to the
        background's floor (:mod:`~duplex.app.core.listening.floor`), and it is quieter
        than they were."""
        if not self._stall_on:
            return False
        if self.stall.at is None and self.floor.at is None and not self._silent:
            stopped = self.stall.stalled()
            if stopped is None and self.stall.words:
                stopped = self.floor.ended(end, self.levels.segment_db, since=self._onset)
            if stopped is not None:
                self._speech_end = stopped  # the turn's speech ended where its words did
        return self.stall.background(level_db) or self.floor.background()

    def _silence(self, now: int) -> list[Signal]:
        """A window of silence after speech, ending at input sample ``now``."""
        tail = ms_to_samples(TAIL_MS, self.rate)
        if self.barge_in.settled(self._onset, self._speech_end, now):
            return self._stop(now, self._speech_end)  # speech over a reply that was no turn
        if (audio_end := self.detector.ended(self._speech_end, now)) is not None:
            return self._stop(audio_end, self._speech_end)
        out: list[Signal] = []
        end = self._speech_end
        paused = now >= end + ms_to_samples(PAUSE_MS, self.rate) and self.vad.samples >= end + tail
        if paused and self.state is Hearing.PAUSE:
            out += self._paused(end + tail)
        if (upto := self.detector.ask(end, now)) is not None:
            out.append(AskTurn(self._heard_to(upto), upto, end))
        return out

    def _heard_to(self, upto: int) -> np.ndarray:
        """The segment to input sample ``upto``, the silence still to come as zeros: the
        end-of-turn model's answer hangs on where the speech ends in its window, not on
        what the silence holds (over the natural-voice set, every ask of bench_eot's turns and
        pauses, 100 ms of real silence and 200 ms of zeros gave an answer in the same band
        of the policy's as the real 300 ms did for 282 of 287 asks; the real silence repeated,
        265; the 100 ms alone, 205)."""
        audio = self._slice(self._segment_start, upto)
        short = upto - self._segment_start - audio.size
        return np.pad(audio, (0, short)) if short > 0 else audio

    def decide(self) -> list[Signal]:
        """Ask the turn detector again, between windows (an answer it waited for came)."""
        if not self._silent:
            return []
        return self._silence(self.vad.samples)

    def on_turn_probability(self, speech_end: int, probability: float) -> list[Signal]:
        """The end-of-turn model's answer to an :class:`AskTurn`."""
        self.detector.on_probability(speech_end, probability)
        return self.decide() if speech_end == self._speech_end else []

    def on_candidate(self, speech_end: int, text: str) -> list[Signal]:
        """The transcript of the turn as it stood at a :class:`SpeechPaused` (its ``speech_end``)."""
        self.detector.on_transcript(speech_end, text)
        if speech_end != self._speech_end or not self.in_speech:
            return []
        return self.barge_in.on_words(text, loud=self.levels.loud) + self.decide()

    def on_partial(self, text: str, upto: int) -> list[Signal]:
        """A partial transcript of the speech in progress (to input sample ``upto``)."""
        if not self.in_speech:
            return []
        self.stall.heard(text, upto)
        heard_ms = (upto - self._onset) * 1000 // self.rate
        return self.barge_in.on_words(text, loud=self.levels.loud, heard_ms=heard_ms)

    def _paused(self, upto: int) -> list[Signal]:
        """Speech paused: the turn's audio as it would be committed, if long enough to be one."""
        self._move(HearingEvent.SEEN)
        if not self.ears.transcripts or self._speech_end - self._onset < ms_to_samples(
            self.td.min_speech_ms, self.rate
        ):
            return []
        start = self._segment_start
        return [SpeechPaused(self._slice(start, upto), start, upto, self._speech_end)]

    def _start(self, onset: int, replying: bool, *, began: int) -> list[Signal]:
        """Speech decided at ``onset`` that began at ``began`` (see :mod:`~duplex.app.core.listening.onset`):
        its durations count from the first, the barge-in watermark is the second. The
        prefix padding counts from the first, reaching back to the second at least (padding
        from where it began gave the recogniser up to 200 ms more of the quiet before, and
        held-out live WER 0.183 -> 0.204)."""
        self._move(HearingEvent.ONSET)
        self._onset = onset
        self._partial_at = onset
        padded = min(began, onset - ms_to_samples(self.td.prefix_padding_ms, self.rate))
        self._segment_start = max(self._buffer_start, padded, 0)
        self.levels.start()
        self.stall.start(onset)
        self.floor.resumed()
        return [Started(began, self._segment_start), *self.barge_in.started(onset, replying, began=began)]

    def _stop(self, audio_end: int, speech_end: int) -> list[Signal]:
        self._move(HearingEvent.ENDED)
        onset = self._onset
        if self.stall.at is not None:  # it ended under sound that went on: that sound is the background
            self.levels.noise(audio_end, self.stall.since_db)
        elif self.floor.at is not None:
            self.levels.noise(audio_end, self.floor.level_db)
        ending = self.barge_in.stopped(onset, speech_end, loud=self.levels.loud)
        out: list[Signal] = [Stopped(audio_end, speech_end), *ending.signals]
        if ending.noise:
            self.levels.noise(audio_end)  # noise over the reply: it played on
        short = speech_end - onset < ms_to_samples(self.td.min_speech_ms, self.rate)
        if ending.turn is False or (ending.turn is None and short):
            return out  # noise, a cough or a backchannel over the reply, or a click: not a turn
        # The recogniser gets the speech and a short tail, not the whole silence window:
        # the rest is silence it would spend ~13% more CPU on (0.4 s of a 3 s turn).
        heard_end = min(audio_end, speech_end + ms_to_samples(TAIL_MS, self.rate))
        self.levels.turn()
        out.append(Turn(self._slice(self._segment_start, heard_end), self._segment_start, audio_end, heard_end))
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
        if self.in_speech:
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
        start = self._segment_start if self.in_speech else self._buffer_start
        audio = self._slice(start, self.vad.samples)
        self.clear()
        return audio

    def clear(self) -> list[Signal]:
        """Forget buffered audio (``input_audio_buffer.clear``): the speech in progress
        ends with it, as no turn (speech that goes on starts afresh)."""
        out = self.abandon()
        self.trace.forget()  # speech after the clear begins after it
        self._chunks = [np.zeros(0, np.int16)]
        self._buffer_start = self.vad.samples
        self._segment_start = self.vad.samples
        return out

    def abandon(self) -> list[Signal]:
        """End the speech in progress here without a turn: its ``Stopped``, and a reply
        ducked for it resumes."""
        if not self.in_speech:
            return [Resume()] if self.barge_in.abandon() else []  # (a rising sound's duck)
        self._move(HearingEvent.ENDED)
        resume = [Resume()] if self.barge_in.abandon() else []
        return [Stopped(self.vad.samples, self._speech_end), *resume]

    def pausing_after(self, speech_end: int) -> bool:
        """Whether the speech that ended at ``speech_end`` is still paused (not gone on, not ended)."""
        return self._silent and self._speech_end == speech_end

    def pending(self) -> np.ndarray:
        """The speech in progress so far (nothing between speeches)."""
        return self._slice(self._segment_start, self.vad.samples) if self.in_speech else self._slice(0, 0)

    def retune(self, td: TurnDetection) -> None:
        """New turn detection settings, applied to the speech in progress too (the same
        input rate): its audio and onset stay, the new detector decides its end."""
        self.td = td
        self.detector = turn_detector(td, self.rate, self.ears)
        self.barge_in.retune(td, self.rate)
        self._stall_on = td.type == "semantic_vad" and self.ears.partials
        self._keep = ms_to_samples(td.prefix_padding_ms + _LOOKBACK_MARGIN_MS, self.rate)
