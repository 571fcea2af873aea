"""The session's replies: their events, playback, pause, cancel and truncation.

Sans-I/O like the session they belong to: methods return typed server events and
actions; time comes in as arguments. The reply side sees only a narrow
:class:`SessionContext` of its session (ids, the clock, the settings in force, its
limits and the conversation). A reply is *running* (the session's ``active`` one)
from ``response.created`` to ``response.done``, and *playing out* until the client
has played everything it was sent, which with pacing is up to the lead later. A
barge-in can land in either: a running reply is cancelled and cut, a reply playing
out is cut. Its phases and their moves are data (:mod:`~duplex.app.core.reply_state`).
A reply's output is its message (audio or text) and any function calls the thinker
makes, each an output item in order.

Why this module is long: one reply's lifecycle (its output items, playback, pause
and truncation) reads as one state machine; split, each half would reach into the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from duplex.app.core.actions import STALE, CancelReply, Delivery, PrepareReply, ReplyPlan, StartReply
from duplex.app.core.conversation import Item, Part
from duplex.app.core.echo_reference import Tape, far_end
from duplex.app.core.events import (
    AudioDelta,
    AudioDone,
    AudioDucked,
    AudioPaused,
    AudioResumed,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    ContentPartAdded,
    ContentPartDone,
    ContentRef,
    Error,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    ItemAdded,
    ItemDone,
    ItemTruncated,
    OutputItemAdded,
    OutputItemDone,
    ResponseCreated,
    ResponseDone,
    ResponseView,
    ServerEvent,
    TextDelta,
    TextDone,
)
from duplex.app.core.pacing import Playout
from duplex.app.core.protocol import ProtocolError
from duplex.app.core.reply_state import AUDIBLE, DUCKED, MOVES, PAUSED, RUNNING, ReplyEvent, ReplyPhase
from duplex.app.core.session_context import SessionContext
from duplex.app.core.settings import ResponseOptions
from duplex.app.core.units import samples_to_ms
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.state import StateHandle
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.thinker import Message
from duplex.pipeline.tools import ToolCallDelta, calls_allowed

Output = list[ServerEvent | StartReply | CancelReply]


@dataclass(slots=True)
class Reply:
    """One reply as the session sees it."""

    id: str
    item: Item
    epoch: int
    modalities: tuple[str, ...]
    text: str
    voice: str
    playout: Playout
    started: float
    transcript_sent: int = 0
    first_audio: float | None = None
    phase: ReplyPhase = ReplyPhase.THINKING
    deltas: int = 0
    """Audio deltas sent: their ``seq`` on the wire (gap-free per reply)."""
    metadata: dict[str, str] | None = None
    outputs: list[Item] = field(default_factory=list)
    """The response's output items in order: its message once announced, its function calls."""
    calls: dict[int, Item] = field(default_factory=dict)
    """Function calls by the thinker's call index."""
    out_of_band: bool = False
    """Its items stay out of the conversation (``conversation: "none"``)."""
    tape: Tape = field(default_factory=Tape)
    """Its audio sent and not yet played (while the session cancels echo)."""

    def move(self, event: ReplyEvent) -> None:
        """Take ``event`` (one of :data:`~duplex.app.core.reply_state.MOVES`, or it raises)."""
        self.phase = MOVES.move(self.phase, event)

    @property
    def running(self) -> bool:
        """From ``response.created`` to ``response.done``."""
        return self.phase in RUNNING

    @property
    def ducked(self) -> bool:
        """Playing on, quieter, while speech over it is judged."""
        return self.phase in DUCKED

    @property
    def announced(self) -> bool:
        """Whether the message item has been announced (with tools in play it waits for
        the first text or audio: a reply that only calls a function has no message)."""
        return self.item in self.outputs

    @property
    def ref(self) -> ContentRef:
        return ContentRef(self.id, self.item.id, self.outputs.index(self.item) if self.announced else 0)

    @property
    def audio(self) -> bool:
        return "audio" in self.modalities


