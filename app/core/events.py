"""Server events as typed values: what the core has to say, before any wire shape.

The session, its replies and its listener return these; :mod:`duplex.app.core.wire`
is the one place that turns them into Realtime JSON (GA or beta names, base64 or
binary audio, the session and response objects) and stamps event ids. Items and
responses travel as frozen views taken when the event was made, so a later change
to the conversation cannot alter an event already decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from duplex.app.core.protocol import ProtocolError
    from duplex.app.core.settings import SessionSettings


@dataclass(frozen=True, slots=True)
class PartView:
    """One content part: its type and its text (an audio part's transcript)."""

    type: str
    text: str | None


@dataclass(frozen=True, slots=True)
class ItemView:
    """A conversation item as it stood when an event was made."""

    id: str
    type: str
    status: str
    role: str
    content: tuple[PartView, ...]
    call_id: str | None = None
    """A ``function_call`` or ``function_call_output`` item's call."""
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseView:
    """A response as it stood when an event was made."""

    id: str
    status: str
    status_details: dict[str, Any] | None
    output: tuple[ItemView, ...]
    conversation_id: str | None
    """None for an out-of-band response."""
    modalities: tuple[str, ...]
    output_rate: int
    voice: str
    timings: dict[str, float] | None = None
    """Extension: the reply's latency report (ms from its start)."""
    metadata: dict[str, str] | None = None
    """What the ``response.create`` asked to have echoed."""
    output_format: str = "pcm16"


@dataclass(frozen=True, slots=True)
class ContentRef:
    """Where a reply's content sits: the fields every reply-content event carries."""

    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


# -- session -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SessionCreated:
    type: ClassVar[str] = "session.created"
    session_id: str
    settings: SessionSettings


@dataclass(frozen=True, slots=True)
class SessionUpdated:
    type: ClassVar[str] = "session.updated"
    session_id: str
    settings: SessionSettings


@dataclass(frozen=True, slots=True)
class SessionSynced:
    """Extension: the answer to ``session.sync``."""

    type: ClassVar[str] = "session.synced"
    sync_event_id: str | None
    input_samples: int
    audio_ms: int


@dataclass(frozen=True, slots=True)
class Error:
    type: ClassVar[str] = "error"
    error: ProtocolError


# -- conversation ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ItemAdded:
    type: ClassVar[str] = "conversation.item.added"
    previous_item_id: str | None
    item: ItemView


@dataclass(frozen=True, slots=True)
class ItemDone:
    type: ClassVar[str] = "conversation.item.done"
    previous_item_id: str | None
    item: ItemView


@dataclass(frozen=True, slots=True)
class ItemRetrieved:
    type: ClassVar[str] = "conversation.item.retrieved"
    item: ItemView


@dataclass(frozen=True, slots=True)
class ItemDeleted:
    type: ClassVar[str] = "conversation.item.deleted"
    item_id: str


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    type: ClassVar[str] = "conversation.item.truncated"
    item_id: str
    content_index: int
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class TranscriptionCompleted:
    type: ClassVar[str] = "conversation.item.input_audio_transcription.completed"
    item_id: str
    content_index: int
    transcript: str
    recognition_ms: float | None = None
    """Extension: recognition wait + decode, in ms."""
    audio_ms: int = 0
    """The audio transcribed (rendered as OpenAI's ``usage`` by duration)."""


@dataclass(frozen=True, slots=True)
class TranscriptionDelta:
    """Words of the user's speech heard so far (while they speak: the item is the
    one ``speech_started`` named, committed later); a delta is never taken back."""

    type: ClassVar[str] = "conversation.item.input_audio_transcription.delta"
    item_id: str
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class TranscriptionFailed:
    type: ClassVar[str] = "conversation.item.input_audio_transcription.failed"
    item_id: str
    content_index: int
    message: str


# -- input audio -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BufferCommitted:
    type: ClassVar[str] = "input_audio_buffer.committed"
    previous_item_id: str | None
    item_id: str


@dataclass(frozen=True, slots=True)
class BufferCleared:
    type: ClassVar[str] = "input_audio_buffer.cleared"


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    type: ClassVar[str] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class BufferTimeoutTriggered:
    """No speech for ``idle_timeout_ms`` after the last reply: the silence is committed
    as a turn (and answered, with ``create_response``)."""

    type: ClassVar[str] = "input_audio_buffer.timeout_triggered"
    audio_start_ms: int
    audio_end_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    type: ClassVar[str] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str | None


# -- responses ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResponseCreated:
    type: ClassVar[str] = "response.created"
    response: ResponseView


@dataclass(frozen=True, slots=True)
class ResponseDone:
    type: ClassVar[str] = "response.done"
    response: ResponseView


@dataclass(frozen=True, slots=True)
class OutputItemAdded:
    type: ClassVar[str] = "response.output_item.added"
    response_id: str
    output_index: int
    item: ItemView


@dataclass(frozen=True, slots=True)
class OutputItemDone:
    type: ClassVar[str] = "response.output_item.done"
    response_id: str
    output_index: int
    item: ItemView


@dataclass(frozen=True, slots=True)
class ContentPartAdded:
    type: ClassVar[str] = "response.content_part.added"
    ref: ContentRef
    part: PartView


@dataclass(frozen=True, slots=True)
class ContentPartDone:
    type: ClassVar[str] = "response.content_part.done"
    ref: ContentRef
    part: PartView


@dataclass(frozen=True, slots=True)
class AudioDelta:
    type: ClassVar[str] = "response.output_audio.delta"
    ref: ContentRef
    epoch: int
    """Extension: the reply's cancellation epoch."""
    seq: int
    """Extension: gap-free per reply."""
    input_watermark: int
    """Extension: input samples the server had consumed when the chunk was made."""
    audio_start_ms: int
    """Extension: the chunk's offset in the reply."""
    pcm: bytes
    """PCM16 little-endian at the session's output rate."""


@dataclass(frozen=True, slots=True)
class AudioDone:
    type: ClassVar[str] = "response.output_audio.done"
    ref: ContentRef


@dataclass(frozen=True, slots=True)
class AudioTranscriptDelta:
    type: ClassVar[str] = "response.output_audio_transcript.delta"
    ref: ContentRef
    delta: str


@dataclass(frozen=True, slots=True)
class AudioTranscriptDone:
    type: ClassVar[str] = "response.output_audio_transcript.done"
    ref: ContentRef
    transcript: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    type: ClassVar[str] = "response.output_text.delta"
    ref: ContentRef
    delta: str


@dataclass(frozen=True, slots=True)
class TextDone:
    type: ClassVar[str] = "response.output_text.done"
    ref: ContentRef
    text: str


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDelta:
    type: ClassVar[str] = "response.function_call_arguments.delta"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDone:
    type: ClassVar[str] = "response.function_call_arguments.done"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class AudioPaused:
    """Extension: stop playing this reply now, keep what is buffered."""

    type: ClassVar[str] = "response.output_audio.paused"
    ref: ContentRef
    epoch: int
    audio_end_ms: int
    detected_after_ms: int


@dataclass(frozen=True, slots=True)
class AudioDucked:
    """Extension: play this reply on at ``gain_db`` (speech over it is being judged:
    a backchannel or noise resumes it, a turn cancels it)."""

    type: ClassVar[str] = "response.output_audio.ducked"
    ref: ContentRef
    epoch: int
    audio_end_ms: int
    detected_after_ms: int
    gain_db: float


@dataclass(frozen=True, slots=True)
class AudioResumed:
    """Extension: the paused or ducked reply plays on as before."""

    type: ClassVar[str] = "response.output_audio.resumed"
    ref: ContentRef
    epoch: int


ServerEvent = (
    SessionCreated | SessionUpdated | SessionSynced | Error
    | ItemAdded | ItemDone | ItemRetrieved | ItemDeleted | ItemTruncated
    | TranscriptionCompleted | TranscriptionDelta | TranscriptionFailed
    | BufferCommitted | BufferCleared | BufferTimeoutTriggered | SpeechStarted | SpeechStopped
    | ResponseCreated | ResponseDone | OutputItemAdded | OutputItemDone | ContentPartAdded | ContentPartDone
    | AudioDelta | AudioDone | AudioTranscriptDelta | AudioTranscriptDone | TextDelta | TextDone
    | FunctionCallArgumentsDelta | FunctionCallArgumentsDone
    | AudioPaused | AudioDucked | AudioResumed
)  # fmt: skip
SERVER_EVENTS: tuple[type[ServerEvent], ...] = ServerEvent.__args__
"""Every kind of event the server can send."""
