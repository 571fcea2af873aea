"""Words that stopped under sound that goes on, sans I/O: :class:`Stall` names the input
sample where a segment's words stopped growing once a partial has heard them not grow
for :data:`STALL_MS` and the sound since is :data:`DROP_DB` quieter than the speech
before; words that grow again or sound back at the user's level end it. Time is input
samples, speech windows are handed in with their levels."""

from __future__ import annotations

import math

import pytest

from duplex.app.core.listening.stall import DROP_DB, STALL_MS, Stall
from duplex.app.core.units import ms_to_samples

RATE = 16000
WINDOW = 512
AFTER = ms_to_samples(STALL_MS, RATE)
VOICE = -20.0  # the user's words
BABBLE = VOICE - DROP_DB - 4.0  # the talk behind them, well under the drop


def windows(stall: Stall, start: int, end: int, level_db: float) -> int:
    """Speech windows at ``level_db`` from input sample ``start`` to ``end``; returns ``end``."""
    for w_end in range(start + WINDOW, end + 1, WINDOW):
        stall.window(w_end, level_db)
    return end


WORDS = "I need a recipe for dinner"


def words_then_babble(onset: int = 0, *, heard: bool = True) -> tuple[Stall, int]:
    """A segment: one second of words (a partial ends there), then babble for as long as
    a stall takes, and (``heard``) a partial of it that found no new words. Returns the
    stall and where the words stopped."""
    stall = Stall(RATE)
    stall.start(onset)
    said = windows(stall, onset, onset + 32 * WINDOW, VOICE)
    stall.heard(WORDS, said)
    windows(stall, said, said + AFTER + 2 * WINDOW, BABBLE)
    if heard:
        stall.heard(WORDS, said + AFTER)
    return stall, said


def test_the_wait_is_stall_ms_in_samples():
    assert Stall(RATE).after == AFTER == STALL_MS * RATE // 1000
    assert Stall(8000).after == STALL_MS * 8
    assert DROP_DB > 0


def test_words_that_stopped_under_quieter_sound_stall_where_they_stopped():
    stall, said = words_then_babble(heard=False)
    stall.heard(WORDS, said + AFTER - 1)
    assert stall.stalled() is None, "not yet: the words may still grow"
    stall.heard(WORDS, said + AFTER)
    assert stall.stalled() == said
    assert stall.at == said
    assert stall.since_db == pytest.approx(BABBLE)


def test_time_without_a_partial_is_no_stall():
    """Partials are spare work: a busy recogniser skips them. Words that no partial has
    heard stop ("Sorry" heard, then nothing for a second of "to interrupt you there")
    have not stopped."""
    stall, said = words_then_babble(heard=False)
    windows(stall, said + AFTER + 2 * WINDOW, said + 4 * AFTER, BABBLE)
    assert stall.stalled() is None
    assert stall.at is None and not stall.background(BABBLE)
    stall.heard(WORDS, said + AFTER)  # one comes at last: it heard no new word for STALL_MS
    assert stall.stalled() == said


def test_once_stalled_it_stays_at_the_same_sample():
    stall, said = words_then_babble()
    assert stall.stalled() == said
    stall.heard(WORDS, said + 10 * AFTER)
    assert stall.stalled() == said


def test_a_stall_follows_the_segments_onset():
    stall, said = words_then_babble(onset=5 * RATE)
    assert said == 5 * RATE + 32 * WINDOW
    assert stall.stalled() == said


def test_sound_as_loud_as_the_words_is_the_user_going_on():
    """The recogniser lags: the partial is stuck, but the user speaks on at their level."""
    stall = Stall(RATE)
    said = windows(stall, 0, 32 * WINDOW, VOICE)
    stall.heard("I need a recipe", said)
    windows(stall, said, said + AFTER + 2 * WINDOW, VOICE - 1.0)
    stall.heard("I need a recipe", said + 4 * AFTER)
    assert stall.stalled() is None
    assert stall.at is None and stall.since_db == -math.inf


def test_the_sound_since_must_drop_by_drop_db():
    for drop, stalls in ((DROP_DB - 0.5, False), (DROP_DB + 0.5, True)):
        stall = Stall(RATE)
        said = windows(stall, 0, 32 * WINDOW, VOICE)
        stall.heard("hello there", said)
        windows(stall, said, said + AFTER, VOICE - drop)
        stall.heard("hello there", said + AFTER)
        assert (stall.stalled() is not None) is stalls, drop


