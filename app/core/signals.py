"""What the listener tells its session, on the input sample clock.

* :class:`Started` / :class:`Stopped`: speech boundaries (``speech_started`` /
  ``speech_stopped`` on the wire).
* :class:`Pause`: speech began while a reply is being heard: stop its output now
  (the talker is held by backpressure, not killed).
* :class:`Interrupt`: the speech lasted ``barge_in_min_ms`` (or became a turn):
  cancel the reply and truncate it at what was heard when the speech began.
* :class:`Resume`: the speech ended before that (a cough, a click, an "uh-huh"):
  the same reply carries on where it paused, and the segment is not a turn.
* :class:`Turn`: a segment of user speech to commit, transcribe and answer.
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
    """PCM16 at the input rate, from ``audio_start`` to the end of speech plus a short
    tail (at most ``audio_end``): what there is to recognise."""
    audio_start: int
    audio_end: int


Signal = Started | Stopped | Pause | Resume | Interrupt | Turn
