"""The one place server events become Realtime frames.

:class:`Wire` renders the core's typed events (:mod:`duplex.app.core.events`) for
one connection: GA names, or beta names and shapes for a client that asked for the
beta protocol; audio as base64 in the JSON, or as the JSON header followed by one
binary frame when the session uses binary audio; the session, item and response
objects; and a server event id on every event.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, fields, replace
from typing import Any

import numpy as np

from duplex.app.core.events import (
    AudioDelta,
    AudioDucked,
    AudioPaused,
    AudioResumed,
    BufferTimeoutTriggered,
    ContentPartAdded,
    ContentPartDone,
    ContentRef,
    ItemDone,
    ItemView,
    PartView,
    ResponseView,
    ServerEvent,
    SessionCreated,
    SessionUpdated,
    TranscriptionCompleted,
    TranscriptionFailed,
)
from duplex.app.core.protocol import ProtocolError
from duplex.app.core.settings import SessionSettings, TurnDetection
from duplex.pipeline import g711

GA = "ga"
BETA = "beta"

# The beta protocol's names for events whose GA name changed.
BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
# GA events the beta protocol does not have; beta clients do not get them.
GA_ONLY: tuple[type[ServerEvent], ...] = (ItemDone, BufferTimeoutTriggered)
_BETA_PART_TYPES = {"output_audio": "audio", "output_text": "text"}
_TEXT_PARTS = {"input_text", "output_text", "text"}

Frame = str | bytes


# Duplex's own events: a client that did not ask for them (``?duplex=1``) never sees
# them, so an SDK that validates every event against OpenAI's types is not tripped.
EXTENSION_EVENTS: tuple[type[ServerEvent], ...] = (AudioPaused, AudioDucked, AudioResumed)
# Duplex's own fields on standard events and objects: likewise only for such a client.
_DELTA_FIELDS = ("epoch", "seq", "input_watermark", "audio_start_ms")
EXTENSION_FIELDS = {
    "response.output_audio.delta": _DELTA_FIELDS,
    "response.audio.delta": _DELTA_FIELDS,
    "conversation.item.input_audio_transcription.completed": ("recognition_ms",),
}
SESSION_EXTENSION_FIELDS = ("pacing", "binary_audio", "input_audio_rate", "output_audio_rate")


class Wire:
    """Renders one connection's server events: its dialect, its event ids, and whether
    it asked for Duplex's extension events."""

    def __init__(self, session_id: str, dialect: str = GA, *, extensions: bool = True) -> None:
        self.dialect = dialect
        self.extensions = extensions
        self._prefix = session_id[-6:]
        self._n = 0

    def _next_id(self) -> str:
        self._n += 1
        return f"evt_{self._prefix}{self._n:06d}"

    def render(self, event: ServerEvent, *, binary_audio: bool = False, audio_format: str = "pcm16") -> list[Frame]:
        """The frames that carry ``event`` (none if the dialect has no such event); audio
        in ``audio_format`` (``pcm16``, or G.711's ``pcmu``/``pcma``)."""
        if self.dialect == BETA and isinstance(event, GA_ONLY):
            return []
        if not self.extensions and isinstance(event, EXTENSION_EVENTS):
            return []
        if isinstance(event, AudioDelta) and audio_format != "pcm16":
            pcm = np.frombuffer(event.pcm, dtype=np.int16)
            event = replace(event, pcm=g711.encode(pcm, audio_format))
        body = self.to_dict(event)
        if not self.extensions:
            _plain(body)
        if isinstance(event, AudioDelta) and binary_audio:
            del body["delta"]
            body["binary"] = True  # the audio follows as the next binary frame
            return [_json(body), event.pcm]
        return [_json(body)]

    def to_dict(self, event: ServerEvent) -> dict[str, Any]:
        """The JSON object of ``event`` in this connection's dialect, with a new event id."""
        beta = self.dialect == BETA
        name = BETA_NAMES.get(event.type, event.type) if beta else event.type
        out: dict[str, Any] = {"type": name, "event_id": self._next_id()}
        if isinstance(event, (SessionCreated, SessionUpdated)):
            out["session"] = session_object(event.session_id, event.settings, beta)
            return out
        if isinstance(event, TranscriptionFailed):
            out.update(
                item_id=event.item_id,
                content_index=event.content_index,
                error={"type": "server_error", "code": "transcription_failed", "message": event.message},
            )
            return out
        for f in fields(event):
            value = getattr(event, f.name)
            if isinstance(value, ContentRef):
                out.update(asdict(value))
            elif f.name == "pcm":
                out["delta"] = base64.b64encode(value).decode("ascii")
            elif isinstance(event, TranscriptionCompleted) and f.name == "recognition_ms":
                if value is not None:
                    out[f.name] = round(value, 2)
            elif isinstance(event, TranscriptionCompleted) and f.name == "audio_ms":
                out["usage"] = {"type": "duration", "seconds": value / 1000}  # the openai types require it
            elif isinstance(event, (ContentPartAdded, ContentPartDone)) and f.name == "part":
                out["part"] = part_object(value, beta=True)  # a content part event's types: "audio" | "text"
            else:
                out[f.name] = _value(value, beta)
        return out


