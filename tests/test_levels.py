"""Whose sound it is, sans I/O: :class:`Levels` learns the user's speech level from
their turns, lets speech over a reply start only near that level, calls a segment at
it loud, and lets sound judged noise raise the bar for a while. Time is input samples."""

from __future__ import annotations

import math

import pytest

from duplex.app.core.listening.levels import (
    LOUD_MARGIN_DB,
    NOISE_DECAY_DB_S,
    NOISE_MARGIN_DB,
    NOMINAL_DB,
    ONSET_MARGIN_DB,
    Levels,
)

RATE = 16000


def segment(levels: Levels, *db: float) -> Levels:
    """One segment of speech windows at these levels."""
    levels.start()
    for level in db:
        levels.speech(level)
    return levels


def learned(*turns: float) -> Levels:
    """Levels after the user's turns, each one segment at that level."""
    levels = Levels(RATE)
    for level in turns:
        segment(levels, level, level, level).turn()
    return levels


# -- the user's level, learned from turns -------------------------------------------------
def test_before_any_turn_the_user_is_at_the_nominal_level():
    levels = Levels(RATE)
    assert levels.user_db is None and levels.user == NOMINAL_DB
    assert levels.segment_db == -math.inf


def test_the_first_turn_sets_the_users_level_and_later_ones_move_it_halfway():
    levels = learned(-20.0)
    assert levels.user_db == pytest.approx(-20.0) and levels.user == levels.user_db
    segment(levels, -30.0).turn()
    assert levels.user == pytest.approx(-25.0)
    segment(levels, -31.0).turn()
    assert levels.user == pytest.approx(-28.0)


def test_a_segments_level_is_its_mean_power_not_its_mean_db():
    levels = segment(Levels(RATE), -20.0, -30.0)
    assert levels.segment_db == pytest.approx(10 * math.log10((10**-2 + 10**-3) / 2))
    assert levels.segment_db > -25.0, "louder windows weigh more"


def test_a_turn_without_speech_windows_teaches_nothing():
    levels = Levels(RATE)
    segment(levels).turn()
    assert levels.user_db is None
    levels = learned(-18.0)
    segment(levels).turn()
    assert levels.user == pytest.approx(-18.0)


def test_a_new_segment_forgets_the_last_ones_windows():
    levels = segment(Levels(RATE), -10.0, -10.0)
    levels.start()
    assert levels.segment_db == -math.inf
    levels.speech(-40.0)
    assert levels.segment_db == pytest.approx(-40.0)


# -- onsets, with and without a reply -------------------------------------------------------
def test_without_a_reply_and_without_noise_any_level_may_start_speech():
    levels = learned(-15.0)
    assert levels.onset_allowed(-90.0, 0, replying=False)
    assert levels.onset_allowed(-90.0, 10 * RATE, replying=False)


def test_over_a_reply_speech_must_start_within_the_onset_margin_of_the_nominal_level():
    levels = Levels(RATE)
    assert levels.onset_allowed(NOMINAL_DB - ONSET_MARGIN_DB, 0, replying=True)
    assert not levels.onset_allowed(NOMINAL_DB - ONSET_MARGIN_DB - 0.5, 0, replying=True)


def test_over_a_reply_the_bar_follows_the_learned_level():
    for user in (-14.0, -36.0):
        levels = learned(user)
        assert levels.onset_allowed(user - ONSET_MARGIN_DB + 0.5, 0, replying=True)
        assert not levels.onset_allowed(user - ONSET_MARGIN_DB - 0.5, 0, replying=True)
    # A TV 1 dB under the nominal bar: it would duck a reply before the user's first turn,
    # not once a loud user has been heard.
    tv = NOMINAL_DB - ONSET_MARGIN_DB + 1.0
    assert Levels(RATE).onset_allowed(tv, 0, replying=True)
    assert not learned(NOMINAL_DB + 4.0).onset_allowed(tv, 0, replying=True)


