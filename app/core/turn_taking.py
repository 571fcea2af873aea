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

from typing import Protocol

import numpy as np

from duplex.app.core.actions import Action, DropPrepared, PredictTurn, Transcribe
from duplex.app.core.conversation import Conversation, Item, Part
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
from duplex.app.core.limits import SessionLimits
from duplex.app.core.listening import (
    AskTurn,
    Continued,
    Duck,
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
from duplex.app.core.settings import SessionSettings, VoiceCheck, response_options
from duplex.app.core.transcripts import Candidate, Transcripts
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.thinker import Message

Output = list[ServerEvent | Action]


class Session(Protocol):
    """What turn-taking needs of its session."""

    conversation: Conversation
    limits: SessionLimits
    replies: Replies
    intake: Intake
    check_voice: VoiceCheck

    @property
    def settings(self) -> SessionSettings: ...

    @property
    def input_samples(self) -> int: ...

    def new_id(self, prefix: str) -> str: ...

    def ms(self, samples: int) -> int: ...

    def messages(self, items: list[Item] | None = None, instructions: str | None = None) -> tuple[Message, ...]: ...

    def item_added(self, item: Item, prev: str | None) -> list[ServerEvent]: ...

    def make_room(self, item: Item) -> list[ServerEvent]: ...


class TurnTaking:
    """One session's turns: speech items, transcripts, and the replies they start."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.speech_item: str | None = None
        """The item id ``speech_started`` announced for the speech in progress."""
        self.transcribing: set[str] = set()
        """Committed turns waiting for their transcript."""
        self.transcripts = Transcripts()
        self._prepared = False  # a reply was prepared for the current pause
        self._audio_ms: dict[str, int] = {}  # committed turns' audio, for their transcript's usage
        self._quiet_from = 0  # input sample since which nobody has spoken (for idle_timeout_ms)

    def on_signals(self, signals: list[Signal], now: float) -> Output:
        out: Output = []
        rate = self.s.settings.input_rate
        for sig in signals:
            item = self.speech_item
            if isinstance(sig, Started):
                self.transcripts.forget(item)
                self.speech_item = self.s.new_id("item")
                out.append(SpeechStarted(self.s.ms(sig.audio_start), self.speech_item))
            elif isinstance(sig, Duck):
                out += self.s.replies.pause(sig.onset, self.s.input_samples, now)
            elif isinstance(sig, Resume):
                out += self.s.replies.resume(now)
            elif isinstance(sig, Interrupt):
                out += self.s.replies.interrupt(sig.onset, now)
            elif isinstance(sig, Stopped):
                out.append(SpeechStopped(self.s.ms(sig.audio_end), item))
            elif isinstance(sig, Turn):
                out += self.commit(sig.audio, item, now=now, span=(sig.audio_start, sig.heard_end))
            elif item is None:
                continue
            elif isinstance(sig, Partial):
                out.append(Transcribe(item, sig.audio, rate, "partial", sig.upto))
            elif isinstance(sig, SpeechPaused):
                self.transcripts.paused(item, sig.start, sig.upto, sig.speech_end)
                out.append(Transcribe(item, sig.audio, rate, "candidate", sig.upto))
            elif isinstance(sig, AskTurn):
                out.append(PredictTurn(sig.audio, rate, sig.speech_end))
            elif isinstance(sig, Continued):
                self.transcripts.candidate = None
                out += self._drop_prepared()
        return out

    def idle(self, now: float) -> Output:
        """``idle_timeout_ms`` of input with nobody speaking since the last reply was heard:
        say so, commit the silence as the user's (empty) turn and answer it."""
        s = self.s
        td, listener = s.settings.turn_detection, s.intake.listener
        busy = (
            listener is None
            or listener.in_speech
            or s.replies.active is not None
            or s.replies.being_heard(now) is not None
            or bool(self.transcribing)
        )
        if td is None or td.idle_timeout_ms is None or busy:
            self._quiet_from = s.input_samples
            return []
        if s.input_samples - self._quiet_from < ms_to_samples(td.idle_timeout_ms, s.settings.input_rate):
            return []
        start, self._quiet_from = self._quiet_from, s.input_samples
        item = Item(s.new_id("item"), "user", [Part("input_audio", "")])
        prev = s.conversation.add(item)
        out: Output = [
            BufferTimeoutTriggered(s.ms(start), s.ms(s.input_samples), item.id),
            BufferCommitted(prev, item.id),
            *s.item_added(item, prev),
            *s.make_room(item),
        ]
        if td.create_response:
            out += s.replies.begin(s.messages(), response_options(s.settings, {}, check_voice=s.check_voice), now)
        return out

    def commit(
        self, audio: np.ndarray, item_id: str | None = None, *, now: float, span: tuple[int, int] | None = None
    ) -> Output:
        speech_item = item_id
        if item_id is None or item_id in self.s.conversation:  # a client may have taken it since speech began
            item_id = self.s.new_id("item")
        item = Item(item_id, "user", [Part("input_audio", None)])
        prev = self.s.conversation.add(item)
        out: Output = [BufferCommitted(prev, item.id), *self.s.item_added(item, prev), *self.s.make_room(item)]
        self._audio_ms[item.id] = self.s.ms(int(audio.size))
        candidate = self.transcripts.committed(speech_item, span, item.id, now) if span is not None else None
        if candidate is not None:  # transcribed already (or being transcribed) at the pause that ended the turn
            if candidate.arrived:
                return out + self._transcribed(item.id, candidate.text or "", now, 0.0, candidate.failure)
            self.transcribing.add(item.id)
            return out
        if len(self.transcribing) >= self.s.limits.max_pending_transcriptions:
            # Turns come faster than they can be heard: this one is not queued behind the others.
            backlog = f"not transcribed: {len(self.transcribing)} earlier turns are still waiting"
            return out + self._transcribed(item.id, "", now, failure=backlog)
        self.transcribing.add(item.id)
        return [*out, Transcribe(item.id, audio, self.s.settings.input_rate)]

    def on_transcript(
        self,
        item_id: str,
        text: str,
        now: float,
        recognition_ms: float | None = None,
        failure: str | None = None,
        *,
        kind: str = "final",
        upto: int = 0,
    ) -> Output:
        """The recogniser heard ``text`` (in ``recognition_ms``), or failed with
        ``failure``, for a :class:`Transcribe` of this ``kind`` and ``upto``: a final
        transcript completes its item (a failed one is heard as nothing and the turn
        goes on); a partial may add words to the speech's deltas; a candidate is kept
        for the turn, or completes the turn that ended at its pause."""
        if kind == "partial":
            if item_id != self.speech_item or failure:
                return []
            delta = self.transcripts.partial(item_id, text)
            listener = self.s.intake.listener
            out: Output = [TranscriptionDelta(item_id, 0, delta)] if delta else []
            return out + self.on_signals(listener.on_partial(text, upto), now) if listener else out
        if kind != "candidate":
            return self._transcribed(item_id, text, now, recognition_ms, failure)
        done = self.transcripts.arrived(item_id, upto, text, failure)
        if done is None:
            return []  # the speech went on: this pause was not the turn's end
        if not isinstance(done, Candidate):  # the turn ended at that pause and waited for this
            return self._transcribed(done.item_id, text, now, (now - done.committed_at) * 1000, failure)
        listener = self.s.intake.listener
        out = self.on_signals(listener.on_candidate(done.speech_end, text), now) if listener and not failure else []
        if self.transcripts.candidate is done and text and not failure:
            out += self._prepare(text)  # the turn may well end here: start its reply, unheard
        return out

    def on_turn_probability(self, speech_end: int, probability: float, now: float) -> Output:
        """The end-of-turn model's answer to a :class:`PredictTurn`."""
        listener = self.s.intake.listener
        return self.on_signals(listener.on_turn_probability(speech_end, probability), now) if listener else []

    def _prepare(self, text: str) -> Output:
        td = self.s.settings.turn_detection
        if td is None or not td.create_response or self.s.replies.active is not None:
            return []
        options = response_options(self.s.settings, {}, check_voice=self.s.check_voice)
        messages = (*self.s.messages(), {"role": "user", "content": text})
        self._prepared = True
        return [self.s.replies.prepare(messages, options)]

    def still_wanted(self, action: Transcribe | PredictTurn) -> bool:
        """Whether a queued candidate transcription or end-of-turn question is still of use
        when its turn to run comes (speech that went on since makes it moot: only the
        latest pause matters). Turns and partials always are."""
        if isinstance(action, PredictTurn):
            listener = self.s.intake.listener
            return listener is not None and listener.pausing_after(action.speech_end)
        if action.kind != "candidate" or action.upto is None:
            return True
        return self.transcripts.wanted(action.item_id, action.upto)

    def cleared(self) -> Output:
        """The input buffer was cleared: the pause's candidate and prepared reply go with it."""
        self.transcripts.candidate = None
        return self._drop_prepared()

    def _drop_prepared(self) -> Output:
        was, self._prepared = self._prepared, False
        return [DropPrepared()] if was else []

    def _transcribed(
        self, item_id: str, text: str, now: float, recognition_ms: float | None = None, failure: str | None = None
    ) -> Output:
        """A committed item's transcript: completed (or failed), then its reply."""
        self.transcribing.discard(item_id)
        audio_ms = self._audio_ms.pop(item_id, 0)
        if item_id not in self.s.conversation:
            return []  # deleted meanwhile
        item = self.s.conversation.get(item_id)
        item.content[0].text = text
        self.s.conversation.recount(item)
        out: Output = [
            TranscriptionFailed(item_id, 0, failure)
            if failure is not None
            else TranscriptionCompleted(item_id, 0, text, recognition_ms, audio_ms)
        ]
        td = self.s.settings.turn_detection
        users = [i for i in self.s.conversation.items if i.role == "user"]
        latest = users[-1] is item if users else False  # a later turn supersedes this one: answer that
        if td is not None and td.create_response and self.s.replies.active is None and latest:
            options = response_options(self.s.settings, {}, check_voice=self.s.check_voice)
            self._prepared = False  # the edge adopts it for this reply, or drops it
            out += self.s.replies.begin(self.s.messages(), options, now)
        return out
