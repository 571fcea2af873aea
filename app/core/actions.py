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
    """Recognise this user audio and hand the text to ``Session.on_transcript``."""

    item_id: str
    audio: np.ndarray
    rate: int


@dataclass(frozen=True, slots=True)
class Sync:
    """Wait until every effect of earlier events has been sent, then send what
    ``Session.synced`` says."""

    event_id: str | None


Action = StartReply | CancelReply | Transcribe | Sync