class Replies:
    """Begins, streams, pauses, resumes, cancels and truncates a session's replies."""

    def __init__(self, ctx: SessionContext, state: StateHandle) -> None:
        self.ctx = ctx
        self.state = state
        """The session's handle on backend state; its epoch moves on with every cancel."""
        self.latest: Reply | None = None
        self.playing: Reply | None = None
        """The latest reply with audio (it may still be playing, or be heard, or cut)."""
        self.taping = False
        """Whether replies keep their audio until played (the echo canceller's far end)."""
        self.epoch = 0
        """The session's epoch: the one counter, moved on by every reply and every prepared
        reply (each runs in its own, and a cancel retires it); the state handle records
        the first live one."""

    @property
    def active(self) -> Reply | None:
        """The reply running now, if any (one at a time)."""
        r = self.latest
        return r if r is not None and r.running else None

    def _t(self, now: float) -> float:
        return self.ctx.clock.now(now)

    # -- lifecycle -------------------------------------------------------------
    def begin(
        self, messages: tuple[Message, ...], options: ResponseOptions, now: float, *, said: str | None = None
    ) -> Output:
        """``response.created`` and friends, then the pipeline: the thinker answers the
        conversation (or the reply is ``said``, the thinker not asked) and, for audio, the
        talker speaks what it says."""
        ctx, settings = self.ctx, self.ctx.settings
        self.epoch += 1
        audio = "audio" in options.modalities
        item = Item(
            ctx.new_id("item"), "assistant", [], status="in_progress", audio_rate=settings.output_rate if audio else 0
        )
        item.content.append(Part("output_audio", "") if audio else Part("output_text", ""))
        rid = ctx.new_id("resp")
        playout = Playout(settings.output_rate, settings.pacing.lead_ms / 1000)
        r = Reply(rid, item, self.epoch, options.modalities, "", options.voice, playout, now, metadata=options.metadata)
        r.out_of_band = options.out_of_band
        if not r.out_of_band:  # its item is announced with its first output: hold the id till then
            ctx.conversation.promise(item.id)
        self.latest = r
        if audio:
            self.playing = r
        out: Output = [ResponseCreated(self._view(r, "in_progress"))]
        if not calls_allowed(options.tools, options.tool_choice):
            out += self._announce(r)  # at once, as ever: only a reply that may call a function waits
        out.append(StartReply(rid, r.epoch, replace(self.plan(messages, options), said=said)))
        return out

    def plan(self, messages: tuple[Message, ...], options: ResponseOptions) -> ReplyPlan:
        """What a reply to ``messages`` with ``options`` is, under the settings in force:
        the one place a reply is defined (begun, or prepared ahead of its turn)."""
        settings = self.ctx.settings
        return ReplyPlan(
            messages,
            options.voice,
            settings.speed,
            settings.output_rate,
            "audio" in options.modalities,
            options.tools,
            options.tool_choice,
            self.state,
            options.max_output_tokens if isinstance(options.max_output_tokens, int) else None,
            options.temperature,
        )

    def make_room(self, item: Item) -> list[ServerEvent]:
        """Room for one of the server's own items (they never fail for want of it: the
        oldest go instead, never ``item`` or the running reply's)."""
        keep = {item.id} | ({self.active.item.id} if self.active else set())
        lim = self.ctx.limits
        return list(self.ctx.conversation.make_room(lim.max_items, lim.max_conversation_chars, keep))

    def _add(self, r: Reply, item: Item) -> list[ServerEvent]:
        """Put one of the reply's output items into the conversation and the response."""
        r.outputs.append(item)
        added = OutputItemAdded(r.id, len(r.outputs) - 1, item.view())
        if r.out_of_band:
            return [added]
        conversation, lim = self.ctx.conversation, self.ctx.limits
        prev = conversation.add(item, promised=True)
        room = conversation.make_room(lim.max_items, lim.max_conversation_chars, {i.id for i in r.outputs})
        return [*room, added, ItemAdded(prev, item.view())]

    def _announce(self, r: Reply) -> list[ServerEvent]:
        """The reply's message item and its content part."""
        part = r.item.content[0]
        r.move(ReplyEvent.ANNOUNCE)
        return [*self._add(r, r.item), ContentPartAdded(r.ref, part.view())]

    def _on_call(self, r: Reply, delta: ToolCallDelta) -> list[ServerEvent]:
        """A piece of a function call: its item when it begins, then its arguments."""
        out: list[ServerEvent] = []
        item = r.calls.get(delta.index)
        if item is None:
            iid = self.ctx.new_id("item")
            item = Item(iid, "assistant", [], "in_progress", "function_call", call_id=delta.call_id, name=delta.name)
            r.calls[delta.index] = item
            out += self._add(r, item)
        if delta.arguments:
            item.arguments += delta.arguments
            out.append(FunctionCallArgumentsDelta(r.id, item.id, r.outputs.index(item), item.call_id, delta.arguments))
        return out

    def _view(
        self, r: Reply, status: str, details: dict[str, Any] | None = None, timings: dict[str, float] | None = None
    ) -> ResponseView:
        return ResponseView(
            r.id,
            status,
            details,
            tuple(i.view() for i in r.outputs),
            None if r.out_of_band else self.ctx.session_id,
            r.modalities,
            self.ctx.settings.output_rate,
            r.voice,
            timings,
            r.metadata,
            self.ctx.settings.output_format,
        )

    def finish(
        self, r: Reply, status: str, details: dict[str, Any] | None = None, timings: dict[str, float] | None = None
    ) -> list[ServerEvent]:
        """Close the reply's content, item and response, once."""
        out: list[ServerEvent] = []
        if not r.announced and not r.calls:
            out += self._announce(r)  # a reply that said nothing still has its (empty) message
        r.move(ReplyEvent.END if r.audio and r.announced else ReplyEvent.END_SILENT)
        self.ctx.conversation.release(r.item.id)  # a reply of function calls alone has none
        done = "completed" if status == "completed" else "incomplete"
        conversation = self.ctx.conversation
        for index, item in enumerate(r.outputs):
            item.status = done
            if item is r.item:
                out += self._close_message(r, status)
            else:
                out.append(FunctionCallArgumentsDone(r.id, item.id, index, item.call_id, item.name, item.arguments))
            out.append(OutputItemDone(r.id, index, item.view()))
            if not r.out_of_band and item.id in conversation:
                out.append(ItemDone(conversation.previous(item), item.view()))
        if r.first_audio is not None:
            timings = {**(timings or {}), "first_audio": round((r.first_audio - r.started) * 1000, 2)}
        return [*out, ResponseDone(self._view(r, status, details, timings))]

    def _close_message(self, r: Reply, status: str) -> list[ServerEvent]:
        part = r.item.content[0]
        out: list[ServerEvent] = []
        if part.audio:
            if status == "completed":
                part.text = r.text
            elif r.item.truncated_ms is None:  # (a truncated item keeps the words heard)
                part.text = r.text[: r.transcript_sent]
            self.ctx.conversation.recount(r.item)
            out += [AudioDone(r.ref), AudioTranscriptDone(r.ref, part.text or "")]
        else:
            out.append(TextDone(r.ref, part.text or ""))
        return [*out, ContentPartDone(r.ref, part.view())]

    def cancel(self, r: Reply, reason: str) -> Output:
        """Retire the reply's epoch and end it as cancelled."""
        self.state = self.state.after(r.epoch)
        details = {"type": "cancelled", "reason": reason}
        return [CancelReply(r.id, r.epoch, reason), *self.finish(r, "cancelled", details)]

    def disconnect(self) -> Output:
        """The client went away: stop the running reply, tell nobody."""
        r = self.active
        if r is None:
            return []
        r.move(ReplyEvent.END_SILENT)
        return [CancelReply(r.id, r.epoch, "client_disconnected")]

    # -- pipeline side -----------------------------------------------------------
    def current(self, event: ChunkEvent) -> bool:
        """Whether ``event`` belongs to the active reply (else it is stale: dropped)."""
        r = self.active
        return r is not None and event.epoch == r.epoch and event.request_id == r.id

    def output_wait(self, samples: int, now: float) -> float:
        """Wall seconds before ``samples`` more of the active reply may go out (0: now)."""
        r = self.active
        if r is None or not self.ctx.settings.pacing.enabled:
            return 0.0
        need = r.playout.seconds_until(samples, self._t(now))
        if need == 0.0 or need == float("inf"):
            return need
        # While the client streams, only its input moves session time: re-check.
        clock = self.ctx.clock
        return min(need, clock.idle_s) if clock.streaming(now) else need

    def on_output(self, event: ChunkEvent, now: float) -> Delivery:
        """Audio and the transcript it speaks for one pipeline chunk; nothing if stale
        (the one place a chunk's currency is decided)."""
        r = self.active
        if r is None or not self.current(event):
            return STALE
        return Delivery(self._output(r, event, now), goes_on=self.active is r)

    def _output(self, r: Reply, event: ChunkEvent, now: float) -> list[ServerEvent]:
        chunk: OutputChunk = event.payload
        if chunk.call is not None:
            return self._on_call(r, chunk.call)
        out: list[ServerEvent] = []
        if not r.announced and (chunk.text or chunk.audio.length or chunk.words):
            out += self._announce(r)
        if chunk.text:  # the thinker's text arrives with the audio that says it
            if len(r.text) + len(chunk.text) > self.ctx.limits.max_reply_chars:
                # As long as a reply may be: end it like a length limit (the edge stops the pipeline).
                return self.finish(r, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"})
            r.text += chunk.text
            r.item.full_text = r.text
            if not r.audio:
                r.item.content[0].text = r.text
                out.append(TextDelta(r.ref, chunk.text))
            self.ctx.conversation.recount(r.item)
        n = chunk.audio.length
        if n:
            if r.first_audio is None:
                r.first_audio = now
            start_ms = chunk.start * 1000 // int(chunk.audio.rate)
            out.append(AudioDelta(r.ref, r.epoch, r.deltas, event.input_watermark, start_ms, chunk.audio.to_bytes()))
            r.playout.on_sent(n, self._t(now))
            if self.taping:
                r.tape.append(chunk.audio.data)
            r.item.audio_samples += n
            r.deltas += 1
            settings = self.ctx.settings
            if r.item.audio_samples >= self.ctx.limits.max_reply_s * settings.output_rate:
                # Long enough: end it like a length limit (the edge stops the pipeline).
                return out + self.finish(r, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"})
        if chunk.words:
            r.item.words.extend(chunk.words)
            upto = max(w.end for w in chunk.words)
            if upto > r.transcript_sent:
                out.append(AudioTranscriptDelta(r.ref, r.text[r.transcript_sent : upto]))
                r.transcript_sent = upto
        return out

    def on_finished(self, response_id: str, timings: dict[str, float] | None = None) -> list[ServerEvent]:
        """The pipeline delivered the whole reply."""
        r = self.active
        if r is None or r.id != response_id:
            return []
        out: list[ServerEvent] = []
        if r.audio and r.transcript_sent < len(r.text):
            out.append(AudioTranscriptDelta(r.ref, r.text[r.transcript_sent :]))
            r.transcript_sent = len(r.text)
        return out + self.finish(r, "completed", timings=timings)

    def on_failed(self, response_id: str, message: str) -> list[ServerEvent]:
        """The pipeline failed mid-reply: say so, and end the reply as failed."""
        r = self.active
        if r is None or r.id != response_id:
            return []
        err = ProtocolError("reply_failed", f"the reply failed: {message}", error_type="server_error")
        details = {"type": "failed", "error": {"type": "server_error", "code": "reply_failed", "message": message}}
        return [Error(err), *self.finish(r, "failed", details)]

    def on_ack(self, response_id: str, played: int, input_samples: int) -> None:
        """The client had played ``played`` samples of a reply at input sample ``input_samples``."""
        r = self.playing
        if r is not None and r.id == response_id:
            r.playout.on_ack(played, self.ctx.clock.time_of_input(input_samples, self.ctx.settings.input_rate))

    def far_end(self, t0: float, t1: float, n: int) -> np.ndarray | None:
        """What the client played over ``n`` input samples at session times ``t0..t1``
        (the echo canceller's reference), or None if nothing."""
        r = self.playing
        if r is None or r.phase not in AUDIBLE:
            return None
        td = self.ctx.settings.turn_detection
        gain = 10 ** (td.duck_db / 20) if r.ducked and td is not None and td.duck_db is not None else 1.0
        return far_end(r.tape, r.playout, t0, t1, n, self.ctx.settings.input_rate, gain)

    # -- barge-in ----------------------------------------------------------------
    def being_heard(self, now: float) -> Reply | None:
        """The reply the user hears (or is about to) now, if any."""
        r = self.playing
        if r is None or r.running:
            return r  # (thinking, too: speech over it is judged, and a turn cancels it)
        if r.phase not in AUDIBLE:
            return None
        if not r.playout.finished(self._t(now)):
            return r
        if r.phase is ReplyPhase.PLAYING_OUT:
            r.move(ReplyEvent.PLAYED)
        return None

    def prepare(self, messages: tuple[Message, ...], options: ResponseOptions) -> PrepareReply:
        """What :meth:`begin` would start for ``messages``, to start it before the turn
        is confirmed (the edge adopts it if :meth:`begin` then asks for the same)."""
        self.epoch += 1
        return PrepareReply(self.plan(messages, options), self.epoch)

    def pause(self, onset: int, input_samples: int, now: float) -> list[ServerEvent]:
        """Speech began at input sample ``onset`` (decided at ``input_samples``): duck the
        reply (it plays on, quieter) or, with ducking off, stop its output now."""
        r = self.being_heard(now)
        if r is None or r.phase not in (ReplyPhase.SPEAKING, ReplyPhase.PLAYING_OUT):
            return []  # already ducked or paused (or still deciding whether to speak or call)
        td = self.ctx.settings.turn_detection
        duck_db = td.duck_db if td is not None and self.ctx.can_duck else None
        after = samples_to_ms(input_samples - onset, self.ctx.settings.input_rate)  # how late this was decided
        if duck_db is not None:
            r.move(ReplyEvent.DUCK)
            return [AudioDucked(r.ref, r.epoch, self._played_ms(r, onset), after, duck_db)]
        r.move(ReplyEvent.PAUSE)
        r.playout.pause(self._t(now))
        return [AudioPaused(r.ref, r.epoch, self._played_ms(r, onset), after)]

    def hold(self, onset: int, input_samples: int, now: float) -> list[ServerEvent]:
        """The speech that began at input sample ``onset`` goes on, not heard as a
        backchannel: a ducked reply stops its output now (:meth:`resume` carries it on)."""
        r = self.being_heard(now)
        if r is None or r.phase not in DUCKED:
            return []  # paused already (ducking off), or no longer heard
        after = samples_to_ms(input_samples - onset, self.ctx.settings.input_rate)
        r.move(ReplyEvent.PAUSE)
        r.playout.pause(self._t(now))
        return [AudioPaused(r.ref, r.epoch, self._played_ms(r, onset), after)]

    def resume(self, now: float) -> list[ServerEvent]:
        """The speech was not a turn: the reply plays on as before."""
        r = self.playing
        if r is None or r.phase not in DUCKED | PAUSED:
            return []
        if r.phase in PAUSED:
            r.playout.resume(self._t(now))
        r.move(ReplyEvent.RESUME)
        return [AudioResumed(r.ref, r.epoch)]

    def _played_ms(self, r: Reply, onset: int) -> int:
        t = self.ctx.clock.time_of_input(onset, self.ctx.settings.input_rate)
        return r.playout.played(t) * 1000 // r.playout.rate

    def interrupt(self, onset: int, now: float) -> Output:
        """The user took the turn at input sample ``onset``: cancel the reply if it is
        still running and truncate it at what had been played by then."""
        r = self.playing
        if r is None:
            return []
        if r.phase is ReplyPhase.THINKING:  # (it may call a function): nothing was heard
            return self.cancel(r, "turn_detected")
        if r.phase is ReplyPhase.PLAYING_OUT and r.playout.finished(self._t(now)):
            r.move(ReplyEvent.PLAYED)
        if r.phase not in AUDIBLE:
            return []  # heard in full before the user spoke, or over already
        # Cut before the cancel, so that its response.done already reports what was heard.
        end_ms = min(self._played_ms(r, onset), r.item.audio_ms)
        r.item.truncate(end_ms)
        self.ctx.conversation.recount(r.item)
        out: Output = self.cancel(r, "turn_detected") if r.running else []
        r.move(ReplyEvent.CUT)
        out.append(ItemTruncated(r.item.id, 0, end_ms))
        return out

    def truncate(self, item: Item, end_ms: int) -> Output:
        """The client truncated ``item`` at ``end_ms``; on the live reply that ends it."""
        item.truncate(end_ms)  # first, as on a barge-in: response.done reports what was heard
        self.ctx.conversation.recount(item)
        out: Output = []
        r = self.active
        if r is not None and r.item is item:
            out += self.cancel(r, "client_cancelled")  # the client stopped playing the live reply: it is over
        p = self.playing
        if p is not None and p.item is item and MOVES.allows(p.phase, ReplyEvent.CUT):
            p.move(ReplyEvent.CUT)
        out.append(ItemTruncated(item.id, 0, end_ms))
        return out
