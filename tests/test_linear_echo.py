"""The linear canceller: the reply's echo taken out from under the user's voice.

The frames the near-end judge passes as the user's skip AEC3 (its suppressor cuts the
start of a user's words); a filter learned on the echo alone takes the reply's echo out
of them, through a room with the bench's reflections and through one with a diffuse
tail and a distorting speaker, and learns nothing from the user's voice or a reference
that is not what the microphone heard.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from duplex.app.clients.room import HARSH, Echo, Room
from duplex.pipeline.linear_echo import MIN_ERLE_DB, LinearEcho
from duplex.pipeline.webrtc_apm import WebRtcCleaner
from tests.test_echo_canceller import RATE, at_dbfs, db, speech

STEP = RATE // 100
REPLY = ("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_05_am_michael")


def under_the_voice(room: str, *, linear: bool) -> tuple[float, float, float, float]:
    """A reply echoed at -15 dB, a user 6 dB under it from 1.65 s: (echo, what is left of
    it, the voice, what was passed of it) in dB over the frames passed as the user's on
    their whole band's level (a frame passed on its high band alone, a fricative under the
    echo's vowels, is under more echo than a linear filter takes out of a distorting
    speaker: 5.5 dB over every frame passed in the harsh room, 9.6 over these)."""
    far = at_dbfs(speech(*REPLY), -20)
    user = at_dbfs(speech("turn_10_bf_emma"), -26)
    at = int(1.65 * RATE)
    talk = np.zeros(far.size)
    talk[at : at + user.size] = user[: far.size - at]
    echoes = Echo(replace(HARSH if room == "harsh" else Room(), level_db=-15.0), RATE)
    echo = np.concatenate([echoes(far[i : i + STEP]) for i in range(0, far.size, STEP)])
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    if not linear:
        cleaner.linear.process = lambda near, far, **_: near  # type: ignore[method-assign]
    left, under, voice, passed = [], [], [], []
    for i in range(0, far.size, STEP):
        near = np.clip(talk[i : i + STEP] + echo[i : i + STEP], -32768, 32767).astype(np.int16)
        out = cleaner.process(near, far[i : i + STEP]).astype(np.float64)
        if at <= i < at + user.size and cleaner.near_end._held and cleaner.near_end.by == "level":
            left.append(out - talk[i : i + STEP])
            under.append(echo[i : i + STEP])
            voice.append(talk[i : i + STEP])
            passed.append(out)
    assert len(under) > 100, "most of the user's frames are passed as theirs"
    return db(np.concatenate(under)), db(np.concatenate(left)), db(np.concatenate(voice)), db(np.concatenate(passed))


@pytest.mark.parametrize("room", ["reflections", "harsh"])
def test_the_replys_echo_is_taken_out_from_under_the_users_voice(room):
    # Measured: 15.7 dB (the bench's room) and 9.6 (the harsh one) 1.65 s into the reply
    # (7.4 and 6.4 over every frame passed before the high band was judged too); passed
    # as they came, none.
    echo, left, voice, passed = under_the_voice(room, linear=True)
    assert echo - left >= 6.0, f"{echo - left:.1f} dB of the echo taken out"
    assert abs(passed - voice) <= 1.0, "the voice passes as it came"
    echo_before, left_before, _, _ = under_the_voice(room, linear=False)
    assert abs(echo_before - left_before) < 0.5, "without it, the echo under the voice was all there"


def test_nothing_is_learned_from_the_users_voice():
    far, user = speech(*REPLY[:2]), speech("turn_10_bf_emma")
    linear = LinearEcho(STEP)
    for i in range(0, min(far.size, user.size) - STEP, STEP):
        out = linear.process(user[i : i + STEP], far[i : i + STEP], lag=6, user=True)
        assert out is user[i : i + STEP] or np.array_equal(out, user[i : i + STEP])
    assert not np.any(linear._w), "the filter is as it started"


def test_a_reference_that_is_not_what_was_heard_is_never_used():
    # A reply the microphone never heard (another speaker's audio, or the wrong one):
    # the filter learns nothing it can take out, so every frame passes as it came.
    far, heard = speech(*REPLY), speech("turn_10_bf_emma", "turn_03_af_heart", "turn_09_bf_emma", "turn_10_bf_emma")
    n = min(far.size, heard.size) - STEP
    echoes = Echo(Room(level_db=-15.0), RATE)
    linear = LinearEcho(STEP)
    for i in range(0, n, STEP):
        near = echoes(heard[i : i + STEP]).astype(np.int16)
        assert np.array_equal(linear.process(near, far[i : i + STEP], lag=6, user=False), near)
    assert linear.erle_db < MIN_ERLE_DB


def test_before_the_delay_is_found_nothing_is_taken_out():
    far = speech(*REPLY[:1])
    echoes = Echo(Room(level_db=-15.0), RATE)
    linear = LinearEcho(STEP)
    for i in range(0, far.size - STEP, STEP):
        near = echoes(far[i : i + STEP]).astype(np.int16)
        assert np.array_equal(linear.process(near, far[i : i + STEP], lag=None, user=False), near)
