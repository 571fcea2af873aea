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

from duplex.app.core.actions import Action, Delivery, Heard, PredictTurn, Sync, Transcribe
from duplex.app.core.conversation import Conversation, added, parse_item
from duplex.app.core.events import (
    BufferCleared,
    Error,
    ItemDeleted,
    ItemRetrieved,
    ItemTruncated,
    ServerEvent,
    SessionCreated,
    SessionSynced,
    SessionUpdated,
)
from duplex.app.core.intake import Intake
from duplex.app.core.limits import INPUT_IDLE_S, SessionLimits
from duplex.app.core.listening import DEAF, Ears
from duplex.app.core.pacing import SessionClock
from duplex.app.core.protocol import ClientEvent, ProtocolError
from duplex.app.core.replies import Replies
from duplex.app.core.session_context import SessionContext
from duplex.app.core.settings import SessionSettings, VoiceCheck, apply_update
from duplex.app.core.tool_settings import function_tools
from duplex.app.core.turn_taking import TurnTaking
from duplex.pipeline.echo import Cleaning
from duplex.pipeline.state import StateHandle
from duplex.pipeline.stream import ChunkEvent
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
        ears: Ears = DEAF,
        tools: bool = True,
        can_duck: bool = True,
        input_idle_s: float = INPUT_IDLE_S,
        cleaning: Cleaning | None = None,
    ) -> None:
        self.id = session_id
        self.tools = tools
        """Whether the thinker calls function tools."""
        self.limits = limits or SessionLimits()
        self.voice_activity = voice_activity
        self.conversation = Conversation()
        self.clock = SessionClock(now, idle_s=input_idle_s)
        self._n = 0
        self.ctx = SessionContext(
            session_id,
            self.new_id,
            self.clock,
            settings or SessionSettings(),
            self.limits,
            self.conversation,
            can_duck,
            check_voice,
        )
        self.replies = Replies(self.ctx, StateHandle(session_id, backend[0], backend[1]))
        self.intake = Intake(self.clock, self.limits, voice_activity, now, ears, cleaning)
        self.intake.listen(self.ctx.settings)
        self.intake.clean(self.ctx.settings)
        self.replies.taping = self.cancels_echo
        self.turn_taking = TurnTaking(self.ctx, self.replies, self.intake)

    @property
    def settings(self) -> SessionSettings:
        return self.ctx.settings

    @property
    def input_samples(self) -> int:
        """Input samples heard: the session's input clock."""
        return self.intake.samples

    def new_id(self, prefix: str) -> str:
        """A fresh id; never one a client has already given an item."""
        while True:
            self._n += 1
            candidate = f"{prefix}_{self.id[-8:]}{self._n:05d}"
            if not self.conversation.taken(candidate):
                return candidate

    def ms(self, samples: int) -> int:
        """Input samples as milliseconds on the wire."""
        return self.ctx.ms(samples)

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

    def is_activity(self, event: ClientEvent, now: float) -> bool:
        """Whether ``event`` shows the client is using the session (for its idle timeout):
        a playback acknowledgement with no reply being heard is only a keepalive."""
        return event.type != "playback.ack" or self.replies.being_heard(now) is not None

    def on_disconnect(self) -> Output:
        """The client went away: stop whatever is running."""
        return list(self.replies.disconnect())

    # -- session -------------------------------------------------------------
    def _on_session_update(self, data: Data, now: float) -> Output:
        instructions = data["session"].get("instructions")
        if isinstance(instructions, str) and len(instructions) > self.limits.max_item_chars:
            raise ProtocolError(
                "invalid_value",
                f"session.instructions holds {len(instructions)} characters; at most {self.limits.max_item_chars}",
                param="session.instructions",
            )
        body, refused = self._usable_tools(data["session"], data.get("event_id"))
        before = self.settings
        self.ctx.settings = apply_update(
            before, body, check_voice=self.ctx.check_voice, audio_started=self.intake.received
        )
        ended: Output = []
        if (before.turn_detection, before.input_rate) != (self.settings.turn_detection, self.settings.input_rate):
            ended = self.turn_taking.on_signals(self.intake.listen(self.settings), now)
        self.intake.clean(self.settings)
        self.replies.taping = self.cancels_echo
        read: Output = []
        if (before.instructions, before.tools, before.tool_choice) != (
            self.settings.instructions,
            self.settings.tools,
            self.settings.tool_choice,
        ):
            read = self.turn_taking.prefill("")  # what every reply will start with: the thinker may read it now
        return [SessionUpdated(self.id, self.settings), *refused, *ended, *read]

    def _usable_tools(self, body: Data, event_id: str | None) -> tuple[Data, list[ServerEvent]]:
        """The update without the tools this server cannot run, and the errors that say
        so. Not fatal to the rest of the update: an agent's instructions and voice must
        not be lost for want of a tool."""
        if "tools" not in body:
            return body, []
        functions, others = function_tools(body["tools"])
        refused: list[ServerEvent] = []
        if others:
            message = f"tools of type {sorted(set(others))} are not run by this server; the function tools apply"
            refused.append(
                Error(ProtocolError("unsupported_tool_type", message, param="session.tools", event_id=event_id))
            )
        if functions and not self.tools:
            message = (
                "this server's thinker does not call tools: session.tools is ignored; the rest of the update applies"
            )
            refused.append(Error(ProtocolError("tools_unsupported", message, param="session.tools", event_id=event_id)))
            functions = []
        if refused:
            body = {**body, "tools": functions}
            if not functions:
                body.pop("tool_choice", None)
        return body, refused

    def _on_session_sync(self, data: Data, now: float) -> Output:
        # A client that syncs steps its own input clock (a replay, maybe faster
        # than real time): from now on only its input moves session time.
        self.clock.use_input_only(now)
        return [Sync(data.get("event_id"))]

    def synced(self, event_id: str | None) -> list[ServerEvent]:
        """The answer to ``session.sync``: where the input clock stands."""
        return [SessionSynced(event_id, self.input_samples, self.ms(self.input_samples))]

    # -- input audio ---------------------------------------------------------
    # In three steps (see intake.py), so the edge can hear a large chunk in slices.
    def audio_of(self, message: ClientEvent | bytes) -> bytes:
        """The PCM16 an append event or a binary frame carries (raises ProtocolError)."""
        return self.intake.audio_of(message, self.settings)

    def seconds_of(self, raw: bytes) -> float:
        """How long ``raw`` PCM16 lasts at the session's input rate."""
        return len(raw) / 2 / self.settings.input_rate

    def accept_audio(self, raw: bytes, now: float) -> None:
        """Admit microphone audio under the session's limits, whole or not at all."""
        self.intake.accept(raw, self.settings.input_rate, now)

    @property
    def cancels_echo(self) -> bool:
        """Whether the microphone's echo of the replies is cancelled."""
        return self.intake.cleaner is not None and self.intake.cleaner.echo

    def hear(self, raw: bytes, now: float) -> Output:
        """Accepted audio, in order (in slices if the edge likes)."""
        replying = self.replies.being_heard(now) is not None
        signals = self.intake.hear(raw, self.settings.input_rate, now, replying=replying, far=self.replies.far_end)
        out = self.turn_taking.on_signals(signals, now)
        return out + self.turn_taking.idle(now)

    def _on_input_audio_buffer_append(self, data: Data, now: float) -> Output:
        raw = self.audio_of(ClientEvent("input_audio_buffer.append", data))
        self.accept_audio(raw, now)
        return self.hear(raw, now)

    def feed_binary(self, raw: bytes, now: float) -> Output:
        """A binary frame: raw PCM16 microphone audio, when the session allows it."""
        try:
            pcm = self.audio_of(raw)
            self.accept_audio(pcm, now)
        except ProtocolError as err:
            return [Error(err)]
        return self.hear(pcm, now)

    def _on_input_audio_buffer_commit(self, data: Data, now: float) -> Output:
        waiting = len(self.turn_taking.transcribing)
        if waiting >= self.limits.max_pending_transcriptions:
            raise ProtocolError(
                "transcription_backlog",
                f"{waiting} turns are still being transcribed; the audio stays in the buffer: "
                "commit again when one is done",
            )
        audio = self.intake.take()
        if audio.size == 0:
            raise ProtocolError("input_audio_buffer_commit_empty", "the input audio buffer is empty")
        return self.turn_taking.commit(audio, now=now)

    def _on_input_audio_buffer_clear(self, data: Data, now: float) -> Output:
        ended = self.turn_taking.on_signals(self.intake.clear(), now)
        return [*ended, BufferCleared(), *self.turn_taking.cleared()]

    def on_transcript(self, heard: Heard, now: float) -> Output:
        """A :class:`Transcribe`'s answer (see :meth:`TurnTaking.on_transcript`)."""
        return self.turn_taking.on_transcript(heard, now)

    def on_turn_probability(self, speech_end: int, probability: float, now: float) -> Output:
        """The end-of-turn model's answer to a :class:`PredictTurn`."""
        return self.turn_taking.on_turn_probability(speech_end, probability, now)

    def _on_playback_ack(self, data: Data, now: float) -> Output:
        played, stamped = data["played_samples"], data["input_samples"]
        if played < 0 or stamped < 0:
            raise ProtocolError("invalid_value", "played_samples and input_samples must be >= 0")
        # Stamped no later than the input received: an ack "from the future" would stand for
        # playback until then and freeze the reply meanwhile.
        self.replies.on_ack(data["response_id"], played, min(stamped, self.input_samples))
        return []

    # -- conversation --------------------------------------------------------
    def _on_conversation_item_create(self, data: Data, now: float) -> Output:
        lim = self.limits
        item = parse_item(data["item"], self.new_id("item"), max_chars=lim.max_item_chars)
        conv = self.conversation
        if len(conv) >= lim.max_items or conv.chars + item.chars > lim.max_conversation_chars:
            raise ProtocolError(
                "conversation_full",
                f"the conversation holds {len(conv)} items and {conv.chars} characters (at most {lim.max_items} "
                f"and {lim.max_conversation_chars}); delete items to add more",
                param="item",
            )
        prev = conv.add(item, data.get("previous_item_id"))
        return list(added(item, prev))

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
        if end_ms < 0:
            raise ProtocolError("invalid_value", "audio_end_ms must be >= 0", param="audio_end_ms")
        if item.truncated_ms is not None:
            # Cut already (the server's barge-in, on the input clock, usually beats a client's
            # own truncate, on its wall clock): the item keeps one cut, the earlier of the two.
            if end_ms < item.truncated_ms:
                item.truncate(end_ms)
                self.conversation.recount(item)
            return [ItemTruncated(item.id, 0, item.truncated_ms or 0)]
        if end_ms > item.audio_ms:
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
        if opts.get("tools") and not self.tools:
            raise ProtocolError(
                "tools_unsupported", "this server's thinker does not call tools", param="response.tools"
            )
        options = self.ctx.options(opts)
        items = None
        if "input" in opts:  # a context of its own: the given items (or references to the conversation's)
            if not isinstance(opts["input"], list) or not all(isinstance(x, dict) for x in opts["input"]):
                raise ProtocolError("invalid_type", "response.input must be an array of items", param="response.input")
            items = [
                self.conversation.get(x.get("id", ""))
                if x.get("type") == "item_reference"
                else parse_item(x, f"input_{i}", max_chars=self.limits.max_item_chars)
                for i, x in enumerate(opts["input"])
            ]
        return list(self.replies.begin(self.ctx.messages(items, options.instructions), options, now))

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

    def on_output(self, event: ChunkEvent, now: float) -> Delivery:
        """Audio (and the transcript it speaks) for one pipeline chunk, and whether its
        reply is still current (see :class:`Delivery`)."""
        return self.replies.on_output(event, now)

    def still_wanted(self, action: Transcribe | PredictTurn) -> bool:
        """Whether a queued recognition or end-of-turn question is still of use when its
        turn to run comes (speech that went on since can make it moot)."""
        return self.turn_taking.still_wanted(action)

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
