"""The reply side, sans I/O: events, pacing, pause and resume, barge-in truncation, limits.

Driven with synthetic pipeline chunks and a session clock stepped by hand; no
socket, no talker.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from duplex.app.core.actions import CancelReply, StartReply
from duplex.app.core.conversation import Conversation
from duplex.app.core.events import (
    AudioDelta,
    AudioDucked,
    AudioPaused,
    AudioResumed,
    AudioTranscriptDelta,
    ContentPartAdded,
    ItemAdded,
    ItemTruncated,
    OutputItemAdded,
    ResponseCreated,
    ResponseDone,
)
from duplex.app.core.limits import SessionLimits
from duplex.app.core.pacing import SessionClock
from duplex.app.core.replies import Replies
from duplex.app.core.session_context import SessionContext
from duplex.app.core.settings import ResponseOptions, SessionSettings, TurnDetection
from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.state import StateHandle
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import WordMark

RATE = 24000
AUDIO = ResponseOptions(("audio",), "alloy")


def replies(**settings: object) -> Replies:
    n = iter(range(1, 1000))
    ctx = SessionContext(
        "sess_unit",
        lambda prefix: f"{prefix}_{next(n)}",
        SessionClock(0.0),
        replace(SessionSettings(), **settings),
        SessionLimits(),
        Conversation(),
    )
    return Replies(ctx, StateHandle("sess_unit", "test", "none"))


def chunk(start: StartReply, seq: int, at: int, n: int = 2400, words=(), text: str = "") -> ChunkEvent:
    audio = AudioBuffer.pcm(np.full(n, 100, np.int16), RATE, "test")
    return ChunkEvent(start.response_id, 2, seq, start.epoch, "audio", OutputChunk(audio, at, tuple(words), text))


def begin(r: Replies) -> StartReply:
    out = r.begin(({"role": "user", "content": "hi"},), AUDIO, 0.0)
    assert [type(e) for e in out] == [ResponseCreated, OutputItemAdded, ItemAdded, ContentPartAdded, StartReply]
    start = out[-1]
    assert isinstance(start, StartReply)
    return start


def test_a_reply_streams_numbered_deltas_and_its_transcript_follows_the_audio():
    r = replies(pacing=replace(SessionSettings().pacing, enabled=False))
    start = begin(r)
    first = r.on_output(chunk(start, 0, 0, words=[WordMark(0, 5, 0)], text="Hello world"), 0.0).events
    second = r.on_output(chunk(start, 1, 2400, words=[WordMark(6, 11, 2400)]), 0.0).events
    deltas = [e for e in first + second if isinstance(e, AudioDelta)]
    assert [(d.seq, d.epoch, d.audio_start_ms) for d in deltas] == [(0, 1, 0), (1, 1, 100)]
    said = [e.delta for e in first + second if isinstance(e, AudioTranscriptDelta)]
    assert said == ["Hello", " world"]
    done = r.on_finished(start.response_id)
    assert isinstance(done[-1], ResponseDone) and done[-1].response.status == "completed"
    assert done[-1].response.output[0].content[0].text == "Hello world"
    assert r.active is None


def test_pacing_holds_audio_to_the_lead_ahead_of_playback():
    r = replies()  # lead 250 ms
    start = begin(r)
    r.on_output(chunk(start, 0, 0, n=6000), 0.0)  # 250 ms sent at t = 0
    assert r.output_wait(2400, 0.0) > 0  # 100 ms more would run ahead of the lead
    assert r.output_wait(2400, 0.1) == 0.0  # by t = 100 ms, 100 ms has played


def test_a_cancelled_epoch_is_fenced():
    r = replies()
    start = begin(r)
    out = r.cancel(r.active, "client_cancelled")
    assert isinstance(out[0], CancelReply) and out[0].epoch == start.epoch
    assert isinstance(out[-1], ResponseDone) and out[-1].response.status == "cancelled"
    late = chunk(start, 1, 2400)
    assert not r.current(late) and r.on_output(late, 0.0).stale
    assert r.state.epoch == start.epoch + 1, "the backend state handle moves past the cancelled epoch"


@pytest.mark.parametrize("duck_db", [None, -24.0])
def test_pause_resume_and_barge_in_truncation_at_the_played_position(duck_db):
    r = replies(turn_detection=TurnDetection(duck_db=duck_db))
    start = begin(r)
    text = "one two six "
    for i in range(3):  # 300 ms of audio, sent at t = 0, 0.1, 0.2; a word starts in each 100 ms
        word = WordMark(i * 4, i * 4 + 3, i * 2400)
        r.on_output(chunk(start, i, i * 2400, words=[word], text=text[i * 4 : i * 4 + 4]), i * 0.1)
    # The client played 150 ms by input sample 0.15 s (an ack), then speech began at 0.2 s.
    r.on_ack(start.response_id, 3600, int(0.15 * RATE))
    paused = r.pause(int(0.2 * RATE), int(0.3 * RATE), 0.3)
    assert len(paused) == 1 and isinstance(paused[0], AudioPaused if duck_db is None else AudioDucked)
    assert paused[0].audio_end_ms == 200 and paused[0].detected_after_ms == 100
    reply = r.playing
    assert reply is not None and reply.playout.paused is (duck_db is None), "a ducked reply plays on"
    if isinstance(paused[0], AudioDucked):
        assert paused[0].gain_db == duck_db
    assert [type(e) for e in r.resume(0.35)] == [AudioResumed]
    r.pause(int(0.2 * RATE), int(0.3 * RATE), 0.4)
    out = r.interrupt(int(0.2 * RATE), 0.5)
    truncated = [e for e in out if isinstance(e, ItemTruncated)]
    assert isinstance(out[0], CancelReply)
    assert [t.audio_end_ms for t in truncated] == [200]
    item = r.ctx.conversation.items[-1]
    assert item.content[0].text == "one two", "the transcript keeps the words begun by 200 ms"
    done = [e for e in out if isinstance(e, ResponseDone)]
    assert done[0].response.output[0].content[0].text == "one two", "response.done tells the client what it heard"
    assert out.index(done[0]) < out.index(truncated[0])


@pytest.mark.parametrize("duck_db", [None, -24.0])
def test_speech_that_goes_on_silences_a_ducked_reply_and_a_resume_carries_it_on_from_there(duck_db):
    r = replies(turn_detection=TurnDetection(duck_db=duck_db))
    start = begin(r)
    for i in range(3):
        r.on_output(chunk(start, i, i * 2400), i * 0.1)
    r.on_ack(start.response_id, 3600, int(0.15 * RATE))
    r.pause(int(0.2 * RATE), int(0.25 * RATE), 0.25)
    reply = r.playing
    assert reply is not None
    held = r.hold(int(0.2 * RATE), int(0.5 * RATE), 0.5)
    if duck_db is None:
        assert held == [], "paused at the onset already: nothing more to silence"
    else:
        assert [type(e) for e in held] == [AudioPaused] and reply.playout.paused, "its output stops"
        assert held[0].audio_end_ms == 200 and held[0].detected_after_ms == 300, "the watermark is the onset"
    assert r.hold(int(0.2 * RATE), int(0.6 * RATE), 0.6) == [], "once"
    assert [type(e) for e in r.resume(0.7)] == [AudioResumed] and not reply.playout.paused
    assert r.hold(int(0.2 * RATE), int(0.8 * RATE), 0.8) == [], "a reply playing on at full level is not held"


def test_a_reply_heard_in_full_is_not_truncated_by_later_speech():
    r = replies()
    start = begin(r)
    r.on_output(chunk(start, 0, 0), 0.0)
    r.on_finished(start.response_id)
    assert r.being_heard(10.0) is None
    assert r.interrupt(int(10 * RATE), 10.0) == []


def test_a_reply_that_reaches_the_length_limit_ends_incomplete():
    r = replies()
    r.ctx.limits = SessionLimits(max_reply_s=0.2)
    start = begin(r)
    first = r.on_output(chunk(start, 0, 0), 0.0)  # 100 ms: under the limit
    assert first.goes_on and not any(isinstance(e, ResponseDone) for e in first.events)
    last = r.on_output(chunk(start, 1, 2400), 0.0)  # 200 ms: the limit
    assert not last.goes_on and not last.stale, "its events go out, then its stages stop"
    done = last.events[-1]
    assert isinstance(done, ResponseDone) and done.response.status == "incomplete"
    assert done.response.status_details == {"type": "incomplete", "reason": "max_output_tokens"}
    assert r.active is None
