"""The per-connection session as a sans-I/O state machine.

``feed(event, now)`` takes a validated client event and returns what should
happen, in order: typed server events to send (:mod:`duplex.app.core.events`)
and actions for the edge to carry out (:mod:`duplex.app.core.actions`).
``on_output`` turns a pipeline chunk into audio and transcript deltas, or into
nothing when its epoch has been retired. Input audio drives the listener on the
input sample clock, so the same input yields the same events however fast it
arrives. Nothing here awaits or touches a socket; time comes in as an argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from duplex.app.core.actions import Action, Sync, Transcribe
from duplex.app.core.conversation import Conversation, Item, Part, decode_audio, parse_item
from duplex.app.core.events import (
    BufferCleared,
    BufferCommitted,
    Error,
    ItemAdded,
    ItemDeleted,
    ItemDone,
    ItemRetrieved,
    ServerEvent,
    SessionCreated,
    SessionSynced,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    TranscriptionCompleted,
    TranscriptionFailed,
)
from duplex.app.core.limits import SessionLimits
from duplex.app.core.listening import Listener
from duplex.app.core.pacing import SessionClock
from duplex.app.core.protocol import ClientEvent, ProtocolError
from duplex.app.core.replies import Replies, ReplyContext
from duplex.app.core.settings import SessionSettings, VoiceCheck, apply_update, response_options
from duplex.app.core.signals import Interrupt, Pause, Resume, Signal, Started, Stopped, Turn
from duplex.app.core.units import samples_to_ms
from duplex.pipeline.state import StateHandle
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.thinker import Message
from duplex.pipeline.voice_activity import VoiceActivity

Output = list[ServerEvent | Action]
Data = dict[str, Any]


class Session:
    """One client's conversation, settings, clocks, turns and replies."""

    def __init__(
        self,
        session_id: str,
        now: float,
        *,
        settings: SessionSettings | None = None,
        check_voice: VoiceCheck = lambda v: None,
        limits: SessionLimits | None = None,
        voice_activity: VoiceActivity | None = None,
        backend: tuple[str, str] = ("espeak", "builtin"),
    ) -> None:
        self.id = session_id
        self.check_voice = check_voice
        self.limits = limits or SessionLimits()
        self.voice_activity = voice_activity
        self.conversation = Conversation()
        self.clock = SessionClock(now)
        self._n = 0
        self.ctx = ReplyContext(
            session_id, self.new_id, self.clock, settings or SessionSettings(), self.limits, self.conversation
        )
        self.replies = Replies(self.ctx, StateHandle(session_id, backend[0], backend[1]))
        self.input_samples = 0
        self._input = bytearray()  # manual-commit buffer, when server VAD is off
        self._listener: Listener | None = None
        self._speech_item: str | None = None
        self._budget = self.limits.input_burst_s  # seconds of input the client may send now
        self._budget_at = now
        self._rebuild_listener()

    @property
    def settings(self) -> SessionSettings:
        return self.ctx.settings

    def new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self.id[-8:]}{self._n:05d}"

    def _ms(self, samples: int) -> int:
        return samples_to_ms(samples, self.settings.input_rate)

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> list[ServerEvent]:
        """``session.created``, the first event of every connection."""
        return [SessionCreated(self.id, self.settings)]

    def feed(self, event: ClientEvent, now: float) -> Output:
        """Handle one client event; errors come back as ``error`` events."""
        try:
            return _HANDLERS[event.type](self, event.data, now)
        except ProtocolError as err:
            return [Error(err.with_event_id(event.event_id))]

    def on_disconnect(self) -> Output:
        """The client went away: stop whatever is running."""
        return list(self.replies.disconnect())

    # -- session -------------------------------------------------------------
    def _on_session_update(self, data: Data, now: float) -> Output:
        before = self.settings
        self.ctx.settings = apply_update(
            before, data["session"], check_voice=self.check_voice, audio_started=self.input_samples > 0
        )
        if (before.turn_detection, before.input_rate) != (self.settings.turn_detection, self.settings.input_rate):
            self._rebuild_listener()
        return [SessionUpdated(self.id, self.settings)]

    def _on_session_sync(self, data: Data, now: float) -> Output:
        # A client that syncs steps its own input clock (a replay, maybe faster
        # than real time): from now on only its input moves session time.
        self.clock.use_input_only(now)
        return [Sync(data.get("event_id"))]

    def synced(self, event_id: str | None) -> list[ServerEvent]:
        """The answer to ``session.sync``: where the input clock stands."""
        return [SessionSynced(event_id, self.input_samples, self._ms(self.input_samples))]

    def _rebuild_listener(self) -> None:
        td = self.settings.turn_detection
        if td is None or self.voice_activity is None:
            self._listener = None
            return
        # Started at the current input sample: watermarks stay on the session's clock.
        self._listener = Listener(self.voice_activity, self.settings.input_rate, td, start=self.input_samples)

    # -- input audio ---------------------------------------------------------
    def _on_input_audio_buffer_append(self, data: Data, now: float) -> Output:
        return self._append(decode_audio(data["audio"], "audio"), now)

    def feed_binary(self, raw: bytes, now: float) -> Output:
        """A binary frame: raw PCM16 microphone audio, when the session allows it."""
        try:
            if not self.settings.binary_audio:
                raise ProtocolError(
                    "binary_not_enabled", "binary frames carry audio only after session.update sets binary_audio: true"
                )
            if len(raw) % 2:
                raise ProtocolError("invalid_audio", f"binary audio frame has an odd number of bytes ({len(raw)})")
            return self._append(raw, now)
        except ProtocolError as err:
            return [Error(err)]

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
        if self._listener is None and len(self._input) + len(raw) > lim.max_input_buffer_bytes:
            raise ProtocolError(
                "input_audio_buffer_full",
                f"the input audio buffer holds at most {lim.max_input_buffer_bytes} bytes; commit or clear it",
                param="audio",
            )
        samples = len(raw) // 2
        self.input_samples += samples
        self.clock.on_input(samples / self.settings.input_rate, now)
        if self._listener is None:
            self._input += raw
            return []
        pcm = np.frombuffer(raw, "<i2").astype(np.int16)
        signals = self._listener.push(pcm, replying=self.replies.being_heard(now) is not None)
        return self._on_signals(signals, now)

    def _on_signals(self, signals: list[Signal], now: float) -> Output:
        out: Output = []
        for sig in signals:
            if isinstance(sig, Started):
                self._speech_item = self.new_id("item")
                out.append(SpeechStarted(self._ms(sig.audio_start), self._speech_item))
            elif isinstance(sig, Pause):
                out += self.replies.pause(sig.onset, self.input_samples, now)
            elif isinstance(sig, Resume):
                out += self.replies.resume(now)
            elif isinstance(sig, Interrupt):
                out += self.replies.interrupt(sig.onset, now)
            elif isinstance(sig, Stopped):
                out.append(SpeechStopped(self._ms(sig.audio_end), self._speech_item))
            elif isinstance(sig, Turn):
                out += self._commit(sig.audio, self._speech_item)
        return out

    def _commit(self, audio: np.ndarray, item_id: str | None = None) -> Output:
        item = Item(item_id or self.new_id("item"), "user", [Part("input_audio", None)])
        prev = self.conversation.add(item)
        return [
            BufferCommitted(prev, item.id),
            *self._item_added(item, prev),
            Transcribe(item.id, audio, self.settings.input_rate),
        ]

    def _on_input_audio_buffer_commit(self, data: Data, now: float) -> Output:
        if self._listener is not None:
            audio = self._listener.take_segment()
        else:
            audio = np.frombuffer(bytes(self._input), "<i2").astype(np.int16)
            self._input.clear()
        if audio.size == 0:
            raise ProtocolError("input_audio_buffer_commit_empty", "the input audio buffer is empty")
        return self._commit(audio)

    def _on_input_audio_buffer_clear(self, data: Data, now: float) -> Output:
        self._input.clear()
        if self._listener is not None:
            self._listener.clear()
        return [BufferCleared()]

    def on_transcript(
        self, item_id: str, text: str, now: float, recognition_ms: float | None = None, failure: str | None = None
    ) -> Output:
        """The recogniser heard ``text`` in a committed user item (in ``recognition_ms``),
        or failed with ``failure``: then the turn counts as heard as nothing and goes on."""
        if item_id not in self.conversation:
            return []  # deleted meanwhile
        item = self.conversation.get(item_id)
        item.content[0].text = text
        out: Output = [
            TranscriptionFailed(item_id, 0, failure)
            if failure is not None
            else TranscriptionCompleted(item_id, 0, text, recognition_ms)
        ]
        td = self.settings.turn_detection
        users = [i for i in self.conversation.items if i.role == "user"]
        latest = users[-1] is item if users else False  # a later turn supersedes this one: answer that
        if td is not None and td.create_response and self.replies.active is None and latest:
            options = response_options(self.settings, {}, check_voice=self.check_voice)
            out += self.replies.begin(self.messages(), options, now)
        return out

    def messages(self, items: list[Item] | None = None, instructions: str | None = None) -> tuple[Message, ...]:
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

    def _on_playback_ack(self, data: Data, now: float) -> Output:
        played, stamped = data["played_samples"], data["input_samples"]
        if played < 0 or stamped < 0:
            raise ProtocolError("invalid_value", "played_samples and input_samples must be >= 0")
        self.replies.on_ack(data["response_id"], played, stamped)
        return []

    # -- conversation --------------------------------------------------------
    def _item_added(self, item: Item, prev: str | None) -> list[ServerEvent]:
        view = item.view()
        return [ItemAdded(prev, view), ItemDone(prev, view)]

    def _on_conversation_item_create(self, data: Data, now: float) -> Output:
        item = parse_item(data["item"], self.new_id("item"))
        prev = self.conversation.add(item, data.get("previous_item_id"))
        return list(self._item_added(item, prev))

    def _on_conversation_item_retrieve(self, data: Data, now: float) -> Output:
        return [ItemRetrieved(self.conversation.get(data["item_id"]).view())]

    def _on_conversation_item_delete(self, data: Data, now: float) -> Output:
        r = self.replies.active
        if r is not None and r.item.id == data["item_id"]:
            raise ProtocolError("item_in_use", "cannot delete the item of the reply in progress", param="item_id")
        self.conversation.delete(data["item_id"])
        return [ItemDeleted(data["item_id"])]

    def _on_conversation_item_truncate(self, data: Data, now: float) -> Output:
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
        return list(self.replies.truncate(item, end_ms))

    # -- responses -----------------------------------------------------------
    def _on_response_create(self, data: Data, now: float) -> Output:
        r = self.replies.active
        if r is not None:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {r.id} is still in progress; cancel it or wait for response.done",
            )
        opts = data.get("response") or {}
        options = response_options(self.settings, opts, check_voice=self.check_voice)
        items = None
        if "input" in opts:  # an out-of-band response over the given items only
            if not isinstance(opts["input"], list) or not all(isinstance(x, dict) for x in opts["input"]):
                raise ProtocolError("invalid_type", "response.input must be an array of items", param="response.input")
            items = [parse_item(x, f"input_{i}") for i, x in enumerate(opts["input"])]
        return list(self.replies.begin(self.messages(items, options.instructions), options, now))

    def _on_response_cancel(self, data: Data, now: float) -> Output:
        r = self.replies.active
        wanted = data.get("response_id")
        if r is None:
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")
        if wanted is not None and wanted != r.id:
            raise ProtocolError("invalid_value", f"response {wanted!r} is not in progress", param="response_id")
        return list(self.replies.cancel(r, "client_cancelled"))

    # -- pipeline side -------------------------------------------------------
    def output_wait(self, samples: int, now: float) -> float:
        """Wall seconds to wait before ``samples`` more of the reply may be sent (0: now)."""
        return self.replies.output_wait(samples, now)

    def on_output(self, event: ChunkEvent, now: float) -> list[ServerEvent]:
        """Audio (and the transcript it speaks) for one pipeline chunk; nothing if stale."""
        return self.replies.on_output(event, now)

    def on_reply_finished(
        self, response_id: str, now: float, timings: dict[str, float] | None = None
    ) -> list[ServerEvent]:
        """The pipeline delivered the whole reply (``timings``: its latency report)."""
        return self.replies.on_finished(response_id, timings)

    def on_reply_failed(self, response_id: str, message: str, now: float) -> list[ServerEvent]:
        """The pipeline failed mid-reply: say so, and end the reply as failed."""
        return self.replies.on_failed(response_id, message)


_HANDLERS: dict[str, Callable[[Session, Data, float], Output]] = {
    "session.update": Session._on_session_update,
    "session.sync": Session._on_session_sync,
    "input_audio_buffer.append": Session._on_input_audio_buffer_append,
    "input_audio_buffer.commit": Session._on_input_audio_buffer_commit,
    "input_audio_buffer.clear": Session._on_input_audio_buffer_clear,
    "playback.ack": Session._on_playback_ack,
    "conversation.item.create": Session._on_conversation_item_create,
    "conversation.item.retrieve": Session._on_conversation_item_retrieve,
    "conversation.item.delete": Session._on_conversation_item_delete,
    "conversation.item.truncate": Session._on_conversation_item_truncate,
    "response.create": Session._on_response_create,
    "response.cancel": Session._on_response_cancel,
}
"""Which handler takes each client event type (the protocol's schema table names the same set)."""
