"""Session time and the playback model that paces output (pure, time injected)."""

from __future__ import annotations

import pytest

from duplex.app.core.pacing import Playout, SessionClock


def test_clock_follows_input_while_streaming_however_fast_it_arrives():
    clock = SessionClock(start_wall=100.0, idle_s=0.3)
    for i in range(50):  # 5 s of input sent within 50 ms of wall time
        clock.on_input(0.1, wall=100.0 + i * 0.001)
    assert clock.now(100.05) == pytest.approx(5.0)
    assert clock.streaming(100.05)


def test_clock_falls_back_to_wall_time_and_never_steps_back():
    clock = SessionClock(start_wall=0.0, idle_s=0.3)
    assert clock.now(2.0) == pytest.approx(2.0)  # no input yet: wall time
    clock.on_input(0.02, wall=2.0)
    assert clock.now(2.1) == pytest.approx(2.0)  # streaming: input time
    t_idle = clock.now(5.0)
    assert t_idle == pytest.approx(5.0)  # stopped streaming: wall time carries on
    clock.on_input(0.02, wall=5.0)
    assert clock.now(5.0) >= t_idle  # resuming never steps back
    assert clock.now(5.1) == pytest.approx(clock.now(5.0))


def test_clock_does_not_count_a_network_stall_twice():
    clock = SessionClock(start_wall=0.0, idle_s=0.3)
    clock.on_input(1.0, wall=1.0)
    # 1 s stall, then the client delivers the 1 s of audio it had buffered.
    clock.on_input(1.0, wall=2.0)
    assert clock.now(2.0) == pytest.approx(2.0)


def test_playout_model_without_acks():
    p = Playout(rate=1000, lead_s=0.25)
    assert p.may_send(100, t=0.0)  # nothing sent: the client is starving
    p.on_sent(100, t=0.0)
    p.on_sent(100, t=0.0)
    assert p.played(0.05) == 50
    assert p.played(0.5) == 200  # never past what was sent
    assert p.may_send(50, 0.0) and not p.may_send(100, 0.0)
    assert p.seconds_until(100, 0.0) == pytest.approx(0.05)


@pytest.mark.parametrize("lead_s", [0.0, 0.02, 0.05, 0.1, 0.25])
def test_paced_output_keeps_real_time_at_any_lead(lead_s: float):
    """Waiting as long as seconds_until says, then sending, plays at real time even
    when a chunk is larger than the lead (a lead of 0 once took twice real time)."""
    p = Playout(rate=1000, lead_s=lead_s)
    t, chunk = 0.0, 80
    while p.sent < 4000:
        t += p.seconds_until(chunk, t)
        assert p.may_send(chunk, t)
        p.on_sent(chunk, t)
    assert t <= 4.0  # the last chunk leaves before the reply's length has played


def test_playout_gap_restarts_the_model_when_audio_arrives_late():
    p = Playout(rate=1000, lead_s=0.25)
    p.on_sent(100, t=0.0)
    p.on_sent(100, t=1.0)  # the talker was late: the client played silence in between
    assert p.played(1.05) == 150


def test_acks_replace_the_model():
    p = Playout(rate=1000, lead_s=0.25)
    p.on_sent(500, t=0.0)
    p.on_ack(100, t=0.3)  # the client started late and reports it
    assert p.played(0.4) == 200
    p.on_ack(50, t=0.5)  # an older, smaller ack is ignored
    assert p.played(0.5) == 300
    p.on_ack(10_000, t=0.6)  # clamped to what was sent
    assert p.played(0.6) == 500


def test_pause_freezes_playback_and_blocks_output():
    p = Playout(rate=1000, lead_s=0.25)
    p.on_sent(500, t=0.0)
    p.pause(0.1)
    assert p.played(0.4) == 100
    assert not p.may_send(1, 0.4) and p.seconds_until(1, 0.4) == float("inf")
    p.resume(1.0)
    assert p.played(1.1) == 200


def test_lead_bounds_what_is_released():
    p = Playout(rate=1000, lead_s=0.25)
    t, released = 0.0, []
    while p.sent < 3000:
        if p.may_send(60, t):
            p.on_sent(60, t)
        released.append(p.sent - p.played(t))
        t += 0.01
    assert max(released) <= 250 + 60


def test_a_later_ack_does_not_move_where_playback_was_earlier():
    p = Playout(rate=1000, lead_s=0.25)
    p.on_sent(2000, t=0.0)
    p.on_ack(100, t=0.1)
    p.on_ack(400, t=0.5)
    assert p.played(0.2) == 200  # from the ack at 0.1, not the one at 0.5
    assert p.played(0.45) == 400  # never past what the next ack says
    assert p.played(0.05) <= 100


def test_an_earlier_input_sample_keeps_its_time_after_a_gap():
    """A barge-in's onset maps to one session time, before and after input resumes from a stall."""
    rate = 24000
    clock = SessionClock(0.0)
    for i in range(50):  # 1 s of input in 20 ms frames, in real time
        clock.on_input(0.02, 0.02 * (i + 1))
    onset = int(0.9 * rate)
    before = clock.time_of_input(onset, rate)
    clock.on_input(0.02, 1.6)  # the next frame comes 0.6 s late: time moved on by the wall clock
    assert clock.time_of_input(onset, rate) == before
    later = clock.time_of_input(int(1.0 * rate), rate)
    assert later > 1.0 + 0.5, "the late frame is placed when it arrived"
