"""Taking turns (sans-I/O): from what the listener hears to committed turns, their
transcripts and the replies they start.

The listener's :mod:`~duplex.app.core.listening.signals` become server events (speech
started and stopped, a reply ducked, resumed or interrupted), recognition work
(partial transcripts while the user speaks, a candidate of the whole turn at each
pause, the final one at commit) and end-of-turn questions; their answers come back
here. A turn that ends at the pause its candidate was made for takes that
transcript (ready, or on its way), and when the candidate comes while the turn is
still undecided, the reply it would get is prepared unheard.
"""

from __future__ import annotations

from enum import Enum
from typing import assert_never

import numpy as np

from duplex.app.core.actions import Action, DropPrepared, Heard, PredictTurn, Prefill, Transcribe
from duplex.app.core.conversation import Item, Part, added
from duplex.app.core.events import (
    BufferCommitted,
    BufferTimeoutTriggered,
    ServerEvent,
    SpeechStarted,
    SpeechStopped,
    TranscriptionCompleted,
    TranscriptionDelta,
    TranscriptionFailed,
)
from duplex.app.core.intake import Intake
from duplex.app.core.listening import (
    AskTurn,
    Continued,
    Duck,
    Hold,
    Interrupt,
    Partial,
    Resume,
    Signal,
    SpeechPaused,
    Started,
    Stopped,
    Turn,
)
from duplex.app.core.replies import Replies
from duplex.app.core.session_context import SessionContext
from duplex.app.core.states import Table
from duplex.app.core.transcripts import Candidate, Transcripts, capitalized
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.recognizer import only_command
from duplex.pipeline.thinker import NOT_UNDERSTOOD

Output = list[ServerEvent | Action]


class Prepared(Enum):
    """The reply prepared for a pause (:class:`PrepareReply`), as the session knows it."""

    NONE = "none"
    """None prepared, or the last one confirmed or voided."""
    MADE = "made"
    """Prepared for the current pause and still running unheard at the edge."""


class PreparedEvent(Enum):
    """What happens to a prepared reply."""

    PREPARE = "prepare"
    """A candidate came while the turn may well be over: prepare its reply (one made for an
    earlier pause is replaced: the edge keeps the newest only)."""
    CONFIRM = "confirm"
    """The turn ended: its reply begins (the edge adopts the prepared one if the plans match)."""
    VOID = "void"
    """The user went on, cleared the buffer, or said a command: nothing of it will be heard."""


_P, _PE = Prepared, PreparedEvent
PREPARED_MOVES: Table[Prepared, PreparedEvent] = Table(
    "prepared reply",
    {
        (_P.NONE, _PE.PREPARE): _P.MADE,
        (_P.MADE, _PE.PREPARE): _P.MADE,  # replaced
        **{(state, _PE.CONFIRM): _P.NONE for state in Prepared},
        **{(state, _PE.VOID): _P.NONE for state in Prepared},  # DropPrepared from MADE only
    },
)
"""The prepared reply's moves (voided from MADE, the edge is told to drop it)."""


