"""A session's microphone input, sans I/O: what a message carries (PCM16, or G.711
decoded and brought to 16 kHz on one stream per law), admission under the session's
limits (the input speed budget and the manual-commit buffer, whole chunks or nothing),
the input clock, and where the audio goes (the listener, or the buffer a manual commit
takes). Wall time is an argument; the voice-activity model is scripted (test_listening.py)."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import pytest

from duplex.app.core.intake import Intake
from duplex.app.core.limits import SessionLimits
from duplex.app.core.listening import Duck, Started, Stopped
from duplex.app.core.pacing import SessionClock
from duplex.app.core.protocol import ClientEvent
from duplex.app.core.settings import SessionSettings, TurnDetection
from duplex.pipeline.g711 import ALAW, ULAW, TelephoneInput, encode
from tests.helpers_core import refused
from tests.test_listening import RATE, WINDOW, Script

LISTENING = SessionSettings(input_rate=RATE, turn_detection=TurnDetection(prefix_padding_ms=0, min_speech_ms=0))
MANUAL = replace(LISTENING, turn_detection=None)
SPEECH = np.full(10 * WINDOW, 3000, np.int16)  # 320 ms, loud


def intake(limits: SessionLimits | None = None, *, speech: bool = True) -> Intake:
    """An intake at wall time 0 whose voice activity hears speech in every window (or none)."""
    vad = Script([0.9 if speech else 0.0] * 10_000)
    return Intake(SessionClock(0.0), limits or SessionLimits(), vad, 0.0)


def pcm(samples: np.ndarray) -> bytes:
    return samples.astype("<i2").tobytes()


def append(raw: bytes) -> ClientEvent:
    return ClientEvent("input_audio_buffer.append", {"audio": base64.b64encode(raw).decode()})


def tone(seconds: float, rate: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


# -- what a message carries ---------------------------------------------------------------
def test_pcm16_comes_through_as_it_was_sent():
    raw = pcm(np.arange(-50, 50, dtype=np.int16))
    ears = intake()
    assert ears.audio_of(append(raw), LISTENING) == raw
    assert ears.audio_of(raw, replace(LISTENING, binary_audio=True)) == raw


def test_bad_audio_is_refused_by_name():
    ears = intake()
    not_base64 = ClientEvent("input_audio_buffer.append", {"audio": "not base64!"})
    assert refused(ears.audio_of, not_base64, LISTENING).code == "invalid_audio"
    assert refused(ears.audio_of, append(b"\x01\x02\x03"), LISTENING).code == "invalid_audio"
    assert refused(ears.audio_of, b"\x00\x00", LISTENING).code == "binary_not_enabled"
    assert refused(ears.audio_of, b"\x00\x00\x00", replace(LISTENING, binary_audio=True)).code == "invalid_audio"


@pytest.mark.parametrize("law", [ULAW, ALAW])
def test_g711_is_decoded_and_heard_at_16_khz(law: str):
    settings = replace(LISTENING, input_format=law)
    sent = tone(1.0)
    heard = np.frombuffer(intake().audio_of(append(encode(sent, law)), settings), "<i2").astype(np.float64)
    assert 1.6 * sent.size <= heard.size <= 2 * sent.size, "twice the samples, less the resampler's lead-in"
    rms_sent = np.sqrt((sent.astype(np.float64) ** 2).mean())
    rms_heard = np.sqrt((heard[2000:] ** 2).mean())
    assert abs(20 * np.log10(rms_heard / rms_sent)) < 0.5, "the tone's level, not the law's bytes"


def test_g711_chunks_are_one_stream_whatever_the_slicing():
    settings = replace(LISTENING, input_format=ULAW, binary_audio=True)
    g711 = encode(tone(0.5), ULAW)
    ears = intake()
    heard = ears.audio_of(g711[:1001], settings) + ears.audio_of(append(g711[1001:]), settings)
    whole = TelephoneInput(ULAW)
    assert heard == whole.pcm(g711[:1001]) + whole.pcm(g711[1001:]), "an odd G.711 chunk is fine: a byte a sample"
    assert ears.audio_of(g711[:1001], settings) != TelephoneInput(ULAW).pcm(g711[:1001]), "the stream goes on"


def test_a_change_of_law_starts_a_new_decoder():
    ears = intake()
    g711 = encode(tone(0.5), ULAW)
    ears.audio_of(append(g711), replace(LISTENING, input_format=ULAW))
    alaw = encode(tone(0.5), ALAW)
    assert ears.audio_of(append(alaw), replace(LISTENING, input_format=ALAW)) == TelephoneInput(ALAW).pcm(alaw)


# -- admission: the speed budget -----------------------------------------------------------
SLOW = SessionLimits(input_burst_s=1.0, max_input_speed=2.0)
ONE_SECOND = pcm(np.zeros(RATE, np.int16))


def test_a_burst_is_admitted_and_then_input_may_not_outrun_the_speed():
    ears = intake(SLOW)
    ears.accept(ONE_SECOND, RATE, 0.0)
    err = refused(ears.accept, pcm(np.zeros(160, np.int16)), RATE, 0.0)
    assert (err.code, err.param) == ("input_rate_exceeded", "audio") and "2x" in err.message
    ears.accept(ONE_SECOND, RATE, 0.5)  # half a second at 2x buys a second


def test_a_refused_chunk_costs_nothing():
    ears = intake(SLOW)
    ears.accept(ONE_SECOND, RATE, 0.0)
    assert refused(ears.accept, ONE_SECOND, RATE, 0.25).code == "input_rate_exceeded"  # half a second earned
    ears.accept(ONE_SECOND, RATE, 0.5)  # the other half: the refused second was not charged


def test_the_budget_never_grows_past_the_burst():
    ears = intake(SLOW)
    ears.accept(ONE_SECOND, RATE, 100.0)
    assert refused(ears.accept, pcm(np.zeros(160, np.int16)), RATE, 100.0).code == "input_rate_exceeded"
    assert refused(intake(SLOW).accept, ONE_SECOND + b"\x00\x00", RATE, 100.0).code == "input_rate_exceeded"


def test_the_budget_is_counted_in_seconds_at_the_chunks_rate():
    ears = intake(SLOW)
    ears.accept(pcm(np.zeros(24000, np.int16)), 24000, 0.0)  # one second at 24 kHz
    assert refused(ears.accept, pcm(np.zeros(160, np.int16)), 16000, 0.0).code == "input_rate_exceeded"


def test_received_is_set_by_the_first_admitted_chunk_only():
    ears = intake(SLOW)
    assert not ears.received
    refused(ears.accept, ONE_SECOND + ONE_SECOND, RATE, 0.0)
    assert not ears.received
    ears.accept(b"\x00\x00", RATE, 0.0)
    assert ears.received


# -- admission: the manual-commit buffer ---------------------------------------------------
SMALL = SessionLimits(max_input_buffer_bytes=1000)


def test_the_manual_buffer_counts_what_was_admitted_and_not_yet_heard():
    ears = intake(SMALL)
    ears.listen(MANUAL)
    ears.accept(bytes(600), RATE, 0.0)
    err = refused(ears.accept, bytes(600), RATE, 0.0)
    assert (err.code, err.param) == ("input_audio_buffer_full", "audio") and "1000" in err.message
    ears.hear(bytes(600), RATE, 0.0, replying=False)
    ears.accept(bytes(400), RATE, 0.0)
    ears.hear(bytes(400), RATE, 0.0, replying=False)
    assert refused(ears.accept, bytes(2), RATE, 0.0).code == "input_audio_buffer_full"


def test_clear_and_take_make_room_in_the_manual_buffer():
    ears = intake(SMALL)
    ears.accept(bytes(1000), RATE, 0.0)
    ears.hear(bytes(1000), RATE, 0.0, replying=False)
    assert ears.clear() == []
    ears.accept(bytes(1000), RATE, 0.0)
    ears.hear(bytes(1000), RATE, 0.0, replying=False)
    assert ears.take().size == 500
    ears.accept(bytes(1000), RATE, 0.0)


def test_with_server_vad_the_manual_buffer_bound_does_not_apply():
    ears = intake(SMALL, speech=False)
    ears.listen(LISTENING)
    for _ in range(3):
        ears.accept(bytes(1000), RATE, 0.0)
        ears.hear(bytes(1000), RATE, 0.0, replying=False)


# -- hearing: the clocks and where the audio goes --------------------------------------------
def test_heard_audio_moves_the_input_clocks():
    ears = intake()
    ears.hear(ONE_SECOND, RATE, 0.0, replying=False)
    ears.hear(pcm(np.zeros(RATE // 2, np.int16)), RATE, 0.1, replying=False)
    assert ears.samples == RATE + RATE // 2
    assert ears.clock.now(0.1) == pytest.approx(1.5), "while audio streams, session time is the audio heard"


def test_without_server_vad_audio_is_buffered_in_order_for_a_manual_commit():
    ears = intake()
    assert ears.listen(MANUAL) == [] and ears.listener is None
    first, second = np.arange(0, 100, dtype=np.int16), np.arange(100, 250, dtype=np.int16)
    assert ears.hear(pcm(first), RATE, 0.0, replying=False) == []
    ears.hear(pcm(second), RATE, 0.0, replying=False)
    assert ears.take().tolist() == list(range(250))
    assert ears.take().size == 0, "a commit empties the buffer"


def test_no_voice_activity_model_means_no_listener():
    ears = Intake(SessionClock(0.0), SessionLimits(), None, 0.0)
    assert ears.listen(LISTENING) == [] and ears.listener is None


def test_server_vad_hears_speech_and_a_reply_is_ducked_for_it():
    ears = intake()
    ears.listen(LISTENING)
    out = ears.hear(pcm(SPEECH), RATE, 0.0, replying=True)
    assert [type(s) for s in out[:2]] == [Started, Duck]
    assert out[0].onset == 0


def test_the_listener_starts_on_the_sessions_input_clock():
    ears = intake()
    ears.hear(ONE_SECOND, RATE, 0.0, replying=False)  # before server VAD: buffered
    ears.listen(LISTENING)
    assert ears.listener is not None and ears.listener.vad.samples == RATE
    [started] = [s for s in ears.hear(pcm(SPEECH), RATE, 1.0, replying=False) if isinstance(s, Started)]
    assert started.onset == RATE, "speech heard after a second of input is at sample 16000, not 0"


def test_new_turn_detection_at_the_same_rate_retunes_the_listener_and_keeps_the_speech():
    ears = intake()
    ears.listen(LISTENING)
    listener = ears.listener
    ears.hear(pcm(SPEECH), RATE, 0.0, replying=False)
    td = replace(LISTENING.turn_detection, silence_duration_ms=900)
    assert ears.listen(replace(LISTENING, turn_detection=td)) == []
    assert ears.listener is listener and listener.td == td and listener.in_speech


def test_a_new_rate_makes_a_new_listener_and_ends_the_speech_in_progress():
    ears = intake()
    ears.listen(LISTENING)
    old = ears.listener
    ears.hear(pcm(SPEECH), RATE, 0.0, replying=False)
    out = ears.listen(replace(LISTENING, input_rate=24000))
    assert [type(s) for s in out] == [Stopped]
    assert ears.listener is not old and ears.listener.rate == 24000


def test_turning_server_vad_off_mid_speech_ends_it_and_keeps_its_audio_for_a_commit():
    ears = intake()
    ears.listen(LISTENING)
    ears.hear(pcm(SPEECH), RATE, 0.0, replying=False)
    out = ears.listen(MANUAL)
    assert [type(s) for s in out] == [Stopped] and ears.listener is None
    ears.hear(pcm(np.full(100, 7, np.int16)), RATE, 0.0, replying=False)
    committed = ears.take()
    assert committed.size == SPEECH.size + 100
    assert (committed[: SPEECH.size] == 3000).all() and (committed[SPEECH.size :] == 7).all()


def test_a_manual_commit_with_server_vad_takes_the_speech_in_progress():
    ears = intake()
    ears.listen(LISTENING)
    ears.hear(pcm(SPEECH), RATE, 0.0, replying=False)
    taken = ears.take()
    assert taken.size == SPEECH.size and (taken == 3000).all()
    assert not ears.listener.in_speech


def test_clear_forgets_the_speech_in_progress():
    ears = intake()
    ears.listen(LISTENING)
    ears.hear(pcm(SPEECH), RATE, 0.0, replying=False)
    assert [type(s) for s in ears.clear()] == [Stopped]
    assert not ears.listener.in_speech and ears.take().size == 0
