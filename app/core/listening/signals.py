"""What the listener tells its session, on the input sample clock.

* :class:`Started` / :class:`Stopped`: speech boundaries (``speech_started`` /
  ``speech_stopped`` on the wire).
* :class:`Duck`: speech began while a reply is being heard: stop its output now
  (the talker is held by backpressure, not killed).
* :class:`Hold`: the speech has gone on past a backchannel's first words at the user's
  level and none has been heard: the ducked reply falls silent (it can still resume).
* :class:`Interrupt`: the speech lasted ``barge_in_min_ms`` (or became a turn):
  cancel the reply and truncate it at what was heard when the speech began.
* :class:`Resume`: the speech ended before that (a cough, a click, an "uh-huh"):
  the same reply carries on where it paused, and the segment is not a turn.
* :class:`Turn`: a segment of user speech to commit, transcribe and answer.
* :class:`Partial` / :class:`SpeechPaused`: the speech so far, to transcribe while the user
  speaks, and the whole turn as it stands when speech pauses (transcribed before
  the turn is decided, so the transcript is ready when it is); :class:`Continued`:
  speech went on after such a pause (what was prepared for it is void).
* :class:`AskTurn`: the end of the speech, for the end-of-turn model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Started:
    onset: int
    """Input sample where speech begins (no padding): the barge-in watermark."""
    audio_start: int
    """onset minus the prefix padding, clamped to the session's first sample."""


@dataclass(frozen=True, slots=True)
class Stopped:
    audio_end: int
    """Input sample where the turn was decided over (speech end + the silence it took)."""
    speech_end: int


@dataclass(frozen=True, slots=True)
class Duck:
    onset: int


@dataclass(frozen=True, slots=True)
class Hold:
    onset: int


@dataclass(frozen=True, slots=True)
class Resume:
    pass


@dataclass(frozen=True, slots=True)
class Interrupt:
    onset: int


@dataclass(frozen=True, slots=True)
class Partial:
    """Speech goes on: the segment so far (to ``upto``) is worth a partial transcript;
    ``judging``: speech over a ducked reply, whose words decide whether it is cancelled."""

    audio: np.ndarray
    upto: int
    judging: bool = False


@dataclass(frozen=True, slots=True)
class SpeechPaused:
    """Speech has paused long enough for the turn's audio to be complete if it ends
    here: the audio a :class:`Turn` would carry (``start`` to ``upto``), so it can be
    transcribed before the turn is decided."""

    audio: np.ndarray
    start: int
    upto: int
    speech_end: int


@dataclass(frozen=True, slots=True)
class Continued:
    """Speech resumed after a :class:`SpeechPaused`: that pause was not the end of the turn."""


@dataclass(frozen=True, slots=True)
class AskTurn:
    """Has the speaker finished? The end of the speech (to ``upto``) for the end-of-turn
    model; the answer goes to ``Session.on_turn_probability`` with ``speech_end``."""

    audio: np.ndarray
    upto: int
    speech_end: int


@dataclass(frozen=True, slots=True)
class Turn:
    audio: np.ndarray
    """PCM16 at the input rate, from ``audio_start`` to the end of speech plus a short
    tail (at most ``audio_end``): what there is to recognise."""
    audio_start: int
    audio_end: int
    heard_end: int
    """Where ``audio`` ends (a :class:`SpeechPaused` with the same span has the same audio)."""


Signal = Started | Stopped | Duck | Hold | Resume | Interrupt | Turn | Partial | SpeechPaused | Continued | AskTurn
