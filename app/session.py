"""The per-connection session as a sans-I/O state machine.

``feed(event, now)`` takes a validated client event and returns what should
happen: server events (dicts) to send and actions for the edge to carry out, in
order (:class:`StartReply`, :class:`CancelReply`, :class:`Transcribe`).
``on_output`` turns an engine chunk into audio and transcript deltas, or into
nothing when its epoch has been retired. Input audio drives the server VAD on
the input sample clock, so the same input yields the same events however fast
it arrives. Nothing here awaits or touches a socket; time comes in as an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from app.conversation import Conversation, Item, decode_audio, parse_item
from app.pacing import SessionClock
from app.protocol import GA, ClientEvent, EventIds, ProtocolError, error_event
from app.settings import SessionSettings, apply_update
from app.speaker import CancelReply, Speaker, StartReply
from app.turns import Interrupt, Listener, Pause, Resume, Signal, Started, Stopped, Turn
from pipeline.state import StateHandle
from pipeline.stream import ChunkEvent
from pipeline.vad import SileroModel

__all__ = ["Session", "SessionLimits", "StartReply", "CancelReply", "Transcribe", "Sync", "Action", "Output"]


@dataclass(frozen=True, slots=True)
class Transcribe:
    """Edge: recognise this user audio and hand the text to ``on_transcript``."""

    item_id: str
    audio: np.ndarray
    rate: int


@dataclass(frozen=True, slots=True)
class Sync:
    """Edge: wait until every effect of earlier events has been sent, then send
    ``session.synced``."""

    event_id: str | None


Action = StartReply | CancelReply | Transcribe | Sync
Output = list[dict[str, Any] | Action]


@dataclass(slots=True)
class SessionLimits:
    """Per-session bounds that protect the server."""

    max_input_buffer_bytes: int = 15 * 1024 * 1024
    max_input_speed: float = 64.0
    input_burst_s: float = 30.0
    max_reply_s: float = 300.0


class Session:
    """One client's conversation, settings, clocks, turns and replies."""

    def __init__(
        self,
        session_id: str,
        now: float,
        *,
        dialect: str = GA,
        settings: SessionSettings | None = None,
        check_voice: Callable[[str], None] = lambda v: None,
        limits: SessionLimits | None = None,
        vad_model: SileroModel | None = None,
        backend: tuple[str, str] = ("espeak", "builtin"),
    ) -> None:
        self.id = session_id
        self.dialect = dialect
        self.settings = settings or SessionSettings()
        self.check_voice = check_voice
        self.limits = limits or SessionLimits()
        self.vad_model = vad_model
        self.conversation = Conversation()
        self.clock = SessionClock(now)
        self.speaker = Speaker(self)
        self.state = StateHandle(session_id, backend[0], backend[1])
        """This session's handle on backend state; the epoch moves on with every cancel."""
        self.input_samples = 0
        self._input = bytearray()  # manual-commit buffer, when server VAD is off
        self._listener: Listener | None = None
        self._speech_item: str | None = None
        self._ids = EventIds(session_id[-6:])
        self._n = 0
        self._budget = self.limits.input_burst_s  # seconds of input the client may send now
        self._budget_at = now
        self._rebuild_listener()

    # -- helpers -------------------------------------------------------------
    def new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self.id[-8:]}{self._n:05d}"

    def event(self, etype: str, **fields: Any) -> dict[str, Any]:
        return {"type": etype, "event_id": self._ids.next(), **fields}

    def error(self, err: ProtocolError) -> list[dict[str, Any]]:
        """The ``error`` event for a bad client event."""
        return [error_event(self._ids.next(), err)]

    def _ms(self, samples: int) -> int:
        return samples * 1000 // self.settings.input_rate

    def _session_object(self) -> dict[str, Any]:
        if self.dialect == GA:
            return self.settings.to_ga(self.id)
        return self.settings.to_beta(self.id)

    @property
    def response(self):
        """The active reply, if any."""
        return self.speaker.active

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> list[dict[str, Any]]:
        """``session.created``, the first event of every connection."""
        return [self.event("session.created", session=self._session_object())]

    def feed(self, event: ClientEvent, now: float) -> Output:
        """Handle one client event; errors come back as ``error`` events."""
        handler = getattr(self, "_on_" + event.type.replace(".", "_"))
        try:
            return handler(event.data, now)
        except ProtocolError as err:
            return self.error(err.with_event_id(event.event_id))

    def on_disconnect(self) -> Output:
        """The client went away: stop whatever is running."""
        return self.speaker.disconnect()

    # -- session -------------------------------------------------------------
    def _on_session_update(self, data: dict[str, Any], now: float) -> Output:
        before = self.settings
        self.settings = apply_update(
            before, data["session"], check_voice=self.check_voice, audio_started=self.input_samples > 0
        )
        if (before.turn_detection, before.input_rate) != (self.settings.turn_detection, self.settings.input_rate):
            self._rebuild_listener()
        return [self.event("session.updated", session=self._session_object())]

    def _on_session_sync(self, data: dict[str, Any], now: float) -> Output:
        # A client that syncs steps its own input clock (a replay, maybe faster
        # than real time): from now on only its input moves session time.
        self.clock.use_input_only(now)
        return [Sync(data.get("event_id"))]

    def synced(self, event_id: str | None) -> list[dict[str, Any]]:
        """The answer to ``session.sync``: where the input clock stands."""
        return [self.event("session.synced", sync_event_id=event_id, input_samples=self.input_samples,
                           audio_ms=self._ms(self.input_samples))]

    def _rebuild_listener(self) -> None:
        td = self.settings.turn_detection
        if td is None or self.vad_model is None:
            self._listener = None
            return
        # Started at the current input sample: watermarks stay on the session's clock.
        self._listener = Listener(self.vad_model, self.settings.input_rate, td, start=self.input_samples)

    # -- input audio ---------------------------------------------------------
    def _on_input_audio_buffer_append(self, data: dict[str, Any], now: float) -> Output:
        return self._append(decode_audio(data["audio"], "audio"), now)

    def feed_binary(self, raw: bytes, now: float) -> Output:
        """A binary frame: raw PCM16 microphone audio, when the session allows it."""
        try:
            if not self.settings.binary_audio:
                raise ProtocolError("binary_not_enabled",
                                    "binary frames carry audio only after session.update sets binary_audio: true")
            if len(raw) % 2:
                raise ProtocolError("invalid_audio", f"binary audio frame has an odd number of bytes ({len(raw)})")
            return self._append(raw, now)
        except ProtocolError as err:
            return self.error(err)

    def _append(self, raw: bytes, now: float) -> Output:
        seconds = len(raw) / 2 / self.settings.input_rate
        lim = self.limits
        self._budget = min(lim.input_burst_s, self._budget + (now - self._budget_at) * lim.max_input_speed)
        self._budget_at = now
        if seconds > self._budget:
            raise ProtocolError(
                "input_rate_exceeded",
                f"input audio is arriving faster than {lim.max_input_speed:g}x real time; this chunk was dropped",
                param="audio",
            )
        self._budget -= seconds
        if self._listener is None and len(self._input) + len(raw) > self.limits.max_input_buffer_bytes:
            raise ProtocolError(
                "input_audio_buffer_full",
                f"the input audio buffer holds at most {self.limits.max_input_buffer_bytes} bytes; commit or clear it",
                param="audio",
            )
        samples = len(raw) // 2
        self.input_samples += samples
        self.clock.on_input(samples / self.settings.input_rate, now)
        if self._listener is None:
            self._input += raw
            return []
        pcm = np.frombuffer(raw, "<i2").astype(np.int16)
        signals = self._listener.push(pcm, replying=self.speaker.being_heard(now) is not None)
        return self._on_signals(signals, now)

    def _on_signals(self, signals: list[Signal], now: float) -> Output:
        out: Output = []
        for sig in signals:
            if isinstance(sig, Started):
                self._speech_item = self.new_id("item")
                out.append(self.event("input_audio_buffer.speech_started",
                                      audio_start_ms=self._ms(sig.audio_start), item_id=self._speech_item))
            elif isinstance(sig, Pause):
                out += self.speaker.pause(sig.onset, now)
            elif isinstance(sig, Resume):
                out += self.speaker.resume(now)
            elif isinstance(sig, Interrupt):
                out += self.speaker.interrupt(sig.onset, now)
            elif isinstance(sig, Stopped):
                out.append(self.event("input_audio_buffer.speech_stopped",
                                      audio_end_ms=self._ms(sig.audio_end), item_id=self._speech_item))
            elif isinstance(sig, Turn):
                out += self._commit(sig.audio, self._speech_item)
        return out

    def _commit(self, audio: np.ndarray, item_id: str | None = None) -> Output:
        item = Item(item_id or self.new_id("item"), "user", [{"type": "input_audio", "transcript": None}])
        prev = self.conversation.add(item)
        return [
            self.event("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
            *self._item_added(item, prev),
            Transcribe(item.id, audio, self.settings.input_rate),
        ]

    def _on_input_audio_buffer_commit(self, data: dict[str, Any], now: float) -> Output:
        if self._listener is not None:
            audio = self._listener.take_segment()
        else:
            audio = np.frombuffer(bytes(self._input), "<i2").astype(np.int16)
            self._input.clear()
        if audio.size == 0:
            raise ProtocolError("input_audio_buffer_commit_empty", "the input audio buffer is empty")
        return self._commit(audio)

    def _on_input_audio_buffer_clear(self, data: dict[str, Any], now: float) -> Output:
        self._input.clear()
        if self._listener is not None:
            self._listener.clear()
        return [self.event("input_audio_buffer.cleared")]

    def on_transcript(self, item_id: str, text: str, now: float, recognition_ms: float | None = None,
                      failure: str | None = None) -> Output:
        """The recogniser heard ``text`` in a committed user item (in ``recognition_ms``),
        or failed with ``failure``: then the turn counts as heard as nothing and goes on."""
        try:
            item = self.conversation.get(item_id)
        except ProtocolError:
            return []  # deleted meanwhile
        item.content[0]["transcript"] = text
        if failure is not None:
            out: Output = [self.event("conversation.item.input_audio_transcription.failed", item_id=item_id,
                                      content_index=0, error={"type": "server_error", "code": "transcription_failed",
                                                              "message": failure})]
        else:
            extra = {} if recognition_ms is None else {"recognition_ms": round(recognition_ms, 2)}
            out = [self.event("conversation.item.input_audio_transcription.completed",
                              item_id=item_id, content_index=0, transcript=text, **extra)]
        td = self.settings.turn_detection
        users = [i for i in self.conversation.items if i.role == "user"]
        latest = users[-1] is item if users else False  # a later turn supersedes this one: answer that
        if td is not None and td.create_response and self.speaker.active is None and latest:
            out += self.speaker.begin(self.messages(), self.settings.output_modalities, self.settings.voice, now)
        return out

    def messages(self, items: list[Item] | None = None, instructions: str | None = None) -> tuple[dict[str, str], ...]:
        """The conversation as the thinker sees it: the instructions as the system
        prompt, then every item, assistant replies only as far as they were heard."""
        system = self.settings.instructions if instructions is None else instructions
        out = [{"role": "system", "content": system}] if system else []
        for item in self.conversation.items if items is None else items:
            if item.status == "in_progress":
                continue
            text = item.text()
            if text or item.role == "user":  # an empty user turn is still a turn (heard as nothing)
                out.append({"role": item.role, "content": text})
        return tuple(out)

    def _on_playback_ack(self, data: dict[str, Any], now: float) -> Output:
        played, stamped = data["played_samples"], data["input_samples"]
        if played < 0 or stamped < 0:
            raise ProtocolError("invalid_value", "played_samples and input_samples must be >= 0")
        self.speaker.on_ack(data["response_id"], played, stamped)
        return []

    # -- conversation --------------------------------------------------------
    def _item_added(self, item: Item, prev: str | None) -> list[dict[str, Any]]:
        wire = item.to_wire()
        return [
            self.event("conversation.item.added", previous_item_id=prev, item=wire),
            self.event("conversation.item.done", previous_item_id=prev, item=wire),
        ]

    def _on_conversation_item_create(self, data: dict[str, Any], now: float) -> Output:
        item = parse_item(data["item"], self.new_id("item"))
        prev = self.conversation.add(item, data.get("previous_item_id"))
        return self._item_added(item, prev)

    def _on_conversation_item_retrieve(self, data: dict[str, Any], now: float) -> Output:
        item = self.conversation.get(data["item_id"])
        return [self.event("conversation.item.retrieved", item=item.to_wire())]

    def _on_conversation_item_delete(self, data: dict[str, Any], now: float) -> Output:
        r = self.speaker.active
        if r is not None and r.item.id == data["item_id"]:
            raise ProtocolError("item_in_use", "cannot delete the item of the reply in progress", param="item_id")
        self.conversation.delete(data["item_id"])
        return [self.event("conversation.item.deleted", item_id=data["item_id"])]

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
        r = self.speaker.active
        if r is not None and r.item is item:
            # The client stopped playing the live reply: it is over.
            out += self.speaker.cancel(r, "client_cancelled")
        item.truncate(end_ms)
        out.append(self.event("conversation.item.truncated", item_id=item.id, content_index=0, audio_end_ms=end_ms))
        return out

    # -- responses -----------------------------------------------------------
    def _on_response_create(self, data: dict[str, Any], now: float) -> Output:
        r = self.speaker.active
        if r is not None:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {r.id} is still in progress; cancel it or wait for response.done",
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
        audio_opts = opts.get("audio") if isinstance(opts.get("audio"), dict) else {}
        audio_out = audio_opts.get("output") if isinstance(audio_opts.get("output"), dict) else {}
        for obj, param in ((opts, "response.voice"), (audio_out, "response.audio.output.voice")):
            if "voice" in obj:
                if not isinstance(obj["voice"], str):
                    raise ProtocolError("invalid_type", f"{param} must be a string", param=param)
                try:
                    self.check_voice(obj["voice"])
                except ValueError as exc:
                    raise ProtocolError("invalid_value", f"{param}: {exc}", param=param) from None
                voice = obj["voice"]
        items = None
        if "input" in opts:  # an out-of-band response over the given items only
            if not isinstance(opts["input"], list) or not all(isinstance(x, dict) for x in opts["input"]):
                raise ProtocolError("invalid_type", "response.input must be an array of items", param="response.input")
            items = [parse_item(x, f"input_{i}") for i, x in enumerate(opts["input"])]
        instructions = opts.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise ProtocolError("invalid_type", "response.instructions must be a string", param="response.instructions")
        return self.speaker.begin(self.messages(items, instructions), modalities, voice, now)

    def _on_response_cancel(self, data: dict[str, Any], now: float) -> Output:
        r = self.speaker.active
        wanted = data.get("response_id")
        if r is None:
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")
        if wanted is not None and wanted != r.id:
            raise ProtocolError("invalid_value", f"response {wanted!r} is not in progress", param="response_id")
        return self.speaker.cancel(r, "client_cancelled")

    # -- engine side ---------------------------------------------------------
    def output_wait(self, samples: int, now: float) -> float:
        """Wall seconds to wait before ``samples`` more of the reply may be sent (0: now)."""
        return self.speaker.output_wait(samples, now)

    def on_output(self, event: ChunkEvent, now: float) -> list[dict[str, Any]]:
        """Audio (and the transcript it speaks) for one engine chunk; nothing if stale."""
        return self.speaker.on_output(event, now)

    def on_reply_finished(self, response_id: str, now: float, timings: dict[str, float] | None = None
                          ) -> list[dict[str, Any]]:
        """The engine delivered the whole reply (``timings``: its latency report)."""
        return self.speaker.on_finished(response_id, timings)

    def on_reply_failed(self, response_id: str, message: str, now: float) -> list[dict[str, Any]]:
        """The engine failed mid-reply: say so, and end the reply as failed."""
        return self.speaker.on_failed(response_id, message)