def _plain(body: dict[str, Any]) -> None:
    """Drop Duplex's own fields from an event for a client that did not ask for them."""
    for key in EXTENSION_FIELDS.get(body["type"], ()):
        body.pop(key, None)
    if isinstance(body.get("response"), dict):
        body["response"].pop("timings", None)
    if isinstance(body.get("session"), dict):
        for key in SESSION_EXTENSION_FIELDS:
            body["session"].pop(key, None)


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def _value(value: Any, beta: bool) -> Any:
    if isinstance(value, ItemView):
        return item_object(value, beta)
    if isinstance(value, PartView):
        return part_object(value, beta)
    if isinstance(value, ResponseView):
        return response_object(value, beta)
    if isinstance(value, ProtocolError):
        return value.to_error()
    return value


def part_object(part: PartView, beta: bool = False) -> dict[str, Any]:
    kind = _BETA_PART_TYPES.get(part.type, part.type) if beta else part.type
    key = "text" if part.type in _TEXT_PARTS else "transcript"
    return {"type": kind, key: part.text}


def item_object(item: ItemView, beta: bool = False) -> dict[str, Any]:
    if item.type in ("function_call", "function_call_output"):
        head = {"id": item.id, "object": "realtime.item", "type": item.type, "status": item.status}
        if item.type == "function_call":
            return {**head, "call_id": item.call_id, "name": item.name, "arguments": item.arguments}
        return {**head, "call_id": item.call_id, "output": item.output}
    return {
        "id": item.id,
        "object": "realtime.item",
        "type": item.type,
        "status": item.status,
        "role": item.role,
        "content": [part_object(p, beta) for p in item.content],
    }


def response_object(r: ResponseView, beta: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "object": "realtime.response",
        "id": r.id,
        "status": r.status,
        "status_details": r.status_details,
        "output": [item_object(i, beta) for i in r.output] if r.status != "in_progress" else [],
        "conversation_id": r.conversation_id,
        "output_modalities": list(r.modalities),
        "modalities": list(r.modalities),
        "audio": {"output": {"format": _format_object(r.output_format, r.output_rate), "voice": r.voice}},
        "usage": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0},
        "metadata": r.metadata,
    }
    if r.timings:
        out["timings"] = r.timings
    return out


# The beta protocol's session object allows only OpenAI's model names (its types are a
# closed list); a session on any other model leaves the field out there.
BETA_MODELS = frozenset({
    "gpt-realtime", "gpt-realtime-2025-08-28", "gpt-4o-realtime-preview", "gpt-4o-realtime-preview-2024-10-01",
    "gpt-4o-realtime-preview-2024-12-17", "gpt-4o-realtime-preview-2025-06-03", "gpt-4o-mini-realtime-preview",
    "gpt-4o-mini-realtime-preview-2024-12-17",
})  # fmt: skip

_SERVER_VAD_ONLY = ("threshold", "prefix_padding_ms", "silence_duration_ms")


def _turn_object(td: TurnDetection | None) -> dict[str, Any] | None:
    """The fields of the chosen type (and the extensions), not the other type's."""
    if td is None:
        return None
    obj = asdict(td)
    for key in ("eagerness",) if td.type == "server_vad" else _SERVER_VAD_ONLY:
        del obj[key]
    return obj


_BETA_FORMATS = {"pcm16": "pcm16", "pcmu": "g711_ulaw", "pcma": "g711_alaw"}


def _format_object(encoding: str, rate: int) -> dict[str, Any]:
    return {"type": "audio/pcm", "rate": rate} if encoding == "pcm16" else {"type": f"audio/{encoding}"}


def _noise_object(s: SessionSettings) -> dict[str, Any] | None:
    return None if s.noise_reduction is None else {"type": s.noise_reduction}


def session_object(session_id: str, s: SessionSettings, beta: bool = False) -> dict[str, Any]:
    """The session object of ``session.created|updated``: GA, or the beta shape."""
    if beta:
        return {
            "id": session_id,
            "object": "realtime.session",
            **({"model": s.model} if s.model in BETA_MODELS else {}),
            "modalities": list(s.output_modalities),
            "instructions": s.instructions,
            "voice": s.voice,
            "speed": s.speed,
            "input_audio_format": _BETA_FORMATS[s.input_format],
            "output_audio_format": _BETA_FORMATS[s.output_format],
            "input_audio_transcription": s.transcription,
            "input_audio_noise_reduction": _noise_object(s),
            "turn_detection": _turn_object(s.turn_detection),
            "max_response_output_tokens": s.max_output_tokens,
            **({"temperature": s.temperature} if s.temperature is not None else {}),
            "tools": [dict(t) for t in s.tools],
            "tool_choice": s.tool_choice,
            "pacing": asdict(s.pacing),
            "binary_audio": s.binary_audio,
            "echo_cancellation": s.cleaning()[0],
            "input_audio_rate": s.input_rate,
            "output_audio_rate": s.output_rate,
        }
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": s.model,
        "output_modalities": list(s.output_modalities),
        "instructions": s.instructions,
        "audio": {
            "input": {
                "format": _format_object(s.input_format, s.input_rate),
                "transcription": s.transcription,
                "noise_reduction": _noise_object(s),
                "turn_detection": _turn_object(s.turn_detection),
            },
            "output": {
                "format": _format_object(s.output_format, s.output_rate),
                "voice": s.voice,
                "speed": s.speed,
            },
        },
        "max_output_tokens": s.max_output_tokens,
        "tools": [dict(t) for t in s.tools],
        "tool_choice": s.tool_choice,
        "truncation": s.truncation,
        "pacing": asdict(s.pacing),
        "binary_audio": s.binary_audio,
        "echo_cancellation": s.cleaning()[0],
    }
