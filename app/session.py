"""The per-connection session as a sans-I/O state machine.

``feed(event, now)`` takes a validated client event and returns what should
happen: server events (dicts) to send, and actions (:class:`StartReply`,
:class:`CancelReply`) for the edge to carry out, in order. ``on_output`` turns an
engine chunk into audio and transcript deltas, or into nothing when its epoch
has been retired. Nothing here awaits or touches a socket; time comes in as an
argument.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Callable

from app.conversation import Conversation, Item, decode_audio, parse_item
from app.pacing import Playout, SessionClock
from app.protocol import GA, ClientEvent, EventIds, ProtocolError, error_event
from app.settings import SessionSettings, apply_update
from pipeline.engine import OutputChunk
from pipeline.stream import ChunkEvent
from pipeline.talker import SpeechRequest

NOTHING_HEARD = "I have nothing to repeat yet."


@dataclass(frozen=True, slots=True)
class StartReply:
    """Edge: run the engine for this reply and feed its chunks to ``on_output``."""

    response_id: str
    epoch: int
    request: SpeechRequest
    output_rate: int


@dataclass(frozen=True, slots=True)
class CancelReply:
    """Edge: retire and cancel the running reply, and wait for it to stop, before
    sending what follows."""

    response_id: str
    epoch: int
    reason: str


Action = StartReply | CancelReply
Output = list[dict[str, Any] | Action]


@dataclass(slots=True)
class SessionLimits:
    """Per-session bounds that protect the server."""

    max_input_buffer_bytes: int = 15 * 1024 * 1024


@dataclass(slots=True)
class _Response:
    id: str
    item: Item
    epoch: int
    modalities: tuple[str, ...]
    text: str
    voice: str
    playout: Playout
    transcript_sent: int = 0
    started: float = 0.0
    first_audio: float | None = None


class Session:
    """One client's conversation, settings, clocks and current reply."""

    def __init__(
        self,
        session_id: str,
        now: float,
        *,
        dialect: str = GA,
        settings: SessionSettings | None = None,
        check_voice: Callable[[str], None] = lambda v: None,
        limits: SessionLimits | None = None,
    ) -> None:
        self.id = session_id
        self.dialect = dialect
        self.settings = settings or SessionSettings()
        self.check_voice = check_voice
        self.limits = limits or SessionLimits()
        self.conversation = Conversation()
        self.clock = SessionClock(now)
        self.input_samples = 0
        self._input = bytearray()
        self._ids = EventIds(session_id[-6:])
        self._n = 0
        self.epoch = 0
        self.response: _Response | None = None
        self.stale_dropped = 0
        self.cancels: dict[str, int] = {}

    # -- helpers -------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self.id[-8:]}{self._n:05d}"

    def _event(self, etype: str, **fields: Any) -> dict[str, Any]:
        return {"type": etype, "event_id": self._ids.next(), **fields}

    def _session_object(self) -> dict[str, Any]:
        if self.dialect == GA:
            return self.settings.to_ga(self.id)
        return self.settings.to_beta(self.id)

    def error(self, err: ProtocolError) -> list[dict[str, Any]]:
        """The ``error`` event for a bad client event."""
        return [error_event(self._ids.next(), err)]

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> list[dict[str, Any]]:
        """``session.created``, the first event of every connection."""
        return [self._event("session.created", session=self._session_object())]

    def feed(self, event: ClientEvent, now: float) -> Output:
        """Handle one client event; errors come back as ``error`` events."""
        handler = getattr(self, "_on_" + event.type.replace(".", "_"))
        try:
            return handler(event.data, now)
        except ProtocolError as err:
            return self.error(err.with_event_id(event.event_id))

    def on_disconnect(self) -> Output:
        """The client went away: stop whatever is running."""
        if self.response is None:
            return []
        r, self.response = self.response, None
        self.cancels["client_disconnected"] = self.cancels.get("client_disconnected", 0) + 1
        return [CancelReply(r.id, r.epoch, "client_disconnected")]

    # -- session -------------------------------------------------------------
    def _on_session_update(self, data: dict[str, Any], now: float) -> Output:
        self.settings = apply_update(
            self.settings, data["session"], check_voice=self.check_voice, audio_started=self.input_samples > 0
        )
        return [self._event("session.updated", session=self._session_object())]

    # -- input audio ---------------------------------------------------------
    def _on_input_audio_buffer_append(self, data: dict[str, Any], now: float) -> Output:
        raw = decode_audio(data["audio"], "audio")
        if len(self._input) + len(raw) > self.limits.max_input_buffer_bytes:
            raise ProtocolError(
                "input_audio_buffer_full",
                f"the input audio buffer holds at most {self.limits.max_input_buffer_bytes} bytes; commit or clear it",
                param="audio",
            )
        self._input += raw
        samples = len(raw) // 2
        self.input_samples += samples
        self.clock.on_input(samples / self.settings.input_rate, now)
        return []

    def _on_input_audio_buffer_commit(self, data: dict[str, Any], now: float) -> Output:
        if not self._input:
            raise ProtocolError("input_audio_buffer_commit_empty", "the input audio buffer is empty")
        item = Item(self._new_id("item"), "user", [{"type": "input_audio", "transcript": None}])
        self._input.clear()
        prev = self.conversation.add(item)
        return [
            self._event("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
            *self._item_added(item, prev),
        ]

    def _on_input_audio_buffer_clear(self, data: dict[str, Any], now: float) -> Output:
        self._input.clear()
        return [self._event("input_audio_buffer.cleared")]

    def _on_playback_ack(self, data: dict[str, Any], now: float) -> Output:
        r = self.response
        if r is None or data["response_id"] != r.id:
            return []  # an ack for a reply that has ended is harmless
        played, stamped = data["played_samples"], data["input_samples"]
        if played < 0 or stamped < 0:
            raise ProtocolError("invalid_value", "played_samples and input_samples must be >= 0")
        r.playout.on_ack(played, stamped / self.settings.input_rate)
        return []

    # -- conversation --------------------------------------------------------
    def _item_added(self, item: Item, prev: str | None) -> list[dict[str, Any]]:
        wire = item.to_wire()
        return [
            self._event("conversation.item.added", previous_item_id=prev, item=wire),
            self._event("conversation.item.done", previous_item_id=prev, item=wire),
        ]

    def _on_conversation_item_create(self, data: dict[str, Any], now: float) -> Output:
        item = parse_item(data["item"], self._new_id("item"))
        prev = self.conversation.add(item, data.get("previous_item_id"))
        return self._item_added(item, prev)

    def _on_conversation_item_retrieve(self, data: dict[str, Any], now: float) -> Output:
        item = self.conversation.get(data["item_id"])
        return [self._event("conversation.item.retrieved", item=item.to_wire())]

    def _on_conversation_item_delete(self, data: dict[str, Any], now: float) -> Output:
        if self.response is not None and self.response.item.id == data["item_id"]:
            raise ProtocolError("item_in_use", "cannot delete the item of the reply in progress", param="item_id")
        self.conversation.delete(data["item_id"])
        return [self._event("conversation.item.deleted", item_id=data["item_id"])]

    def _on_conversation_item_truncate(self, data: dict[str, Any], now: float) -> Output:
        item = self.conversation.get(data["item_id"])
        if item.role != "assistant" or not item.audio_rate:
            raise ProtocolError("invalid_value", "only an assistant audio item can be truncated", param="item_id")
        if data["content_index"] != 0:
            raise ProtocolError("invalid_value", "content_index must be 0", param="content_index")
        end_ms = data["audio_end_ms"]
        if not 0 <= end_ms <= item.audio_ms:
            raise ProtocolError(
                "invalid_value",
                f"audio_end_ms {end_ms} is past the end of the item's audio ({item.audio_ms} ms)",
                param="audio_end_ms",
            )
        out: Output = []
        r = self.response
        if r is not None and r.item is item:
            # The client stopped playing the live reply: it is over.
            out += self._cancel(r, "client_cancelled", now)
        item.truncate(end_ms)
        out.append(self._event("conversation.item.truncated", item_id=item.id, content_index=0, audio_end_ms=end_ms))
        return out

    # -- responses -----------------------------------------------------------
    def _on_response_create(self, data: dict[str, Any], now: float) -> Output:
        if self.response is not None:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {self.response.id} is still in progress; cancel it or wait for response.done",
            )
        opts = data.get("response") or {}
        modalities = self.settings.output_modalities
        for key in ("output_modalities", "modalities"):
            if key in opts:
                mods = opts[key]
                if not isinstance(mods, list) or not mods or not set(mods) <= {"audio", "text"}:
                    raise ProtocolError("invalid_value", f"response.{key} must list 'audio' and/or 'text'", param=f"response.{key}")
                modalities = tuple(sorted(set(mods)))
        voice = self.settings.voice
        audio_opts = (opts.get("audio") or {}).get("output") or {} if isinstance(opts.get("audio"), dict) else {}
        for obj, param in ((opts, "response.voice"), (audio_opts, "response.audio.output.voice")):
            if "voice" in obj:
                if not isinstance(obj["voice"], str):
                    raise ProtocolError("invalid_type", f"{param} must be a string", param=param)
                try:
                    self.check_voice(obj["voice"])
                except ValueError as exc:
                    raise ProtocolError("invalid_value", f"{param}: {exc}", param=param) from None
                voice = obj["voice"]
        text = self._reply_text(opts)
        return self._begin(text, modalities, voice, now)

    def _reply_text(self, opts: dict[str, Any]) -> str:
        """The default reply says back the last thing the user said."""
        items = None
        if "input" in opts:
            if not isinstance(opts["input"], list):
                raise ProtocolError("invalid_type", "response.input must be an array of items", param="response.input")
            items = [parse_item(x, f"input_{i}") if isinstance(x, dict) else None for i, x in enumerate(opts["input"])]
            if None in items:
                raise ProtocolError("invalid_type", "response.input items must be objects", param="response.input")
        heard = self.conversation.last_user_text(items)  # type: ignore[arg-type]
        return heard.strip() if heard and heard.strip() else NOTHING_HEARD

    def _begin(self, text: str, modalities: tuple[str, ...], voice: str, now: float) -> Output:
        self.epoch += 1
        audio = "audio" in modalities
        part = {"type": "output_audio", "transcript": ""} if audio else {"type": "output_text", "text": ""}
        item = Item(self._new_id("item"), "assistant", [], status="in_progress", full_text=text,
                    audio_rate=self.settings.output_rate if audio else 0)
        rid = self._new_id("resp")
        pacing = self.settings.pacing
        r = _Response(rid, item, self.epoch, modalities, text, voice,
                      Playout(self.settings.output_rate, pacing.lead_ms / 1000), started=now)
        self.response = r
        prev = self.conversation.add(item)
        out: Output = [
            self._event("response.created", response=self._response_object(r, "in_progress")),
            self._event("response.output_item.added", response_id=rid, output_index=0, item=item.to_wire()),
            self._event("conversation.item.added", previous_item_id=prev, item=item.to_wire()),
            self._event("response.content_part.added", response_id=rid, item_id=item.id, output_index=0,
                        content_index=0, part=dict(part)),
        ]
        item.content.append(part)
        if audio:
            request = SpeechRequest(rid, text, voice, self.settings.speed)
            out.append(StartReply(rid, r.epoch, request, self.settings.output_rate))
        else:
            part["text"] = text
            out.append(self._event("response.output_text.delta", response_id=rid, item_id=item.id,
                                   output_index=0, content_index=0, delta=text))
            out += self._finish(r, "completed", now)
        return out

    def _response_object(self, r: _Response, status: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "object": "realtime.response",
            "id": r.id,
            "status": status,
            "status_details": details,
            "output": [r.item.to_wire()] if status != "in_progress" else [],
            "conversation_id": self.id,
            "output_modalities": list(r.modalities),
            "modalities": list(r.modalities),
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": self.settings.output_rate}, "voice": r.voice}},
            "usage": {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0},
            "metadata": None,
        }

    def _finish(self, r: _Response, status: str, now: float, details: dict[str, Any] | None = None) -> Output:
        """Close the reply's content, item and response, once."""
        self.response = None
        item = r.item
        item.status = "completed" if status == "completed" else "incomplete"
        ids = {"response_id": r.id, "item_id": item.id, "output_index": 0, "content_index": 0}
        out: Output = []
        part = item.content[0]
        if "transcript" in part:
            if status == "completed":
                part["transcript"] = r.text
            else:
                part["transcript"] = r.text[: r.transcript_sent]
            out.append(self._event("response.output_audio.done", **ids))
            out.append(self._event("response.output_audio_transcript.done", **ids, transcript=part["transcript"]))
        else:
            out.append(self._event("response.output_text.done", **ids, text=part["text"]))
        out += [
            self._event("response.content_part.done", **ids, part=dict(part)),
            self._event("response.output_item.done", response_id=r.id, output_index=0, item=item.to_wire()),
            self._event("conversation.item.done", item=item.to_wire()),
            self._event("response.done", response=self._response_object(r, status, details)),
        ]
        return out

    def _cancel(self, r: _Response, reason: str, now: float) -> Output:
        self.cancels[reason] = self.cancels.get(reason, 0) + 1
        details = {"type": "cancelled", "reason": reason}
        return [CancelReply(r.id, r.epoch, reason), *self._finish(r, "cancelled", now, details)]

    def _on_response_cancel(self, data: dict[str, Any], now: float) -> Output:
        r = self.response
        wanted = data.get("response_id")
        if r is None:
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")
        if wanted is not None and wanted != r.id:
            raise ProtocolError("invalid_value", f"response {wanted!r} is not in progress", param="response_id")
        return self._cancel(r, "client_cancelled", now)

    # -- engine side ---------------------------------------------------------
    def output_wait(self, samples: int, now: float) -> float:
        """Wall seconds to wait before ``samples`` more of the reply may be sent (0: now).

        While the client streams input, session time only moves with input, so the
        wait is a re-check interval; the edge also wakes on every input and ack.
        """
        r = self.response
        if r is None or not self.settings.pacing.enabled:
            return 0.0
        t = self.clock.now(now)
        need = r.playout.seconds_until(samples, t)
        if need == 0.0:
            return 0.0
        if self.clock.streaming(now):
            return min(need, self.clock.idle_s)
        return need

    def on_output(self, event: ChunkEvent, now: float) -> list[dict[str, Any]]:
        """Audio (and the transcript it speaks) for one engine chunk; nothing if stale."""
        r = self.response
        if r is None or event.epoch != r.epoch or event.request_id != r.id:
            self.stale_dropped += 1
            return []
        chunk: OutputChunk = event.payload
        ids = {"response_id": r.id, "item_id": r.item.id, "output_index": 0, "content_index": 0}
        out: list[dict[str, Any]] = []
        n = chunk.audio.length
        if n:
            if r.first_audio is None:
                r.first_audio = now
            out.append(self._event(
                "response.output_audio.delta", **ids,
                delta=base64.b64encode(chunk.audio.to_bytes()).decode("ascii"),
                epoch=r.epoch, seq=event.seq, input_watermark=event.input_watermark,
                audio_start_ms=chunk.start * 1000 // chunk.audio.rate,
            ))
            r.playout.on_sent(n, self.clock.now(now))
            r.item.audio_samples += n
        if chunk.words:
            r.item.words.extend(chunk.words)
            upto = max(w.end for w in chunk.words)
            if upto > r.transcript_sent:
                out.append(self._event("response.output_audio_transcript.delta", **ids,
                                       delta=r.text[r.transcript_sent:upto]))
                r.transcript_sent = upto
        return out

    def on_reply_finished(self, response_id: str, now: float) -> list[dict[str, Any]]:
        """The engine delivered the whole reply."""
        r = self.response
        if r is None or r.id != response_id:
            return []
        out: list[dict[str, Any]] = []
        if r.transcript_sent < len(r.text):
            ids = {"response_id": r.id, "item_id": r.item.id, "output_index": 0, "content_index": 0}
            out.append(self._event("response.output_audio_transcript.delta", **ids, delta=r.text[r.transcript_sent:]))
            r.transcript_sent = len(r.text)
        return out + self._finish(r, "completed", now)  # type: ignore[return-value]

    def on_reply_failed(self, response_id: str, message: str, now: float) -> list[dict[str, Any]]:
        """The engine failed mid-reply: say so, and end the reply as failed."""
        r = self.response
        if r is None or r.id != response_id:
            return []
        err = ProtocolError("reply_failed", f"the reply failed: {message}", error_type="server_error")
        details = {"type": "failed", "error": {"type": "server_error", "code": "reply_failed", "message": message}}
        return self.error(err) + self._finish(r, "failed", now, details)  # type: ignore[return-value]