class TurnTaking:
    """One session's turns: speech items, transcripts, and the replies they start."""

    def __init__(self, ctx: SessionContext, replies: Replies, intake: Intake) -> None:
        self.ctx = ctx
        self.replies = replies
        self.intake = intake
        self.speech_item: str | None = None
        """The item id ``speech_started`` announced for the speech in progress."""
        self.transcribing: set[str] = set()
        """Committed turns waiting for their transcript."""
        self.transcripts = Transcripts()
        self.prepared = Prepared.NONE
        """Whether a reply was prepared for the current pause (see :data:`PREPARED_MOVES`)."""
        self._audio_ms: dict[str, int] = {}  # committed turns' audio, for their transcript's usage
        self._quiet_from = 0  # input sample since which nobody has spoken (for idle_timeout_ms)

    def on_signals(self, signals: list[Signal], now: float) -> Output:
        """What the listener's signals mean for the session, in order."""
        out: Output = []
        for sig in signals:
            out += self._on_signal(sig, now)
        return out

    def _on_signal(self, sig: Signal, now: float) -> Output:
        ctx, item, rate = self.ctx, self.speech_item, self.ctx.settings.input_rate
        match sig:
            case Started():
                self.transcripts.forget(item)
                self.speech_item = ctx.new_id("item")
                return [SpeechStarted(ctx.ms(sig.audio_start), self.speech_item)]
            case Duck():
                return list(self.replies.pause(sig.onset, self.intake.samples, now))
            case Hold():
                return list(self.replies.hold(sig.onset, self.intake.samples, now))
            case Resume():
                return list(self.replies.resume(now))
            case Interrupt():
                return list(self.replies.interrupt(sig.onset, now))
            case Stopped():
                return [SpeechStopped(ctx.ms(sig.audio_end), item)]
            case Turn():
                return self.commit(sig.audio, item, now=now, span=(sig.audio_start, sig.heard_end))
            case Partial() | SpeechPaused() | AskTurn() | Continued() if item is None:
                return []  # (no speech announced: listening began mid-speech)
            case Partial():
                assert item is not None
                return [Transcribe(item, sig.audio, rate, "partial", sig.upto, urgent=sig.judging)]
            case SpeechPaused():
                assert item is not None
                self.transcripts.paused(item, sig.start, sig.upto, sig.speech_end)
                return [Transcribe(item, sig.audio, rate, "candidate", sig.upto)]
            case AskTurn():
                return [PredictTurn(sig.audio, rate, sig.speech_end)]
            case Continued():
                self.transcripts.candidate = None
                return self._drop_prepared()
            case _:
                assert_never(sig)

    def idle(self, now: float) -> Output:
        """``idle_timeout_ms`` of input with nobody speaking since the last reply was heard:
        say so, commit the silence as the user's (empty) turn and answer it."""
        ctx, samples = self.ctx, self.intake.samples
        td, listener = ctx.settings.turn_detection, self.intake.listener
        busy = (
            listener is None
            or listener.in_speech
            or self.replies.active is not None
            or self.replies.being_heard(now) is not None
            or bool(self.transcribing)
        )
        if td is None or td.idle_timeout_ms is None or busy:
            self._quiet_from = samples
            return []
        if samples - self._quiet_from < ms_to_samples(td.idle_timeout_ms, ctx.settings.input_rate):
            return []
        start, self._quiet_from = self._quiet_from, samples
        item = Item(ctx.new_id("item"), "user", [Part("input_audio", "")])
        prev = ctx.conversation.add(item)
        out: Output = [
            BufferTimeoutTriggered(ctx.ms(start), ctx.ms(samples), item.id),
            BufferCommitted(prev, item.id),
            *added(item, prev),
            *self.replies.make_room(item),
        ]
        if td.create_response:
            out += self.replies.begin(ctx.messages(), ctx.options(), now)
        return out

    def commit(
        self, audio: np.ndarray, item_id: str | None = None, *, now: float, span: tuple[int, int] | None = None
    ) -> Output:
        """Commit ``audio`` as the user's item (the speech's own id if still free) and have
        it transcribed, unless the pause that ended it was (``span``: its audio's span)."""
        ctx = self.ctx
        speech_item = item_id
        if item_id is None or item_id in ctx.conversation:  # a client may have taken it since speech began
            item_id = ctx.new_id("item")
        item = Item(item_id, "user", [Part("input_audio", None)])
        prev = ctx.conversation.add(item)
        out: Output = [BufferCommitted(prev, item.id), *added(item, prev), *self.replies.make_room(item)]
        self._audio_ms[item.id] = ctx.ms(int(audio.size))
        candidate = self.transcripts.committed(speech_item, span, item.id, now) if span is not None else None
        if candidate is not None:  # transcribed already (or being transcribed) at the pause that ended the turn
            if candidate.arrived:
                return out + self._transcribed(item.id, candidate.text or "", now, 0.0, candidate.failure)
            self.transcribing.add(item.id)
            return out
        if len(self.transcribing) >= ctx.limits.max_pending_transcriptions:
            # Turns come faster than they can be heard: this one is not queued behind the others.
            backlog = f"not transcribed: {len(self.transcribing)} earlier turns are still waiting"
            return out + self._transcribed(item.id, "", now, failure=backlog)
        self.transcribing.add(item.id)
        return [*out, Transcribe(item.id, audio, ctx.settings.input_rate)]

    def on_transcript(self, heard: Heard, now: float) -> Output:
        """What the recogniser heard for a :class:`Transcribe`: a final transcript
        completes its item (a failed one is heard as nothing and the turn goes on); a
        partial may add words to the speech's deltas; a candidate is kept for the turn,
        or completes the turn that ended at its pause. Every transcript begins with a capital
        (:func:`~duplex.app.core.transcripts.capitalized`)."""
        text, failure, listener = capitalized(heard.text), heard.failure, self.intake.listener
        match heard.kind:
            case "final":
                return self._transcribed(heard.item_id, text, now, heard.recognition_ms, failure)
            case "partial":
                if heard.item_id != self.speech_item or failure:
                    return []
                delta = self.transcripts.partial(heard.item_id, text)
                out: Output = [TranscriptionDelta(heard.item_id, 0, delta)] if delta else []
                if delta:
                    out += self.prefill(self.transcripts.words(heard.item_id))
                return out + self.on_signals(listener.on_partial(text, heard.upto), now) if listener else out
            case "candidate":
                done = self.transcripts.arrived(heard.item_id, heard.upto, text, failure)
                if done is None:
                    return []  # the speech went on: this pause was not the turn's end
                if not isinstance(done, Candidate):  # the turn ended at that pause and waited for this
                    return self._transcribed(done.item_id, text, now, (now - done.committed_at) * 1000, failure)
                signals = listener.on_candidate(done.speech_end, text) if listener and not failure else []
                out = self.on_signals(signals, now)
                if self.transcripts.candidate is done and text and not failure:
                    out += self._prepare(text)  # the turn may well end here: start its reply, unheard
                return out
            case _:
                assert_never(heard.kind)

    def on_turn_probability(self, speech_end: int, probability: float, now: float) -> Output:
        """The end-of-turn model's answer to a :class:`PredictTurn`."""
        listener = self.intake.listener
        return self.on_signals(listener.on_turn_probability(speech_end, probability), now) if listener else []

    def prefill(self, text: str) -> Output:
        """Let the thinker read the conversation ahead of the reply it will want, with
        ``text``, the words of the turn in progress so far, as the user's last (none:
        the conversation as it is)."""
        if self.replies.active is not None:
            return []
        said = text.strip()  # (a partial's words begin with a capital, as the turn's transcript will)
        user = ({"role": "user", "content": said},) if said else ()
        return [Prefill(self.replies.plan((*self.ctx.messages(), *user), self.ctx.options()))]

    def _prepare(self, text: str) -> Output:
        td = self.ctx.settings.turn_detection
        if td is None or not td.create_response or self.replies.active is not None or only_command(text):
            return []
        messages = (*self.ctx.messages(), {"role": "user", "content": text})
        self._prepare_move(PreparedEvent.PREPARE)
        return [self.replies.prepare(messages, self.ctx.options())]

    def still_wanted(self, action: Transcribe | PredictTurn) -> bool:
        """Whether a queued candidate transcription or end-of-turn question is still of use
        when its turn to run comes (speech that went on since makes it moot: only the
        latest pause matters), or a partial when its decoder's turn comes (the pause's
        candidate, asked for since, hears all it would). Turns always are."""
        if isinstance(action, PredictTurn):
            listener = self.intake.listener
            return listener is not None and listener.pausing_after(action.speech_end)
        if action.upto is None or action.kind == "final":
            return True
        if action.kind == "partial":
            return not self.transcripts.covers(action.item_id, action.upto)
        return self.transcripts.wanted(action.item_id, action.upto)

    def cleared(self) -> Output:
        """The input buffer was cleared: the pause's candidate and prepared reply go with it."""
        self.transcripts.candidate = None
        return self._drop_prepared()

    def _prepare_move(self, event: PreparedEvent) -> Prepared:
        was, self.prepared = self.prepared, PREPARED_MOVES.move(self.prepared, event)
        return was

    def _drop_prepared(self) -> Output:
        return [DropPrepared()] if self._prepare_move(PreparedEvent.VOID) is Prepared.MADE else []

    def _transcribed(
        self, item_id: str, text: str, now: float, recognition_ms: float | None = None, failure: str | None = None
    ) -> Output:
        """A committed item's transcript: completed (or failed), then its reply."""
        self.transcribing.discard(item_id)
        audio_ms = self._audio_ms.pop(item_id, 0)
        conversation = self.ctx.conversation
        if item_id not in conversation:
            return []  # deleted meanwhile
        item = conversation.get(item_id)
        item.content[0].text = text
        conversation.recount(item)
        out: Output = [
            TranscriptionFailed(item_id, 0, failure)
            if failure is not None
            else TranscriptionCompleted(item_id, 0, text, recognition_ms, audio_ms)
        ]
        td = self.ctx.settings.turn_detection
        users = [i for i in conversation.items if i.role == "user"]
        latest = users[-1] is item if users else False  # a later turn supersedes this one: answer that
        if td is not None and td.create_response and self.replies.active is None and latest:
            if only_command(text):  # "Stop.": obeyed (the reply it spoke over is cancelled), not answered
                return out + self._drop_prepared()
            self._prepare_move(PreparedEvent.CONFIRM)  # the edge adopts it for this reply, or drops it
            said = None if text.strip() else NOT_UNDERSTOOD  # heard as nothing: asked to repeat, at once
            out += self.replies.begin(self.ctx.messages(), self.ctx.options(), now, said=said)
        return out
