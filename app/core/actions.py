"""What the core asks the edge to do, besides sending events.

The session returns these among its server events, in order; the edge carries
each out before it sends what follows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.thinker import ThinkRequest


@dataclass(frozen=True, slots=True)
class StartReply:
    """Run the pipeline for this reply (the thinker answers ``think``; with audio,
    the talker speaks it) and feed its chunks to ``Session.on_output``."""

    response_id: str
    epoch: int
    request: SpeechRequest
    output_rate: int
    think: ThinkRequest
    audio: bool = True


@dataclass(frozen=True, slots=True)
class CancelReply:
    """Retire and cancel the running reply, and wait for it to stop, before
    sending what follows."""

    response_id: str
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class Transcribe:
    """Recognise this user audio and hand the text to ``Session.on_transcript`` with
    the same ``kind`` and ``upto``.

    ``kind``: ``final`` (a committed item: ``item_id``), ``candidate`` (the turn of
    speech item ``item_id`` as it stands at a pause, to ``upto``: it becomes the
    final transcript if the turn ends there) or ``partial`` (speech in progress:
    worth doing only if a recogniser is idle; skipped otherwise).
    """

    item_id: str
    audio: np.ndarray
    rate: int
    kind: str = "final"
    upto: int = 0


@dataclass(frozen=True, slots=True)
class PredictTurn:
    """Ask the end-of-turn model about this speech and hand its answer to
    ``Session.on_turn_probability`` with ``speech_end``."""

    audio: np.ndarray
    rate: int
    speech_end: int


@dataclass(frozen=True, slots=True)
class PrepareReply:
    """Start the reply the session expects to give if the turn ends now (its thinker
    and talker), without sending any of it: a :class:`StartReply` asking for the same
    thing adopts it; a newer one, or :class:`DropPrepared`, discards it."""

    request: SpeechRequest
    output_rate: int
    think: ThinkRequest
    audio: bool = True


@dataclass(frozen=True, slots=True)
class DropPrepared:
    """The turn went on: discard the prepared reply (nothing of it was sent)."""


@dataclass(frozen=True, slots=True)
class Sync:
    """Wait until every effect of earlier events has been sent, then send what
    ``Session.synced`` says."""

    event_id: str | None


Action = StartReply | CancelReply | Transcribe | PredictTurn | PrepareReply | DropPrepared | Sync
