"""Hearing, sans I/O: semantic end of turn, partial and candidate transcripts, replies
prepared before the turn is confirmed, and speech over a reply judged by its words
and its level. Driven by a scripted voice-activity model (see test_listening.py) and
answers handed in as the edge would hand them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from duplex.app.core.actions import Heard, PredictTurn, PrepareReply, StartReply, Transcribe
from duplex.app.core.events import (
    AudioDucked,
    AudioResumed,
    BufferCommitted,
    TranscriptionCompleted,
    TranscriptionDelta,
)
from duplex.app.core.listening.bargein import BargeState, says_something
from duplex.app.core.listening.ears import Ears
from duplex.app.core.listening.floor import SOFT_TAIL_MS
from duplex.app.core.listening.listener import JUDGE_EVERY_MS, JUDGE_FROM_MS, PARTIAL_EVERY_MS, TAIL_MS, Listener
from duplex.app.core.listening.semantic import EAGERNESS, OWN_PAUSE_MARGIN_MS, SemanticTurns, words_hang
from duplex.app.core.listening.signals import (
    AskTurn,
    Continued,
    Duck,
    Interrupt,
    Partial,
    Resume,
    SpeechPaused,
    Started,
    Stopped,
    Turn,
)
from duplex.app.core.listening.stall import STALL_MS
from duplex.app.core.session import Session
from duplex.app.core.settings import SessionSettings, TurnDetection
from duplex.app.core.transcripts import Transcripts
from tests.test_listening import RATE, WINDOW, Script

HEARS_ALL = Ears(transcripts=True, partials=True, turn_model=True)
ASKS = EAGERNESS["medium"].asks
QUICK_MS = EAGERNESS["medium"].quick_ms
"""The model is asked at each of ASKS; sure every time, the turn ends at QUICK_MS."""
SEMANTIC = TurnDetection(type="semantic_vad", threshold=0.5, prefix_padding_ms=0, min_speech_ms=150)
LOUD = np.full(WINDOW, 3000, np.int16)  # -21 dBFS
QUIET = np.full(WINDOW, 300, np.int16)  # -41 dBFS


def ms(n: int) -> int:
    return n * RATE // 1000


def feed(ears: Listener, n: int, *, pcm: np.ndarray = LOUD, replying: bool = False) -> list:
    out = []
    for _ in range(n):
        out += ears.push(pcm, replying=replying)
    return out


def of(kind: type, signals: list) -> list:
    return [s for s in signals if isinstance(s, kind)]


# -- the semantic decision ---------------------------------------------------------
def test_words_that_hang_wait_for_more():
    hanging = (
        "I'd like to book a table for",
        "I'd like to book a table for.",  # Whisper puts a full stop on a cut sentence too
        "Can you remind me to?",
        "I went to the",
        "so,",
        "and then um",
        "Well...",
        "If it's not too much trouble.",  # an opening clause with no main clause yet
        "Let me think about it for a second.",  # holding the floor
        "Wait.",  # a preface alone
        "Okay, so.",
    )
    for text in hanging:
        assert words_hang(text), text
    whole = ("Book a table for four.", "What time is it?", "Thank you.", "Who are you waiting for?", "I like it", "")
    whole += ("Wait, stop talking now.", "Yes.", "Okay.", "No thanks.")
    # ...and a number ends them as a word does ("to 50%." does not end on "to")
    whole += ("Dim the kitchen lights to 30%.", "Switch the heating off at 10 to 9.", "Wake me at 7")
    for text in (*whole, "When you get a chance, could you turn up the heating?"):
        assert not words_hang(text), text


@pytest.mark.parametrize(
    ("p", "text", "silence_ms"),
    [
        (0.99, "Tell me a joke.", QUICK_MS),  # sure each time, and the words are whole: at once
        (0.98, "I would like to.", EAGERNESS["medium"].max_ms),  # sure, but the words hang
        (0.6, "Tell me a joke.", EAGERNESS["medium"].settle_ms),  # leaning to complete
        (0.1, "Tell me a joke.", EAGERNESS["medium"].doubt_ms),  # the model says it goes on, the words do not
        (0.1, "Tell me a joke and", EAGERNESS["medium"].max_ms),  # both say it goes on
    ],
)
def test_semantic_turn_ends_by_probability_and_words(p, text, silence_ms):
    turns = SemanticTurns("medium", RATE, HEARS_ALL)
    speech_end = ms(3000)
    early = ASKS[0] - EAGERNESS["medium"].heard_ms  # asked this soon, the silence to come as zeros
    assert early > 0
    for at in ASKS:
        assert turns.ask(speech_end, speech_end + ms(at - early) - 1) is None
        assert turns.ask(speech_end, speech_end + ms(at - early)) == speech_end + ms(at)
        assert turns.ask(speech_end, speech_end + ms(at - early) + 1) is None, "asked once there"
    assert turns.ask(speech_end, speech_end + ms(5000)) is None, f"{len(ASKS)} asks a pause in all"
    late = speech_end + ms(QUICK_MS)
    assert turns.ended(speech_end, late) is None, "nothing decides before every answer is in"
    turns.on_transcript(speech_end, text)
    for _ in ASKS[1:]:
        turns.on_probability(speech_end, p)
    assert turns.ended(speech_end, late) is None, "the model has not answered every ask"
    turns.on_probability(speech_end, p)
    end = speech_end + ms(silence_ms)
    # The end is placed on the input clock whenever the answers came: the same audio, the same turn.
    assert turns.ended(speech_end, max(late, end)) == end
    if end > late:
        assert turns.ended(speech_end, end - 1) is None


def test_one_unsure_answer_of_two_is_enough_to_wait():
    low = EAGERNESS["low"]
    assert len(low.asks) == 2, "low eagerness asks twice"
    turns = SemanticTurns("low", RATE, HEARS_ALL)
    turns.on_transcript(0, "Tell me a joke.")
    turns.on_probability(0, 0.995)
    turns.on_probability(0, 0.8)  # the same pause, later: leaning, not sure
    assert turns.ended(0, ms(3000)) == ms(low.settle_ms)
    turns.on_transcript(ms(5000), "")  # the recogniser heard nothing: no way to tell from the words
    turns.on_probability(ms(5000), 0.995)
    turns.on_probability(ms(5000), 0.995)
    assert turns.ended(ms(5000), ms(5000) + ms(3000)) == ms(5000) + ms(low.max_ms)


def test_eagerness_orders_the_waits_and_answers_about_an_older_pause_are_ignored():
    waits = [EAGERNESS[e] for e in ("low", "medium", "high")]
    assert [w.max_ms for w in waits] == sorted((w.max_ms for w in waits), reverse=True)
    assert [w.doubt_ms for w in waits] == sorted((w.doubt_ms for w in waits), reverse=True)
    assert all(w.settle_ms < w.doubt_ms <= w.max_ms for w in waits), "doubt waits between the two"
    assert [w.sure for w in waits] == sorted((w.sure for w in waits), reverse=True)
    turns = SemanticTurns("high", RATE, HEARS_ALL)
    turns.on_probability(ms(1000), 0.99)
    turns.on_transcript(ms(1000), "Done.")
    assert turns.ended(ms(2000), ms(2000) + ms(QUICK_MS)) is None, "the speech went on since that answer"


def test_a_user_who_went_on_after_a_long_pause_gets_a_quick_end_only_after_that_long():
    turns = SemanticTurns("medium", RATE, HEARS_ALL)
    turns.resumed(ms(1000), ms(1000) + ms(60))  # a gap between words: not a habit
    assert turns.quick_ms() == QUICK_MS
    turns.resumed(ms(2000), ms(2000) + ms(300))  # went on after 300 ms of silence
    assert turns.quick_ms() == 300 + OWN_PAUSE_MARGIN_MS
    for _ in ASKS:
        turns.on_probability(ms(5000), 0.99)
    turns.on_transcript(ms(5000), "Tell me a joke.")
    assert turns.ended(ms(5000), ms(5000) + ms(QUICK_MS)) is None, "not at once any more"
    assert turns.ended(ms(5000), ms(5000) + ms(400)) == ms(5000) + ms(400)
    turns.resumed(ms(6000), ms(6000) + ms(3000))  # a new thought, not a pause
    assert turns.quick_ms() == 400
    assert SemanticTurns("medium", RATE, HEARS_ALL).quick_ms() == QUICK_MS, "per session"


def test_without_a_model_the_words_and_the_silence_decide():
    turns = SemanticTurns("medium", RATE, Ears(transcripts=True))
    assert turns.ask(0, ms(1000)) is None
    turns.on_transcript(0, "What time is it?")
    assert turns.ended(0, ms(EAGERNESS["medium"].settle_ms)) == ms(EAGERNESS["medium"].settle_ms)


# -- the listener: what it asks for while the user speaks and pauses -------------------
def test_partials_while_speaking_a_candidate_and_a_question_at_the_pause_then_the_turn():
    ears = Listener(Script([0.9] * 40 + [0.0] * 100), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 40)
    partials = of(Partial, out)
    assert len(partials) == 40 * WINDOW // ms(400), "one partial per 400 ms of speech"
    assert all(p.audio.size == p.upto for p in partials), "each hears the speech from its start"
    out = feed(ears, 10)  # 320 ms of silence
    [paused] = of(SpeechPaused, out)
    asks = of(AskTurn, out)
    speech_end = 40 * WINDOW
    assert (paused.speech_end, paused.upto) == (speech_end, speech_end + ms(TAIL_MS))
    assert paused.audio.size == paused.upto - paused.start
    assert [(a.speech_end, a.upto) for a in asks] == [(speech_end, speech_end + ms(at)) for at in ASKS]
    assert not of(Turn, out) and not of(Partial, out), "no partials in a pause"
    assert all(ears.on_turn_probability(speech_end, 0.99) == [] for _ in asks), "no transcript yet"
    out = ears.on_candidate(speech_end, "What is the weather like today?")
    [stopped] = of(Stopped, out)
    [turn] = of(Turn, out)
    assert stopped.audio_end == speech_end + ms(QUICK_MS)
    assert (turn.audio_start, turn.heard_end) == (paused.start, paused.upto), "the candidate's audio exactly"


def test_a_pause_is_asked_about_as_soon_as_its_audio_is_in_hand():
    """The VAD judges a window tens of ms after its audio came (the resampler, the window):
    the candidate is asked for with the frame that brings the audio to its tail, and the
    end-of-turn model two windows into the pause, the silence still to come as zeros."""
    rate = 24000  # the model hears 16 kHz: a resampler in between, as in a real session
    ears = Listener(Script([0.9] * 40 + [0.0] * 100), rate, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    frame = np.full(rate // 50, 3000, np.int16)  # 20 ms, as clients send
    speech_end = 40 * WINDOW * rate // RATE
    paused: list = []
    asks: list = []
    while not paused:
        out = ears.push(frame, replying=False)
        paused, asks = of(SpeechPaused, out), asks + [(a, ears.vad.samples) for a in of(AskTurn, out)]
        assert ears.vad.samples < speech_end + ms(1000), "no pause was seen"
    [p] = paused
    assert p.upto == speech_end + TAIL_MS * rate // 1000
    # (the VAD had judged the first two silent windows by then; it judged the window
    # ending at the tail ~60 ms later, when this was asked for before)
    assert ears.vad.samples <= p.upto + frame.size, "asked for once its audio (and two quiet windows) came"
    [(ask, heard)] = asks
    assert ask.upto == speech_end + ASKS[0] * rate // 1000 and ask.audio.size == ask.upto
    assert heard < ask.upto and not ask.audio[heard:].any(), "the silence to come heard as zeros"
    assert ask.audio[:heard].all(), "the audio in hand as it came"


def test_speech_after_a_pause_voids_it():
    probs = [0.9] * 20 + [0.0] * 10 + [0.9] * 20 + [0.0] * 100
    ears = Listener(Script(probs), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 30)
    assert of(SpeechPaused, out) and not of(Continued, out)
    out = feed(ears, 1)
    assert of(Continued, out) == [Continued()]
    out = feed(ears, 30)
    assert of(SpeechPaused, out)[0].speech_end == 50 * WINDOW, "the next pause gets its own candidate"


# -- speech over a reply ---------------------------------------------------------------
def over_reply(probs: list[float], td: TurnDetection = SEMANTIC) -> Listener:
    return Listener(Script(probs), RATE, td, floor_dbfs=float("-inf"), ears=HEARS_ALL)


def test_a_backchannel_ducks_the_reply_and_resumes_it_once_its_words_are_known():
    ears = over_reply([0.9] * 12 + [0.0] * 200)
    out = feed(ears, 12, replying=True)
    assert of(Duck, out) == [Duck(0)], "ducked at the onset"
    out = feed(ears, 6, replying=True)  # 192 ms of silence: a candidate is asked for
    assert of(SpeechPaused, out) and not of(Resume, out)
    out = ears.on_candidate(12 * WINDOW, "Mhm, okay.")
    assert of(Resume, out) == [Resume()] and not of(Turn, out), "resumed at once; not a turn"
    assert of(Stopped, out)[0].audio_end < 12 * WINDOW + ms(SEMANTIC.silence_duration_ms)
    # A partial that already said so: resumed as soon as the speech pauses.
    ears = over_reply([0.9] * 12 + [0.0] * 200)
    feed(ears, 12, replying=True)
    assert ears.on_partial("Mhm.", 12 * WINDOW) == []
    out = feed(ears, 4, replying=True)  # 128 ms: past the 100 ms tail
    assert of(Resume, out) == [Resume()] and of(Stopped, out)[0].audio_end == 12 * WINDOW + 4 * WINDOW


def test_words_over_a_reply_interrupt_it_at_the_onset():
    ears = over_reply([0.1] * 5 + [0.9] * 30 + [0.0] * 100)
    feed(ears, 20, replying=True)
    assert ears.barge_in.state is BargeState.JUDGING
    assert ears.on_partial("Wait, what about", 20 * WINDOW) == [Interrupt(5 * WINDOW)]
    assert ears.barge_in.state is BargeState.INTERRUPTED


def test_quiet_speech_over_a_reply_never_interrupts_it_and_then_no_longer_ducks_it():
    ears = over_reply([0.9] * 200 + [0.0] * 10 + [0.9] * 40)
    ears.levels.user_db = -21.0  # the user's turns came in at -21 dBFS; this is 20 dB below
    out = feed(ears, 10, pcm=QUIET, replying=True)
    assert ears.levels.onset_allowed(-41.0, 0, replying=True) is False
    assert not of(Started, out), "too far below the user's level to start speech over a reply"
    ears.levels.user_db = -32.0  # a quieter user: the sound may start speech, but is judged
    out = feed(ears, 30, pcm=QUIET, replying=True)
    assert of(Duck, out) == [Duck(10 * WINDOW)]
    assert ears.on_partial("and the news at nine", 40 * WINDOW) == [], "words, but not at the user's level"
    out = feed(ears, 30, pcm=QUIET, replying=True)  # speech that says nothing of its own for 1.5 s
    assert of(Resume, out) and of(Stopped, out) and not of(Interrupt, out) and not of(Turn, out)
    # The noise's level now bars new onsets below its level + 6 dB; the user's own voice starts afresh.
    out = feed(ears, 10, pcm=QUIET, replying=True)
    assert not of(Started, out)
    out = feed(ears, 40, pcm=LOUD, replying=True)
    [started] = of(Started, out)
    assert started.onset == 80 * WINDOW, "the onset is the user's, not the noise's"


def test_with_no_recogniser_length_still_decides():
    ears = Listener(Script([0.9] * 40 + [0.0] * 40), RATE, SEMANTIC, floor_dbfs=float("-inf"))
    out = feed(ears, 80, replying=True)
    assert of(Interrupt, out) == [Interrupt(0)], "800 ms of speech over a reply takes the turn"


def test_says_something():
    assert not says_something("Mhm. Okay, yeah. Uh huh, I see.")
    assert says_something("Okay, but what about Tuesday?")
    # Whisper's "you" after a backchannel is the quiet after it, not a word (held out: an
    # "I see" heard as "I see you" cancelled the reply); a "you" that is said still counts.
    assert not says_something("I see you")
    assert says_something("You?") and says_something("Could you?") and says_something("You see")


# -- transcripts -----------------------------------------------------------------------
def test_partial_deltas_send_only_words_two_partials_agree_on_and_never_take_one_back():
    t = Transcripts()
    assert t.partial("i", "What is") == ""
    assert t.partial("i", "What is the") == "What is"
    assert t.partial("i", "What is the weather") == " the"
    assert t.partial("i", "What is a whether") == "", "a changed word is not sent, nor taken back"
    assert t.partial("i", "What is the weather like") == ""
    assert t.partial("i", "What is the weather like today") == " weather like"


# -- the session: candidate reuse and the prepared reply ---------------------------------
def session(td: TurnDetection = SEMANTIC, probs: list[float] | None = None) -> Session:
    vad = Script(probs if probs is not None else [0.9] * 40 + [0.0] * 400)
    settings = SessionSettings(input_rate=RATE, turn_detection=td)
    return Session("sess_test", 0.0, settings=settings, voice_activity=vad, ears=HEARS_ALL)


def hear(s: Session, n: int) -> list:
    out = []
    for _ in range(n):
        out += s.hear(LOUD.tobytes(), 0.0)
    return out


def test_the_turn_takes_its_candidate_and_starts_the_reply_it_prepared():
    s = session()
    out = hear(s, 40)
    partials = [a for a in out if isinstance(a, Transcribe) and a.kind == "partial"]
    assert partials
    item = partials[0].item_id
    out = s.on_transcript(Heard(item, "Tell me", "partial", partials[0].upto), 0.0)
    out += s.on_transcript(Heard(item, "Tell me a", "partial", partials[1].upto), 0.0)
    assert [e.delta for e in out if isinstance(e, TranscriptionDelta)] == ["Tell me"]
    out = hear(s, 10)
    [candidate] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    *first, last = [a for a in out if isinstance(a, PredictTurn)]
    assert len(first) + 1 == len(ASKS)
    out = s.on_transcript(Heard(item, "Tell me a joke.", "candidate", candidate.upto, 95.0), 0.0)
    [prepared] = [a for a in out if isinstance(a, PrepareReply)]
    assert prepared.plan.messages[-1] == {"role": "user", "content": "Tell me a joke."}
    assert not [e for e in out if isinstance(e, BufferCommitted)], "the model has not answered yet"
    for ask in first:
        assert not [e for e in s.on_turn_probability(ask.speech_end, 0.99, 0.0) if isinstance(e, BufferCommitted)]
    out = s.on_turn_probability(last.speech_end, 0.99, 0.0)
    kinds = [type(e) for e in out]
    assert BufferCommitted in kinds and TranscriptionCompleted in kinds
    assert not [a for a in out if isinstance(a, Transcribe)], "the turn is not transcribed again"
    [done] = [e for e in out if isinstance(e, TranscriptionCompleted)]
    assert done.transcript == "Tell me a joke." and done.recognition_ms == 0.0
    [start] = [a for a in out if isinstance(a, StartReply)]
    assert start.plan == prepared.plan, "what was prepared is what is asked for (one value, compared whole)"


def test_a_turn_that_ends_before_its_candidate_comes_waits_for_it():
    s = session(replace(SEMANTIC, type="server_vad", silence_duration_ms=300))
    out = hear(s, 40 + 8)
    [candidate] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    out = hear(s, 5)  # the silence window ends the turn; the candidate is still being decoded
    assert [e for e in out if isinstance(e, BufferCommitted)]
    assert not [a for a in out if isinstance(a, Transcribe)], "it waits for the candidate"
    out = s.on_transcript(Heard(candidate.item_id, "Hello there.", "candidate", candidate.upto), 0.2)
    [done] = [e for e in out if isinstance(e, TranscriptionCompleted)]
    assert done.transcript == "Hello there." and done.recognition_ms == pytest.approx(200.0)
    assert [a for a in out if isinstance(a, StartReply)]


def test_a_duck_and_a_resume_reach_the_wire_for_a_backchannel():
    probs = [0.9] * 40 + [0.0] * 40 + [0.9] * 12 + [0.0] * 200
    s = session(probs=probs)
    out = hear(s, 50)
    [candidate] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    questions = [a for a in out if isinstance(a, PredictTurn)]
    s.on_transcript(Heard(candidate.item_id, "Tell me a story.", "candidate", candidate.upto), 0.0)
    assert len(questions) == len(ASKS)
    out = [e for q in questions for e in s.on_turn_probability(q.speech_end, 0.99, 0.0)]
    [start] = [a for a in out if isinstance(a, StartReply)]
    s.replies.playing.first_audio = 0.0  # type: ignore[union-attr]  # the reply is playing
    out = hear(s, 30 + 12)
    ducks = [e for e in out if isinstance(e, AudioDucked)]
    assert ducks and ducks[0].ref.response_id == start.response_id
    out = hear(s, 6)
    [candidate] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    out = s.on_transcript(Heard(candidate.item_id, "Mhm.", "candidate", candidate.upto), 0.0)
    assert [type(e) for e in out if isinstance(e, AudioResumed)] == [AudioResumed]
    assert s.replies.active is not None and s.replies.active.id == start.response_id, "not cancelled"


# -- a turn under sound that never stops -------------------------------------------------
def test_a_turn_ends_where_its_words_did_while_quieter_babble_goes_on():
    ears = Listener(Script([0.9] * 400), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 60)  # ~1.9 s of the user's voice (Silero would hear the babble behind it as speech too)
    partials = of(Partial, out)
    for i, p in enumerate(partials):
        ears.on_partial(" ".join(["word"] * (i + 1)), p.upto)  # the words grow while the user speaks
    words_end = partials[-1].upto
    out = []
    while len(of(AskTurn, out)) < len(ASKS):  # the voice stops; babble (20 dB down, "speech" to the VAD) goes on
        step = feed(ears, 1, pcm=QUIET)
        for p in of(Partial, step):
            ears.on_partial(" ".join(["word"] * len(partials)), p.upto)  # no new words
        out += step
        assert len(out) < 100
    [paused] = of(SpeechPaused, out)
    ask = of(AskTurn, out)[0]
    assert paused.speech_end == words_end == ask.speech_end, "the speech ended where the words did"
    assert ears.vad.samples - words_end >= ms(800), "two partials without new words first"
    for _ in ASKS:
        ears.on_turn_probability(words_end, 0.99)
    out = ears.on_candidate(words_end, "Word word word word.")
    [turn] = of(Turn, out)
    assert turn.audio_end == words_end + ms(QUICK_MS), "the turn ended though the babble never stopped"
    out = feed(ears, 30, pcm=QUIET)
    assert not of(Started, out), "the babble does not start speech of its own"


def test_under_a_bed_heard_before_the_words_the_turn_ends_at_the_floor_before_the_words_stall():
    """Babble heard before the user spoke sets the floor; when the level is back at it
    the words have ended, sooner than the partials can hear them stop (STALL_MS)."""
    ears = Listener(Script([0.9] * 400), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 30, pcm=QUIET)  # ~1 s of the bed alone ("speech" to the VAD)
    for p in of(Partial, out):
        ears.on_partial("", p.upto)  # no words in it
    out = feed(ears, 45)  # the user's voice over it
    partials = of(Partial, out)
    for i, p in enumerate(partials):
        ears.on_partial(" ".join(["word"] * (i + 1)), p.upto)
    words_end = ears.vad.samples
    out = []
    while not (of(AskTurn, out) and of(SpeechPaused, out)):  # the voice stops; the bed goes on
        step = feed(ears, 1, pcm=QUIET)
        for p in of(Partial, step):
            ears.on_partial(" ".join(["word"] * len(partials)), p.upto)  # no new words
        out += step
        assert ears.vad.samples - words_end < ms(STALL_MS), "before any partial heard the words stop for STALL_MS"
    [paused] = of(SpeechPaused, out)
    # (and a soft last sound's allowance after it: the waits were fitted on voice activity's ends)
    assert abs(paused.speech_end - words_end - ms(SOFT_TAIL_MS)) <= WINDOW, "the speech ended where the voice did"
    for _ in ASKS:
        ears.on_turn_probability(paused.speech_end, 0.99)
    out = ears.on_candidate(paused.speech_end, "Word word word word.") + feed(ears, 10, pcm=QUIET)
    assert of(Turn, out), "the turn ended though the bed never stopped"


def test_words_no_partial_heard_stop_do_not_end_the_speech():
    """A busy recogniser skips partials: "Sorry" heard, then none for two seconds of "to
    interrupt you there" (softer than its stressed first word) is not the end of the words,
    and the rest of the barge-in is not taken for the sound behind the user."""
    ears = Listener(Script([0.9] * 400), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 8, replying=True)
    first, *unanswered = of(Partial, out)
    ears.on_partial("Sorry", first.upto)
    softer = np.full(WINDOW, 1200, np.int16)  # 8 dB under the first word: a stall's drop
    out = feed(ears, 60, pcm=softer, replying=True)  # its partials are never answered
    assert not of(Stopped, out) and ears.in_speech, "the speech went on while no partial heard it"
    assert of(Interrupt, out), "and it interrupted the reply"
    # A partial that hears no new word for STALL_MS of it: now the words have stopped.
    later = of(Partial, out)[-1]
    assert later.upto - first.upto >= ms(800)
    ears.on_partial("Sorry", later.upto)
    out = feed(ears, 30, pcm=softer, replying=True)
    [stopped] = of(Stopped, out)
    assert stopped.speech_end == first.upto and of(Turn, out), "the turn ended where its words did"


def test_speech_over_a_reply_is_transcribed_sooner_so_an_interruption_is_judged_sooner():
    ears = Listener(Script([0.9] * 60), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 24, replying=True)  # 768 ms of speech over a reply: it ducks, and is judged
    assert of(Duck, out), "the reply ducked"
    partials = of(Partial, out)
    first = -(-JUDGE_FROM_MS // 32) * 32  # in whole 32 ms windows
    every = -(-JUDGE_EVERY_MS // 32) * 32
    assert every < PARTIAL_EVERY_MS
    expected = [ms(first + every * k) for k in range((768 - first) // every + 1)]
    assert [p.upto for p in partials] == expected, "from ~200 ms of it, every ~100 ms, not 400"
    assert all(p.judging for p in partials), "each is urgent: it waits for the last to decode, not dropped"
    last = partials[-1].upto
    ears.on_partial("wait, please stop", last)
    assert ears.barge_in.state is BargeState.INTERRUPTED
    out = feed(ears, 27, replying=True)
    assert [p.upto - last for p in of(Partial, out)] == [ms(416), ms(832)], "judged: every 400 ms again"
    assert not any(p.judging for p in of(Partial, out)), "and they may be dropped again"


def test_a_recogniser_that_lags_does_not_end_a_turn_the_user_is_still_speaking():
    ears = Listener(Script([0.9] * 400), RATE, SEMANTIC, floor_dbfs=float("-inf"), ears=HEARS_ALL)
    out = feed(ears, 20)
    ears.on_partial("I need a recipe", of(Partial, out)[-1].upto)
    out = feed(ears, 60)  # the words stay stuck for two seconds, but the voice goes on at its level
    for p in of(Partial, out):
        ears.on_partial("I need a recipe", p.upto)
    assert not of(SpeechPaused, out) and not of(AskTurn, out) and not of(Stopped, out)


def test_one_word_of_a_fragment_does_not_cancel_a_reply_two_do():
    from duplex.app.core.listening.bargein import FRAGMENT_MS, BargeIn

    def paused() -> BargeIn:
        b = BargeIn(SEMANTIC, RATE, words=True)
        b.started(0, replying=True)
        return b

    b = paused()
    assert b.on_words("Ride.", loud=True, heard_ms=FRAGMENT_MS - 200) == [], "'Right' cut short: wait for more"
    assert b.state is BargeState.JUDGING
    assert b.on_words("Ride.", loud=True, heard_ms=FRAGMENT_MS + 100), "the same word heard whole: a turn"
    assert paused().on_words("Wait, stop.", loud=True, heard_ms=FRAGMENT_MS - 200), "two words are enough at once"
    b = paused()
    assert b.on_words("Right.", loud=True, heard_ms=FRAGMENT_MS - 200) == [] and b.judged, "a backchannel, soon"
    assert paused().on_words("Stop.", loud=True, heard_ms=FRAGMENT_MS - 300), "a command alone is enough at once"
    assert paused().on_words("Stop.", loud=False, heard_ms=FRAGMENT_MS - 300) == [], "not from a loudspeaker"


def test_words_that_are_only_pronouns_and_auxiliaries_do_not_cancel_a_reply_until_more_is_said():
    from duplex.app.core.listening.bargein import BargeIn

    b = BargeIn(SEMANTIC, RATE, words=True)
    b.started(0, replying=True)
    # What Whisper made of short backchannels ("yeah", "uh-huh", "mhm") over a reply: the tune
    # part's "You had.", the held-out part's others; and the start of a request.
    # And thanks: "Thank you." was Whisper's for a noise bed under a reply's echo (-15 dB, real time).
    for guess in ("You had.", "I'm her.", "And then.", "Yeah. You had?", "Thank you.", "Thanks.", "Could you"):
        assert b.on_words(guess, loud=True, heard_ms=600) == [], guess
        assert b.state is BargeState.JUDGING, "still judged: neither a turn nor a backchannel yet"
    assert b.on_words("Could you order a pizza?", loud=True, heard_ms=900), "a request says what it is about"
    for said in ("Don't.", "What?", "Not now.", "Stop it.", "That's why I.", "Thanks, stop."):
        b = BargeIn(SEMANTIC, RATE, words=True)
        b.started(0, replying=True)
        assert b.on_words(said, loud=True, heard_ms=600), f"{said!r}: negation, questions and commands still cancel"
    b = BargeIn(SEMANTIC, RATE, words=True)
    b.started(0, replying=True)
    assert b.on_words("You had.", loud=True, heard_ms=600) == []
    assert b.speaking(0, ms(900)), "speech that goes on at the user's level still cancels by its length"


def test_an_unsure_transcript_is_dropped_as_a_guess_unless_it_holds_a_command():
    from duplex.pipeline.recognizers.whisper import Decoded

    # tiny.en on one voice's short "Stop" (scored -1.32) and on a cough (Whisper's usual guess).
    assert Decoded("Stop it.", -1.32, 0.08, 0.7).words() == "Stop it."
    assert Decoded("Hang on.", -1.40, 0.17, 0.8).words() == "Hang on."
    assert Decoded("Thank you.", -1.32, 0.08, 0.7).words() == "", "a guess"
    assert Decoded("Stone!", -1.36, 0.29, 0.6).words() == "", "no command in it: a guess"
    assert Decoded("Thank you.", -0.5, 0.08, 0.7).words() == "Thank you.", "sure: kept"


def test_speech_heard_as_nothing_must_last_longer_to_cancel_by_its_length():
    from duplex.app.core.listening.bargein import UNHEARD_MS, BargeIn

    td = replace(SEMANTIC, barge_in_min_ms=800)
    b = BargeIn(td, RATE, words=True)
    b.started(0, replying=True)
    assert b.speaking(0, ms(800)), "800 ms at the user's level, nothing heard yet: the user talking"
    b.stopped(0, ms(800))
    b.started(0, replying=True)
    assert b.on_words("", loud=True, heard_ms=600) == []  # heard, as nothing (a slow "Okay" Whisper drops)
    silenced = b.speaking(0, ms(900))
    assert [type(x).__name__ for x in silenced] == ["Hold"] and b.state is BargeState.HEARD_NOTHING, "not cancelled"
    ended = b.stopped(0, ms(900))
    assert [type(x).__name__ for x in ended.signals] == ["Resume"] and ended.turn is False, "resumed, not a turn"
    b.started(0, replying=True)
    b.on_words("", loud=True, heard_ms=600)
    assert b.speaking(0, ms(800 + UNHEARD_MS)), "long enough all the same: cancelled"