def test_no_words_no_stall():
    stall = Stall(RATE)
    windows(stall, 0, 32 * WINDOW, VOICE)
    windows(stall, 32 * WINDOW, 32 * WINDOW + 2 * AFTER, BABBLE)
    assert stall.stalled() is None
    stall.heard("... ?", 32 * WINDOW)
    stall.heard("... ?", 10 * AFTER)
    assert stall.words == 0 and stall.stalled() is None, "punctuation is no words"


def test_no_stall_without_speech_before_the_words_or_sound_after_them():
    early = Stall(RATE)
    early.heard("hello", 0)  # a partial before any window: nothing to compare against
    windows(early, 0, AFTER + WINDOW, BABBLE)
    early.heard("hello", 2 * AFTER)
    assert early.stalled() is None
    quiet = Stall(RATE)
    said = windows(quiet, 0, 32 * WINDOW, VOICE)
    quiet.heard("hello", said)  # and then no speech windows at all: plain silence ends the turn
    quiet.heard("hello", said + 2 * AFTER)
    assert quiet.stalled() is None


def test_words_that_grow_again_end_the_stall_and_restart_the_wait():
    stall, said = words_then_babble()
    assert stall.stalled() == said
    more = said + AFTER + 2 * WINDOW
    longer = "I need a recipe for dinner tonight please"
    stall.heard(longer, more)
    assert stall.at is None and stall.words == 8 and stall.grew_at == more
    windows(stall, more, more + AFTER, BABBLE)
    stall.heard(longer, more + AFTER - 1)
    assert stall.stalled() is None
    stall.heard(longer, more + AFTER)
    assert stall.stalled() == more


def test_a_partial_of_the_same_words_is_heard_as_no_new_words():
    stall, said = words_then_babble(heard=False)
    stall.heard(WORDS, said + AFTER)  # the same six words, later
    assert stall.words == 6 and stall.grew_at == said and stall.heard_to == said + AFTER
    assert stall.stalled() == said


def test_a_partial_of_fewer_words_is_heard_as_no_new_words():
    """In babble Whisper drops some of the user's words again: still no new ones."""
    stall, said = words_then_babble(heard=False)
    stall.heard("a recipe", said + AFTER)
    assert stall.words == 6 and stall.grew_at == said and stall.heard_to == said + AFTER
    assert stall.stalled() == said


def test_an_empty_partial_is_no_news():
    """Whisper drops a whole guess it is unsure of (a word cut off): an empty partial does
    not say that the words stopped."""
    stall, said = words_then_babble(heard=False)
    stall.heard("", said + 2 * AFTER)
    assert stall.words == 6 and stall.grew_at == said and stall.heard_to == said
    assert stall.stalled() is None


def test_words_in_contractions_count_once():
    stall = Stall(RATE)
    stall.heard("I'm here, don't go.", 100)
    assert stall.words == 4


def test_in_a_stall_only_sound_under_the_bar_is_background():
    stall, said = words_then_babble()
    assert not stall.background(BABBLE), "not stalled yet: nothing is background"
    stall.stalled()
    bar = VOICE - DROP_DB
    assert stall.background(bar - 0.5)
    assert not stall.background(bar + 0.5), "near the user's level: the user again"


def test_resumed_ends_the_stall_and_loud_sound_keeps_it_ended():
    stall, said = words_then_babble()
    assert stall.stalled() == said
    stall.resumed()
    assert stall.at is None and not stall.background(BABBLE)
    # The user speaks on at their level: the sound since the words is as loud as they were.
    windows(stall, said + AFTER + 2 * WINDOW, said + 4 * AFTER, VOICE)
    stall.heard(WORDS, said + 4 * AFTER)
    assert stall.stalled() is None


def test_a_new_segment_starts_afresh():
    stall, said = words_then_babble()
    stall.stalled()
    stall.start(10 * RATE)
    assert (stall.words, stall.grew_at, stall.heard_to, stall.at, stall.since_db) == (
        0,
        10 * RATE,
        10 * RATE,
        None,
        -math.inf,
    )
    assert not stall.background(-90.0)
    assert stall.stalled() is None
