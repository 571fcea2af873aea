"""The core's state machines as tables (h11's ``test_state.py`` is the model): every
move each table allows, the pairs it refuses, and the phases a reply really goes
through when driven."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from enum import Enum
from typing import Any

import pytest

from duplex.app.core.listening.bargein import JUDGED, BargeEvent, BargeIn, BargeState, Ending
from duplex.app.core.listening.bargein import MOVES as BARGE_MOVES
from duplex.app.core.listening.listener import MOVES as HEARING_MOVES
from duplex.app.core.listening.listener import Hearing, HearingEvent
from duplex.app.core.listening.signals import Hold, Interrupt, Resume
from duplex.app.core.reply_state import AUDIBLE, MOVES, RUNNING, ReplyEvent, ReplyPhase
from duplex.app.core.settings import TurnDetection
from duplex.app.core.states import ImpossibleMove, Table
from duplex.app.core.turn_taking import PREPARED_MOVES, Prepared, PreparedEvent
from tests.test_replies import begin, chunk, replies

P, E = ReplyPhase, ReplyEvent
TABLES: list[tuple[Table[Any, Any], type[Enum], type[Enum], Enum]] = [
    (MOVES, ReplyPhase, ReplyEvent, ReplyPhase.THINKING),
    (BARGE_MOVES, BargeState, BargeEvent, BargeState.IDLE),
    (HEARING_MOVES, Hearing, HearingEvent, Hearing.QUIET),
    (PREPARED_MOVES, Prepared, PreparedEvent, Prepared.NONE),
]


def reachable(table: Table[Any, Any], start: Enum) -> set[Enum]:
    seen, todo = {start}, deque([start])
    while todo:
        state = todo.popleft()
        for (s, _), nxt in table.moves.items():
            if s is state and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize(("table", "states", "events", "start"), TABLES, ids=lambda x: getattr(x, "name", ""))
def test_every_state_is_reachable_and_every_pair_is_allowed_or_refused(table, states, events, start):
    assert reachable(table, start) == set(states), "no state the machine can never be in"
    for state in states:
        for event in events:
            if table.allows(state, event):
                assert table.move(state, event) in states
            else:
                with pytest.raises(ImpossibleMove, match=event.name):
                    table.move(state, event)


@pytest.mark.parametrize(
    ("phase", "event"),
    [
        (P.THINKING, E.CUT),  # nothing of it was heard: it is cancelled, not cut
        (P.SPEAKING, E.CUT),  # a running reply ends (cancelled) before it is cut
        (P.SPEAKING_DUCKED, E.DUCK),
        (P.SPEAKING, E.RESUME),
        (P.THINKING, E.DUCK),  # a reply still deciding whether to speak has nothing to duck
        (P.PLAYING_OUT, E.END),  # ended once
        (P.PLAYING_OUT_DUCKED, E.PLAYED),  # a ducked reply is judged before it counts as heard
        (P.HEARD, E.DUCK),
        (P.CUT, E.CUT),
        (P.CUT, E.RESUME),
        (P.DONE, E.ANNOUNCE),
    ],
)
def test_impossible_reply_moves_are_refused(phase, event):
    with pytest.raises(ImpossibleMove):
        MOVES.move(phase, event)


def test_a_reply_ends_from_every_running_phase_and_nothing_leaves_an_end():
    for phase in RUNNING:
        assert MOVES.allows(phase, E.END_SILENT), phase
        if phase is not P.THINKING:
            assert MOVES.allows(phase, E.END), phase
    for end in (P.CUT, P.DONE):
        assert not [e for (s, e) in MOVES.moves if s is end], f"{end.name} is final"
    for phase in AUDIBLE - RUNNING:
        assert MOVES.allows(phase, E.CUT), f"a reply playing out can be cut from {phase.name}"


def test_barge_in_starts_only_from_idle_or_a_rise_and_judges_only_what_it_is_judging():
    fresh = {BargeState.IDLE, BargeState.ROSE}
    for state in BargeState:
        assert BARGE_MOVES.allows(state, BargeEvent.ENDED)
        judged = BARGE_MOVES.allows(state, BargeEvent.WORDS)
        assert judged is (state in JUDGED)
        started = BARGE_MOVES.allows(state, BargeEvent.OVER_REPLY)
        assert started is (state in fresh), "a new speech only once the last has ended (or from its rise)"
        assert BARGE_MOVES.allows(state, BargeEvent.RISING) is (state is BargeState.IDLE), "a rise only in quiet"


def test_the_listener_sees_each_pause_once_and_speech_begins_only_in_quiet():
    assert HEARING_MOVES.move(Hearing.PAUSE, HearingEvent.SEEN) is Hearing.PAUSE_SEEN
    assert not HEARING_MOVES.allows(Hearing.PAUSE_SEEN, HearingEvent.SEEN)
    assert not HEARING_MOVES.allows(Hearing.SPEECH, HearingEvent.SEEN), "a pause is seen in a pause"
    assert [s for s in Hearing if HEARING_MOVES.allows(s, HearingEvent.ONSET)] == [Hearing.QUIET]


# -- a reply driven through its phases ----------------------------------------------------


def test_a_reply_goes_through_its_phases_as_it_is_spoken_ducked_resumed_and_heard():
    r = replies(turn_detection=TurnDetection(duck_db=-24.0))
    start = begin(r)
    reply = r.active
    assert reply is not None and reply.phase is P.SPEAKING, "announced at once (no tools in play)"
    r.on_output(chunk(start, 0, 0), 0.0)  # 100 ms of audio
    r.pause(0, 100, 0.01)
    assert reply.phase is P.SPEAKING_DUCKED and reply.ducked
    r.resume(0.02)
    assert reply.phase is P.SPEAKING
    r.on_finished(start.response_id)
    assert reply.phase is P.PLAYING_OUT and r.active is None and not reply.running
    assert r.being_heard(0.05) is reply, "the client is still playing it"
    assert r.being_heard(5.0) is None and reply.phase is P.HEARD
    assert r.interrupt(int(5.0 * 24000), 5.0) == [] and reply.phase is P.HEARD, "heard in full: not cut"


def test_a_reply_interrupted_while_ducked_is_cancelled_then_cut():
    r = replies(turn_detection=TurnDetection(duck_db=-24.0))
    start = begin(r)
    reply = r.active
    assert reply is not None
    r.on_output(chunk(start, 0, 0), 0.0)
    r.pause(0, 100, 0.01)
    r.interrupt(0, 0.02)
    assert reply.phase is P.CUT and r.active is None
    assert r.resume(0.03) == [] and r.pause(0, 100, 0.04) == [], "a cut reply is over"


def test_a_reply_paused_with_ducking_off_and_ended_meanwhile_resumes_into_its_play_out():
    r = replies(turn_detection=TurnDetection(duck_db=None))
    start = begin(r)
    reply = r.active
    assert reply is not None
    r.on_output(chunk(start, 0, 0), 0.0)
    r.pause(0, 100, 0.01)
    assert reply.phase is P.SPEAKING_PAUSED and reply.playout.paused
    r.on_finished(start.response_id)
    assert reply.phase is P.PLAYING_OUT_PAUSED
    r.resume(0.02)
    assert reply.phase is P.PLAYING_OUT and not reply.playout.paused


# -- one value per reply ------------------------------------------------------------------


def test_a_prepared_reply_is_adopted_only_for_an_equal_plan_whichever_field_differs():
    import dataclasses

    from duplex.app.core.actions import PrepareReply, ReplyPlan, StartReply
    from duplex.app.edge.replying import Run
    from duplex.pipeline.state import StateHandle

    plan = ReplyPlan(({"role": "user", "content": "hi"},), "alloy", 1.0, 24000)
    run = Run(stages=None, prepared=PrepareReply(plan, 2))  # type: ignore[arg-type]  # (serves reads the plan only)
    assert run.serves(StartReply("resp_1", 3, plan)), "the same reply, whatever its id and epoch"
    others = {
        "messages": (),
        "voice": "cedar",
        "speed": 1.2,
        "output_rate": 16000,
        "audio": False,
        "tools": ({"type": "function", "name": "f"},),
        "tool_choice": "required",
        "state": StateHandle("sess_x", "test", "none").after(0),
        "max_tokens": 20,
        "temperature": 1.1,
        "said": "Sorry, I did not catch that.",
    }
    assert {f.name for f in dataclasses.fields(ReplyPlan)} == set(others), "every field is tried"
    for name, value in others.items():
        assert not run.serves(StartReply("resp_1", 3, replace(plan, **{name: value}))), f"{name} differs"


def _over_reply() -> BargeIn:
    b = BargeIn(TurnDetection(type="semantic_vad", barge_in_min_ms=800), 16000, words=True)
    assert b.started(0, replying=True) and b.state is BargeState.JUDGING
    return b


def test_barge_in_rows_by_event_sequence_the_latest_words_decide():
    ms = 16  # samples a millisecond at 16 kHz
    # JUDGING --MINOR_WORDS--> HEARD_BACKCHANNEL: no length makes it a turn; it resumes at its end.
    b = _over_reply()
    assert b.on_words("Okay, yeah.", loud=True, heard_ms=700) == [] and b.state is BargeState.HEARD_BACKCHANNEL
    assert b.judged and b.speaking(0, 3000 * ms) == [], "a backchannel is never long enough"
    assert b.stopped(0, 3000 * ms) == Ending([Resume()], turn=False) and b.state is BargeState.IDLE
    # HEARD_BACKCHANNEL --WORDS--> INTERRUPTED: the words went on to say something.
    b = _over_reply()
    b.on_words("Okay.", loud=True, heard_ms=500)
    assert b.on_words("Okay, but wait.", loud=True, heard_ms=900) == [Interrupt(0)]
    assert b.state is BargeState.INTERRUPTED and b.stopped(0, 1000 * ms).turn is True
    # Words well below the user's level are someone else's: HEARD_BACKCHANNEL, then NOISE -> IGNORED.
    b = _over_reply()
    assert b.on_words("Tell me more about it.", loud=False, heard_ms=900) == [] and b.judged
    assert b.speaking(0, 1600 * ms, loud=False) == [Resume()] and b.state is BargeState.IGNORED
    # JUDGING --NO_WORDS--> HEARD_NOTHING: its length alone decides, UNHEARD_MS later.
    b = _over_reply()
    assert b.on_words("", loud=True, heard_ms=600) == [] and b.state is BargeState.HEARD_NOTHING
    assert b.speaking(0, 900 * ms) == [Hold(0)], "silenced at once (it went on, no backchannel heard)"
    assert b.speaking(0, 1000 * ms) == [] and b.speaking(0, 1300 * ms) == [Interrupt(0)]
    assert b.state is BargeState.INTERRUPTED
    # With no words at all, JUDGING --LONG--> INTERRUPTED at barge_in_min_ms.
    b = _over_reply()
    assert b.speaking(0, 299 * ms) == [] and b.speaking(0, 300 * ms) == [Hold(0)]
    assert b.speaking(0, 799 * ms) == [] and b.speaking(0, 800 * ms) == [Interrupt(0)]
