"""What the core asks the edge to do, besides sending events.

The session returns these among its server events, in order; the edge carries
each out before it sends what follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from duplex.app.core.events import ServerEvent
from duplex.pipeline.state import StateHandle
from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.thinker import Message, ThinkRequest
from duplex.pipeline.tools import Tool, ToolChoice


@dataclass(frozen=True, slots=True)
class ReplyPlan:
    """What one reply is, whole: what the thinker answers (the conversation, the tools it
    may call), what the talker says it with (voice, speed, the backend state) and how it
    is rendered (rate, audio or text). Built in one place
    (:meth:`~duplex.app.core.replies.Replies.plan`); a prepared reply is adopted when its
    plan equals the reply's, so a field added here is compared without anyone
    remembering to."""

    messages: tuple[Message, ...]
    voice: str | None
    speed: float
    output_rate: int
    audio: bool = True
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = "auto"
    state: StateHandle | None = None
    max_tokens: int | None = None
    """The reply's length limit in tokens (None: the thinker's own)."""
    temperature: float | None = None
    """Its sampling temperature (None: the thinker's own)."""
    said: str | None = None
    """Words the reply says without asking the thinker (a turn heard as nothing: a model
    asked about an empty message only guesses, "I don't know.", after a wait)."""

    def think(self, request_id: str) -> ThinkRequest:
        """The thinker's request for this reply."""
        options: dict[str, object] = {}
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            options["temperature"] = self.temperature
        return ThinkRequest(request_id, self.messages, options, tools=self.tools, tool_choice=self.tool_choice)

    def speech(self, request_id: str) -> SpeechRequest:
        """The talker's request for this reply (its text streams in from the thinker)."""
        return SpeechRequest(request_id, self.said or "", self.voice, self.speed, self.state)


@dataclass(frozen=True, slots=True)
class StartReply:
    """Run the pipeline for this reply (the thinker answers; with audio, the talker
    speaks it) and feed its chunks to ``Session.on_output``."""

    response_id: str
    epoch: int
    plan: ReplyPlan

    @property
    def think(self) -> ThinkRequest:
        return self.plan.think(self.response_id)

    @property
    def request(self) -> SpeechRequest:
        return self.plan.speech(self.response_id)


@dataclass(frozen=True, slots=True)
class CancelReply:
    """Retire and cancel the running reply, and wait for it to stop, before
    sending what follows."""

    response_id: str
    epoch: int
    reason: str


TranscribeKind = Literal["final", "candidate", "partial"]
"""What a transcription is for (see :class:`Transcribe`)."""


@dataclass(frozen=True, slots=True)
class Transcribe:
    """Recognise this user audio and hand what was heard to ``Session.on_transcript``
    (:meth:`heard` makes that answer).

    ``kind``: ``final`` (a committed item: ``item_id``), ``candidate`` (the turn of
    speech item ``item_id`` as it stands at a pause, to ``upto``: it becomes the
    final transcript if the turn ends there) or ``partial`` (speech in progress:
    worth doing only if a recogniser is idle; skipped otherwise). ``urgent``: a
    partial whose words decide something now (whether a ducked reply is cancelled):
    asked while the session's last partial still decodes, it waits for it, not dropped.
    """

    item_id: str
    audio: np.ndarray
    rate: int
    kind: TranscribeKind = "final"
    upto: int = 0
    urgent: bool = False

    def heard(self, text: str, recognition_ms: float | None = None, failure: str | None = None) -> Heard:
        """The recogniser's answer to this request."""
        return Heard(self.item_id, text, self.kind, self.upto, recognition_ms, failure)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one pipeline chunk became (``Session.on_output``): the events to send, and
    the core's one answer to whether the reply is still current: ``stale``, the chunk's
    reply is no longer the session's (nothing is sent; its stages stop); ``goes_on``,
    the reply is still the session's after it (else it just ended, at a limit: its
    stages stop after these events)."""

    events: list[ServerEvent]
    stale: bool = False
    goes_on: bool = True


STALE = Delivery([], stale=True, goes_on=False)


@dataclass(frozen=True, slots=True)
class Heard:
    """A recogniser's answer to a :class:`Transcribe`, as one value: the text it heard
    (or its ``failure``), for the request's item, kind and ``upto``."""

    item_id: str
    text: str
    kind: TranscribeKind = "final"
    upto: int = 0
    recognition_ms: float | None = None
    failure: str | None = None


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
    and talker), without sending any of it: a :class:`StartReply` with an equal plan
    adopts it; a newer one, or :class:`DropPrepared`, discards it."""

    plan: ReplyPlan
    epoch: int
    """The epoch its stages run in until a reply adopts it (then they are the reply's)."""


@dataclass(frozen=True, slots=True)
class Prefill:
    """The user is saying something like this: let the thinker read the conversation so
    far, to answer sooner once the turn is over (a model evaluates its prompt now, and
    only what changed later). Nothing is said; a thinker busy with this conversation
    ignores it."""

    plan: ReplyPlan


@dataclass(frozen=True, slots=True)
class DropPrepared:
    """The turn went on: discard the prepared reply (nothing of it was sent)."""


@dataclass(frozen=True, slots=True)
class Sync:
    """Wait until every effect of earlier events has been sent, then send what
    ``Session.synced`` says."""

    event_id: str | None


Action = StartReply | CancelReply | Transcribe | PredictTurn | PrepareReply | Prefill | DropPrepared | Sync