def test_a_segment_is_loud_within_the_loud_margin_of_the_users_level():
    levels = learned(-20.0)
    assert segment(levels, -20.0 - LOUD_MARGIN_DB + 0.5).loud
    assert not segment(levels, -20.0 - LOUD_MARGIN_DB - 0.5).loud
    assert not segment(levels).loud, "no speech yet: not loud"
    assert segment(Levels(RATE), NOMINAL_DB - LOUD_MARGIN_DB).loud, "before any turn: against the nominal level"


# -- noise raises the bar, and the bar falls back ---------------------------------------------
def test_noise_bars_onsets_below_its_level_plus_the_margin_even_without_a_reply():
    levels = Levels(RATE)
    levels.noise(0, -30.0)
    assert levels.onset_allowed(-30.0 + NOISE_MARGIN_DB, 0, replying=False)
    assert not levels.onset_allowed(-30.0 + NOISE_MARGIN_DB - 0.5, 0, replying=False)
    assert NOISE_MARGIN_DB > 0
    assert not levels.onset_allowed(-30.0, 0, replying=False), "the noise itself starts no speech"


def test_the_noise_bar_falls_back_with_time():
    levels = Levels(RATE)
    levels.noise(RATE, -30.0)  # judged at 1 s
    for seconds in (0.0, 0.5, 10.0):
        bar = -30.0 + NOISE_MARGIN_DB - NOISE_DECAY_DB_S * seconds
        now = RATE + int(seconds * RATE)
        assert levels.onset_allowed(bar + 0.25, now, replying=False), seconds
        assert not levels.onset_allowed(bar - 0.25, now, replying=False), seconds
    assert NOISE_DECAY_DB_S > 0


def test_noise_over_a_reply_raises_the_bar_above_the_users_margin_until_it_decays():
    levels = learned(-20.0)
    reply_bar = -20.0 - ONSET_MARGIN_DB
    noise = reply_bar + 4.0  # over the reply's bar by its own margin and more
    levels.noise(0, noise)
    assert not levels.onset_allowed(noise + NOISE_MARGIN_DB - 0.5, 0, replying=True)
    assert levels.onset_allowed(noise + NOISE_MARGIN_DB, 0, replying=True)
    # Long after, the noise's bar has fallen far below: the user's margin is the bar again.
    later = int((NOISE_MARGIN_DB + 20.0) / NOISE_DECAY_DB_S * RATE)
    assert not levels.onset_allowed(reply_bar - 0.5, later, replying=True)
    assert levels.onset_allowed(reply_bar, later, replying=True)


def test_noise_without_a_level_is_the_current_segments_level():
    levels = segment(Levels(RATE), -35.0, -35.0)
    levels.noise(0)
    assert not levels.onset_allowed(-35.0 + NOISE_MARGIN_DB - 0.5, 0, replying=False)
    assert levels.onset_allowed(-35.0 + NOISE_MARGIN_DB + 0.01, 0, replying=False)


def test_noise_with_no_level_to_judge_changes_nothing():
    levels = Levels(RATE)
    levels.noise(0)  # no segment windows: -inf
    levels.noise(0, -math.inf)
    assert levels.onset_allowed(-90.0, 0, replying=False)


def test_the_latest_noise_sets_the_bar():
    levels = Levels(RATE)
    levels.noise(0, -10.0)
    levels.noise(0, -40.0)
    assert levels.onset_allowed(-40.0 + NOISE_MARGIN_DB, 0, replying=False), "a quieter noise since: its bar"
    assert not levels.onset_allowed(-40.0 + NOISE_MARGIN_DB - 0.5, 0, replying=False)


def test_the_rate_sets_how_fast_the_bar_falls():
    slow, fast = Levels(48000), Levels(8000)
    slow.noise(0, -30.0)
    fast.noise(0, -30.0)
    # 8000 samples: a second at 8 kHz, a sixth of one at 48 kHz.
    level = -30.0 + NOISE_MARGIN_DB - NOISE_DECAY_DB_S / 2
    assert fast.onset_allowed(level, 8000, replying=False)
    assert not slow.onset_allowed(level, 8000, replying=False)
