"""Turn taking on its own, sans I/O: the listener's signals become speech items,
committed turns, transcription work and the replies they start; answers come back as
values. Driven with signals made by hand and a narrow context (no session)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from duplex.app.core.actions import DropPrepared, Heard, Prefill, PrepareReply, StartReply, Transcribe
from duplex.app.core.conversation import Conversation
from duplex.app.core.events import (
    BufferCommitted,
    ResponseCreated,
    SpeechStarted,
    SpeechStopped,
    TranscriptionCompleted,
    TranscriptionFailed,
)
from duplex.app.core.intake import Intake
from duplex.app.core.limits import SessionLimits
from duplex.app.core.listening import Continued, Partial, SpeechPaused, Started, Stopped, Turn
from duplex.app.core.pacing import SessionClock
from duplex.app.core.replies import Replies
from duplex.app.core.session_context import SessionContext
from duplex.app.core.settings import SessionSettings, TurnDetection
from duplex.app.core.turn_taking import TurnTaking
from duplex.pipeline.state import StateHandle
from tests.test_listening import RATE, Script

AUDIO = np.full(RATE, 1000, np.int16)  # one second of "speech"


def turns(**td: object) -> TurnTaking:
    n = iter(range(1, 1000))
    settings = SessionSettings(turn_detection=replace(TurnDetection(), **td))  # type: ignore[arg-type]
    clock = SessionClock(0.0)
    ctx = SessionContext("sess_tt", lambda p: f"{p}_{next(n)}", clock, settings, SessionLimits(), Conversation())
    intake = Intake(clock, ctx.limits, Script([]), 0.0)
    intake.listen(settings)
    return TurnTaking(ctx, Replies(ctx, StateHandle("sess_tt", "test", "none")), intake)


def kinds(out: list) -> list[str]:
    return [type(x).__name__ for x in out]


def test_speech_becomes_an_item_a_committed_turn_its_transcript_and_its_reply():
    t = turns()
    [started] = t.on_signals([Started(4800, 0)], 0.0)
    assert isinstance(started, SpeechStarted) and started.audio_start_ms == 0 and t.speech_item is not None
    speech = t.speech_item
    out = t.on_signals([Stopped(36000, 24000), Turn(AUDIO, 0, 36000, 26400)], 1.5)
    assert kinds(out)[:3] == ["SpeechStopped", "BufferCommitted", "ItemAdded"]
    assert isinstance(out[0], SpeechStopped) and out[0].audio_end_ms == 1500 and out[0].item_id == speech
    [transcribe] = [a for a in out if isinstance(a, Transcribe)]
    assert transcribe.item_id == speech and transcribe.kind == "final", "the item keeps the id speech_started gave"
    assert t.transcribing == {speech}
    out = t.on_transcript(transcribe.heard("What time is it?", 80.0), 1.6)
    [done] = [e for e in out if isinstance(e, TranscriptionCompleted)]
    assert done.transcript == "What time is it?" and done.recognition_ms == 80.0 and not t.transcribing
    [start] = [a for a in out if isinstance(a, StartReply)]
    assert start.plan.messages[-1] == {"role": "user", "content": "What time is it?"}
    assert any(isinstance(e, ResponseCreated) for e in out)


def test_without_create_response_a_turn_is_transcribed_but_not_answered():
    t = turns(create_response=False)
    t.on_signals([Started(0, 0)], 0.0)
    out = t.on_signals([Turn(AUDIO, 0, 24000, 24000)], 1.0)
    [transcribe] = [a for a in out if isinstance(a, Transcribe)]
    out = t.on_transcript(transcribe.heard("Hello."), 1.1)
    assert kinds(out) == ["TranscriptionCompleted"]


def test_a_failed_transcript_is_heard_as_nothing_and_said_so():
    t = turns(create_response=False)
    t.on_signals([Started(0, 0)], 0.0)
    [transcribe] = [a for a in t.on_signals([Turn(AUDIO, 0, 24000, 24000)], 1.0) if isinstance(a, Transcribe)]
    [failed] = t.on_transcript(transcribe.heard("", failure="speech recognition failed: boom"), 1.1)
    assert isinstance(failed, TranscriptionFailed) and "boom" in str(failed)


def test_a_pause_is_transcribed_ahead_its_reply_prepared_and_dropped_when_speech_goes_on():
    t = turns()
    assert t.on_signals([Partial(AUDIO, 9600)], 0.0) == [], "no speech item yet: nothing to transcribe"
    t.on_signals([Started(0, 0)], 0.0)
    [partial] = t.on_signals([Partial(AUDIO[:9600], 9600)], 0.4)
    assert isinstance(partial, Transcribe) and partial.kind == "partial" and not partial.urgent
    [judging] = t.on_signals([Partial(AUDIO[:12000], 12000, judging=True)], 0.5)
    assert judging.urgent, "a partial judging speech over a reply waits for the last one, not dropped"
    [candidate] = t.on_signals([SpeechPaused(AUDIO, 0, 26400, 24000)], 1.1)
    assert isinstance(candidate, Transcribe) and candidate.kind == "candidate" and candidate.upto == 26400
    assert t.still_wanted(candidate)
    out = t.on_transcript(candidate.heard("Tell me a joke."), 1.2)
    [prepared] = [a for a in out if isinstance(a, PrepareReply)]
    assert prepared.plan.messages[-1] == {"role": "user", "content": "Tell me a joke."}
    assert t.on_signals([Continued()], 1.3) == [DropPrepared()], "the user went on: the prepared reply is void"
    assert not t.still_wanted(candidate), "moot: that pause is over"


def test_a_turn_ending_at_its_candidates_pause_takes_that_transcript_without_another_decode():
    t = turns()
    t.on_signals([Started(0, 0)], 0.0)
    [candidate] = t.on_signals([SpeechPaused(AUDIO, 0, 26400, 24000)], 1.1)
    t.on_transcript(candidate.heard("Tell me a joke."), 1.2)
    out = t.on_signals([Stopped(36000, 24000), Turn(AUDIO, 0, 36000, 26400)], 1.5)
    assert not [a for a in out if isinstance(a, Transcribe)], "transcribed already"
    [done] = [e for e in out if isinstance(e, TranscriptionCompleted)]
    assert done.transcript == "Tell me a joke."
    assert [a for a in out if isinstance(a, StartReply)], "and answered"


def test_a_turn_heard_in_lower_case_begins_with_a_capital_as_its_read_ahead_did():
    """Whisper begins some turns in lower case ("which ocean is the largest."); the
    partials read ahead begin with a capital, so the turn must too, or the model reads the
    whole turn again before its first token."""
    t = turns()
    t.on_signals([Started(0, 0)], 0.0)
    item = t.speech_item
    assert item is not None
    t.on_transcript(Heard(item, "which ocean", "partial", 9600), 0.4)
    [_, read] = t.on_transcript(Heard(item, "which ocean is", "partial", 19200), 0.8)
    assert isinstance(read, Prefill) and read.plan.messages[-1]["content"] == "Which ocean"
    [candidate] = t.on_signals([SpeechPaused(AUDIO, 0, 26400, 24000)], 1.1)
    [prepared] = [
        a for a in t.on_transcript(candidate.heard("which ocean is the largest."), 1.2) if isinstance(a, PrepareReply)
    ]
    assert prepared.plan.messages[-1]["content"] == "Which ocean is the largest."
    out = t.on_signals([Stopped(36000, 24000), Turn(AUDIO, 0, 36000, 26400)], 1.5)
    [done] = [e for e in out if isinstance(e, TranscriptionCompleted)]
    assert done.transcript == "Which ocean is the largest."
    [start] = [a for a in out if isinstance(a, StartReply)]
    assert start.plan == prepared.plan, "the prepared reply is the turn's"


def test_a_partials_words_arrive_as_deltas_only_for_the_speech_in_progress():
    t = turns()
    t.on_signals([Started(0, 0)], 0.0)
    item = t.speech_item
    assert item is not None
    assert t.on_transcript(Heard(item, "Tell me", "partial", 9600), 0.4) == [], "words not yet stable"
    [delta, read] = t.on_transcript(Heard(item, "Tell me a", "partial", 19200), 0.8)
    assert type(delta).__name__ == "TranscriptionDelta" and delta.delta == "Tell me", "the words heard twice"
    assert isinstance(read, Prefill) and read.plan.messages[-1] == {"role": "user", "content": "Tell me"}
    assert t.on_transcript(Heard("item_other", "words", "partial", 9600), 0.5) == [], "another speech's: dropped"
    assert t.on_transcript(Heard(item, "x", "partial", 9600, failure="busy"), 0.5) == []


def test_turns_come_faster_than_they_are_heard_and_the_backlog_is_bounded():
    t = turns(create_response=False)
    t.ctx.limits = replace(t.ctx.limits, max_pending_transcriptions=2)
    for i in range(2):
        t.on_signals([Started(i * 48000, i * 48000)], float(i))
        assert [a for a in t.on_signals([Turn(AUDIO, 0, 24000, 24000)], float(i)) if isinstance(a, Transcribe)]
    t.on_signals([Started(96000, 96000)], 2.0)
    out = t.on_signals([Turn(AUDIO, 0, 24000, 24000)], 2.0)
    assert not [a for a in out if isinstance(a, Transcribe)] and any(isinstance(e, TranscriptionFailed) for e in out)
    assert any(isinstance(e, BufferCommitted) for e in out), "the turn is committed all the same"


def test_a_partial_the_pause_candidate_hears_all_of_is_moot():
    """Its decoder's half would repeat the candidate's work (on two cores, the candidate is
    on the turn's critical path); a later partial, or one of other speech, is still wanted."""
    t = turns()
    t.on_signals([Started(0, 0)], 0.0)
    [partial] = t.on_signals([Partial(AUDIO[:9600], 9600)], 0.4)
    assert t.still_wanted(partial)
    [candidate] = t.on_signals([SpeechPaused(AUDIO, 0, 26400, 24000)], 1.1)
    assert not t.still_wanted(partial), "the candidate hears all it would"
    assert t.still_wanted(candidate)
    t.on_signals([Continued()], 1.3)
    assert t.still_wanted(partial), "the pause is over: no candidate covers it"
