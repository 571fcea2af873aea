"""Turn detection and barge-in, sans I/O, driven by synthetic voice-activity signals.

A scripted voice-activity model answers each window with the probability the test
wrote for it, so every boundary and decision can be checked to the sample.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from duplex.app.core.listening.bargein import BargeIn, BargeState, Ending
from duplex.app.core.listening.detectors import SilenceWindow, turn_detector
from duplex.app.core.listening.ears import DEAF
from duplex.app.core.listening.listener import TAIL_MS, Listener
from duplex.app.core.listening.signals import Duck, Hold, Interrupt, Resume, Started, Stopped, Turn
from duplex.app.core.settings import TurnDetection

RATE = 16000  # the model's rate too: one window is 512 input samples
WINDOW = 512


class Script:
    """A voice-activity model that reads its probabilities from a list, window by window."""

    name = "script"
    rate = RATE
    window = WINDOW

    def __init__(self, probabilities: list[float]) -> None:
        self.probabilities = probabilities
        self.asked = 0

    def stream(self) -> Script:
        return self

    def probability(self, window: np.ndarray) -> float:
        p = self.probabilities[self.asked] if self.asked < len(self.probabilities) else 0.0
        self.asked += 1
        return p

    def skip(self, window: np.ndarray) -> None:
        self.asked += 1


def windows(ms: int) -> int:
    return ms * RATE // 1000 // WINDOW


def listen(probabilities: list[float], td: TurnDetection, *, replying: bool = False, extra: int = 40) -> list:
    """Feed one window of (loud) audio per probability, plus ``extra`` quiet windows."""
    ears = Listener(Script(probabilities), RATE, td, floor_dbfs=float("-inf"))
    loud = np.full(WINDOW, 3000, np.int16)
    out = []
    for _ in range(len(probabilities) + extra):
        out += ears.push(loud, replying=replying)
    return out


HOLD_MS = 300
TD = TurnDetection(
    threshold=0.5,
    prefix_padding_ms=0,
    silence_duration_ms=500,
    min_speech_ms=150,
    barge_in_min_ms=800,
    barge_in_hold_ms=HOLD_MS,
)


def test_speech_starts_at_the_first_window_over_the_threshold_and_ends_after_the_silence_window():
    probs = [0.1] * 10 + [0.9] * 20 + [0.1] * 30
    out = listen(probs, TD)
    started = [s for s in out if isinstance(s, Started)]
    stopped = [s for s in out if isinstance(s, Stopped)]
    assert [s.onset for s in started] == [10 * WINDOW]
    assert [s.speech_end for s in stopped] == [30 * WINDOW]
    # The turn ends 500 ms after the speech, at the first window that completes that much silence.
    assert stopped[0].audio_end == 30 * WINDOW + 500 * RATE // 1000
    [turn] = [s for s in out if isinstance(s, Turn)]
    assert turn.audio_start == 10 * WINDOW and turn.audio_end == stopped[0].audio_end
    # The recogniser gets the speech and a short tail, not the whole silence window.
    assert turn.audio.size == 20 * WINDOW + TAIL_MS * RATE // 1000


def test_hysteresis_keeps_a_dip_in_speech_and_a_short_pause_does_not_end_the_turn():
    pause = windows(400)  # shorter than the 500 ms window
    probs = [0.9] * 10 + [0.4] * 3 + [0.9] * 5 + [0.0] * pause + [0.9] * 10 + [0.0] * 30
    out = listen(probs, TD)
    assert [type(s) for s in out if isinstance(s, (Started, Stopped, Turn))] == [Started, Stopped, Turn]


def test_a_click_is_not_a_turn():
    out = listen([0.9] * windows(100) + [0.0] * 30, TD)
    assert [type(s) for s in out] == [Started, Stopped]


def test_the_silence_window_is_the_setting():
    for silence in (200, 800):
        td = replace(TD, silence_duration_ms=silence)
        [stopped] = [s for s in listen([0.9] * 20 + [0.0] * 40, td) if isinstance(s, Stopped)]
        waited = stopped.audio_end - stopped.speech_end
        assert waited == silence * RATE // 1000


def test_speech_over_a_reply_pauses_it_and_a_short_sound_resumes_it_without_a_turn():
    out = listen([0.9] * windows(250) + [0.0] * 30, TD, replying=True)
    assert [type(s) for s in out] == [Started, Duck, Stopped, Resume]


def test_speech_over_a_reply_that_goes_on_silences_it_once_and_it_resumes_if_the_speech_is_no_turn():
    out = listen([0.9] * windows(500) + [0.0] * 30, TD, replying=True)
    assert [type(s) for s in out] == [Started, Duck, Hold, Stopped, Resume]


def test_speech_over_a_reply_that_lasts_interrupts_it_at_the_onset_then_becomes_a_turn():
    onset = 5
    out = listen([0.0] * onset + [0.9] * windows(1200) + [0.0] * 30, TD, replying=True)
    kinds = [type(s) for s in out]
    assert kinds == [Started, Duck, Hold, Interrupt, Stopped, Turn]
    interrupt = out[kinds.index(Interrupt)]
    assert interrupt.onset == onset * WINDOW  # where the speech began, not where it was decided
    assert out[kinds.index(Hold)] == Hold(interrupt.onset)


def test_with_interrupt_response_off_speech_over_a_reply_is_only_a_turn():
    td = replace(TD, interrupt_response=False)
    out = listen([0.9] * windows(1200) + [0.0] * 30, td, replying=True)
    assert [type(s) for s in out] == [Started, Stopped, Turn]


def test_the_barge_in_policy_moves_through_its_states():
    policy = BargeIn(TD, RATE)
    assert policy.started(1000, replying=False) == [] and policy.state is BargeState.IDLE
    assert policy.stopped(1000, 2000) == Ending([], turn=None), "no reply ducked: its length decides"
    assert policy.started(1000, replying=True) == [Duck(1000)] and policy.state is BargeState.JUDGING
    assert policy.speaking(1000, 1000 + (HOLD_MS - 1) * RATE // 1000) == []
    assert policy.speaking(1000, 1000 + HOLD_MS * RATE // 1000) == [Hold(1000)], "going on: silenced"
    assert policy.speaking(1000, 1000 + 799 * RATE // 1000) == [] and policy.state is BargeState.JUDGING
    assert policy.speaking(1000, 1000 + 800 * RATE // 1000) == [Interrupt(1000)]
    assert policy.state is BargeState.INTERRUPTED
    assert policy.speaking(1000, 1000 + 900 * RATE // 1000) == [], "one interruption per segment"
    assert policy.stopped(1000, 1000 + 900 * RATE // 1000) == Ending([], turn=True)
    assert policy.state is BargeState.IDLE
    policy.started(5000, replying=True)
    assert policy.stopped(5000, 5000 + 100) == Ending([Resume()], turn=False)
    policy.started(5000, replying=True)
    long = policy.stopped(5000, 5000 + 900 * RATE // 1000)
    assert long == Ending([Interrupt(5000)], turn=True), "long speech that ended at once"


def test_speech_heard_as_a_backchannel_or_below_the_users_level_never_silences_the_reply_nor_with_the_hold_off():
    policy = BargeIn(TD, RATE, words=True)
    policy.started(1000, replying=True)
    assert policy.on_words("Okay.", loud=True, heard_ms=200) == []
    assert policy.speaking(1000, 1000 + 600 * RATE // 1000) == [], "a backchannel only ducks it"
    policy.stopped(1000, 1000 + 600 * RATE // 1000)
    policy.started(1000, replying=True)
    assert policy.speaking(1000, 1000 + 600 * RATE // 1000, loud=False) == [], "someone else, a loudspeaker"
    policy.stopped(1000, 1000 + 600 * RATE // 1000, loud=False)
    policy.started(1000, replying=True)
    assert policy.on_words("", loud=True, heard_ms=200) == []  # heard as nothing yet: the user going on
    assert policy.speaking(1000, 1000 + HOLD_MS * RATE // 1000) == [Hold(1000)]
    policy.stopped(1000, 1000 + 600 * RATE // 1000)
    policy.retune(replace(TD, barge_in_hold_ms=None), RATE)
    policy.started(1000, replying=True)
    assert policy.speaking(1000, 1000 + 600 * RATE // 1000) == [], "barge_in_hold_ms null: ducked until judged"


def test_server_vad_is_a_silence_window_chosen_by_type():
    detector = turn_detector(TD, 24000, DEAF)
    assert isinstance(detector, SilenceWindow)
    assert detector.ended(48000, 48000 + 11999) is None
    assert detector.ended(48000, 48000 + 12000) == 60000
    with pytest.raises(KeyError):
        turn_detector(replace(TD, type="no_such_policy"), 24000, DEAF)


def test_prefix_padding_reaches_back_before_the_onset():
    td = replace(TD, prefix_padding_ms=300)
    out = listen([0.0] * 40 + [0.9] * 20 + [0.0] * 30, td)
    [started] = [s for s in out if isinstance(s, Started)]
    assert started.onset - started.audio_start == 300 * RATE // 1000


def at_levels(
    probabilities: list[float], amplitudes: list[int], *, replying: bool, ears: Listener | None = None
) -> list:
    """Feed one window per amplitude (constant PCM, so its level), the VAD answering
    ``probabilities``; ``ears``: go on with this listener."""
    ears = ears or Listener(Script(probabilities), RATE, TD, floor_dbfs=float("-inf"))
    return [s for a in amplitudes for s in ears.push(np.full(WINDOW, a, np.int16), replying=replying)]


def test_the_onset_is_where_the_speech_rose_into_the_decision_and_only_the_watermark_moves():
    # A word's start: surer and louder window by window (0.1, 0.2, 0.44 at -41, -35, -27
    # dBFS), decided at the fourth window; the steady sound before it (0.3 at -41 dBFS)
    # does not rise into it.
    probs = [0.0] * 5 + [0.3] * 3 + [0.1, 0.2, 0.44] + [0.9] * windows(1200) + [0.0] * 30
    pcm = [300] * 5 + [300] * 3 + [300, 600, 1500] + [3000] * (len(probs) - 11)
    out = at_levels(probs, pcm, replying=True)
    [started] = [s for s in out if isinstance(s, Started)]
    assert started.onset == 8 * WINDOW, "back to the 0.1 window, not into the steady sound"
    assert [s for s in out if isinstance(s, (Duck, Interrupt))] == [Duck(8 * WINDOW), Interrupt(8 * WINDOW)]
    # Durations still count from the window that was sure: 768 ms of it, 832 ms from
    # where it began, is short of the 800 ms that interrupts.
    short = [0.0] * 5 + [0.2, 0.44] + [0.9] * (windows(800) - 1) + [0.0] * 40
    levels = [300] * 5 + [600, 1500] + [3000] * (len(short) - 7)
    out = at_levels(short, levels, replying=True)
    assert not [s for s in out if isinstance(s, Interrupt)], "the lean windows add nothing to its length"
    assert [type(s) for s in out] == [Started, Duck, Hold, Stopped, Resume]
    assert [s.onset for s in out if isinstance(s, Duck)] == [5 * WINDOW]


def test_a_fricative_start_well_above_the_quiet_is_the_onset_though_it_is_louder_than_the_decision():
    # flite awb's "Switch": the "s" at -45, -38, -39 dBFS (surer window by window), decided
    # at -47 dBFS in the vowel's first window, after quiet at -81 dBFS.
    probs = [0.0] * 8 + [0.12, 0.25, 0.44, 0.97] + [0.99] * 20 + [0.0] * 40
    pcm = [3] * 8 + [184, 413, 368, 146] + [3000] * 60
    [started] = [s for s in at_levels(probs, pcm, replying=False) if isinstance(s, Started)]
    assert started.onset == 8 * WINDOW, "back to where the 's' began, 20 dB and more above the quiet"
    # The same surer windows in a steady sound at -41 dBFS, no louder than it: not the speech's.
    pcm = [300] * 8 + [400, 350, 320, 300] + [3000] * 60
    [started] = [s for s in at_levels(probs, pcm, replying=False) if isinstance(s, Started)]
    assert started.onset == 11 * WINDOW, "a sound within 20 dB of the quiet stays the quiet's"


def test_over_a_reply_a_fricative_rising_out_of_the_quiet_ducks_it_before_voice_activity_is_sure():
    # "Switch" as above, over a reply: the vowel's first window (0.97, -47 dBFS) is under the
    # level speech over a reply must start at, so speech is decided a window later at -21 dBFS;
    # the "s" rose 35 dB out of the quiet three windows before that and ducked the reply then.
    probs = [0.0] * 8 + [0.12, 0.25, 0.44, 0.97] + [0.99] * 40 + [0.0] * 40
    pcm = [3] * 8 + [184, 413, 368, 146] + [3000] * 80
    out = at_levels(probs, pcm, replying=True)
    kinds = [type(s) for s in out]
    assert kinds[:3] == [Duck, Started, Duck] and out[0] == Duck(8 * WINDOW), "ducked at the rise"
    assert Resume not in kinds[: kinds.index(Started)], "the rise's duck holds until speech is decided"
    assert out[2] == Duck(8 * WINDOW) and Interrupt in kinds, "then judged as any speech over a reply"
    assert [type(s) for s in at_levels(probs, pcm, replying=False)][:1] == [Started], "no reply: nothing to duck"


def test_a_rise_that_is_no_speech_ducks_the_reply_only_until_it_has_had_its_chance():
    probs = [0.0] * 10 + [0.2] + [0.0] * 30
    pcm = [3] * 10 + [3000] + [3] * 30  # a knock: loud, a little speech-like, no speech after it
    out = at_levels(probs, pcm, replying=True)
    assert out == [Duck(10 * WINDOW), Resume()]
    ears = Listener(Script(probs), RATE, TD, floor_dbfs=float("-inf"))
    assert at_levels(probs, pcm[:19], replying=True, ears=ears) == [Duck(10 * WINDOW)], "288 ms after the rise"
    assert at_levels(probs, [3], replying=True, ears=ears) == [Resume()], "back at RISE_MS (300 ms), not before"
    # A steady sound coming in (a fan, a bed of music): one dip, then it is the background.
    steady = at_levels([0.0] * 10 + [0.2] * 60, [3] * 10 + [3000] * 60, replying=True)
    assert steady == [Duck(10 * WINDOW), Resume()]
    # Not a rise: too unlike speech, too quiet against the user (-57 dBFS), or no quiet heard before it.
    assert at_levels([0.0] * 10 + [0.05] + [0.0] * 30, pcm, replying=True) == []
    assert at_levels(probs, [3] * 10 + [45] + [3] * 30, replying=True) == []
    soft = at_levels([0.0] * 10 + [0.2, 0.2] + [0.0] * 30, [3] * 10 + [45, 3000] + [3] * 30, replying=True)
    assert soft == [Duck(11 * WINDOW), Resume()], "a rise too quiet to duck leaves the louder one after it its chance"
    assert at_levels([0.0] * 4 + [0.2] + [0.0] * 30, [3] * 4 + [3000] + [3] * 30, replying=True) == []


def test_the_onset_moves_back_no_further_than_its_cap():
    probs = [0.0] * 5 + [0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.13, 0.14, 0.15] + [0.9] * 20 + [0.0] * 40
    pcm = [0] * 5 + [100 * (i + 1) for i in range(10)] + [3000] * 60
    [started] = [s for s in at_levels(probs, pcm, replying=False) if isinstance(s, Started)]
    assert started.onset == 15 * WINDOW - 6 * WINDOW, "200 ms: six windows of 32 ms"


def test_speech_after_a_clear_begins_after_it():
    probs = [0.0] * 5 + [0.1, 0.2, 0.3] + [0.9] * 20 + [0.0] * 40
    pcm = [0] * 5 + [300, 600, 1200] + [3000] * 60
    ears = Listener(Script(probs), RATE, TD, floor_dbfs=float("-inf"))
    at_levels(probs, pcm[:7], replying=False, ears=ears)
    ears.clear()  # input_audio_buffer.clear between the 0.2 and the 0.3 window
    out = at_levels(probs, pcm[7:], replying=False, ears=ears)
    [started] = [s for s in out if isinstance(s, Started)]
    assert started.onset == 7 * WINDOW, "back to the 0.3 window, not past the clear"
