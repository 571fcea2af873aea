"""The echo canceller: the reply's echo taken out of a speakerphone's microphone.

The canceller is WebRTC's own (AEC3 through ``livekit``'s binary wheel); its reference
is the reply as the client played it (the session's playout model and the client's
acks). In process it must remove a known echo and keep speech over it; through the
real server, a client whose speaker leaks into its microphone (a room: four
reflections, the first 60 ms late) must not interrupt itself, and its backchannels and
interruptions must be judged as without the echo.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import numpy as np
import pytest

from duplex.app.clients.room import HARSH, Echo, Room
from duplex.app.clients.simulated import SimulatedClient
from duplex.app.core.session import Session
from duplex.pipeline.backends import Backends
from duplex.pipeline.echo import Framed
from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.near_end import NearEnd
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.webrtc_apm import WebRtcCleaner, WebRtcCleaning
from lab.voices import load_corpus, resample, variant
from tests.test_session import ev, start_reply
from tests.util import start_reply as start_typed_reply

RATE = 24000
CORPUS = load_corpus()
REPLY = " ".join(f"This is sentence number {i} of a long reply." for i in range(4))


def db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-9))


def speech(*names: str) -> np.ndarray:
    return np.concatenate([resample(CORPUS[n].pcm, CORPUS[n].rate, RATE) for n in names]).astype(np.int16)


def at_dbfs(x: np.ndarray, level: float) -> np.ndarray:
    gain = 10 ** ((level - db(x) + db(np.full(1, 32768.0))) / 20)
    return np.clip(x * gain, -32768, 32767).astype(np.int16)


def through_room(cleaner: Any, far: np.ndarray, user: np.ndarray, at: int, level_db: float, step: int):
    """The microphone (the room's echo of ``far``, ``user`` from ``at``) cleaned in
    slices of ``step``; returns (cleaned, echo alone)."""
    room = Echo(Room(level_db=level_db), RATE)
    talk = np.zeros(far.size, np.float32)
    talk[at : at + user.size] = user[: far.size - at]
    out, echoes = [], []
    for i in range(0, far.size, step):
        f = far[i : i + step]
        e = room(f)
        echoes.append(e)
        out.append(cleaner.process(np.clip(talk[i : i + step] + e, -32768, 32767).astype(np.int16), f))
    return np.concatenate(out), np.concatenate(echoes)


@pytest.mark.parametrize("level_db", [-15.0, -6.0])
def test_the_canceller_removes_a_known_echo_and_keeps_speech_over_it(level_db):
    far = speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_05_am_michael")
    user = speech("turn_10_bf_emma")
    at = far.size - user.size - RATE // 4
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    out, echo = through_room(cleaner, far, user, at, level_db, RATE // 50)
    assert out.size == far.size
    settled = slice(RATE * 2, at)  # after two seconds of reply, before the user speaks
    assert db(echo[settled]) - db(out[settled]) >= 25, "the echo is removed"
    kept = db(out[at : at + user.size]) - db(user)
    assert abs(kept) <= 3, f"speech over the echo kept within 3 dB ({kept:+.1f})"
    # Its own thread's CPU (6-7 % of a core here), the least of two passes: a server the
    # suite starts beside it can share the core and inflate one pass by half.
    cpu_s = cleaner.cpu_s
    if cpu_s >= far.size / RATE * 0.1:
        again = WebRtcCleaner(RATE, echo=True, noise=False)
        through_room(again, far, user, at, level_db, RATE // 50)
        cpu_s = min(cpu_s, again.cpu_s)
    assert cpu_s < far.size / RATE * 0.1, "cheap: under 10 % of a core"


def test_a_microphone_that_hears_no_echo_keeps_the_speech_over_the_reply_whole():
    # A headset, or a client sending digital silence: AEC3 alone took 37-57 dB off the
    # first quarter second of the user's speech here, as if it were the reply.
    far = speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael")
    user = speech("turn_10_bf_emma")
    at = RATE  # a second into the reply
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    out, _ = through_room(cleaner, far, user, at, -200.0, RATE // 50)
    said = slice(at, at + min(user.size, far.size - at))
    onset = slice(at, at + RATE // 4)
    assert abs(db(out[said]) - db(user[: said.stop - at])) <= 1
    assert abs(db(out[onset]) - db(user[: RATE // 4])) <= 1, "the onset too: barge-in is decided on it"
    assert not cleaner.presence.audible


@pytest.mark.parametrize("level_db", [-30.0, -15.0])
def test_the_first_words_over_an_echoed_reply_are_kept_whole(level_db):
    # AEC3's suppressor took the start of this user's words for echo: 18 dB off one of
    # its first 50 ms windows at -30 dB. The user's voice well above any echo the room
    # could give it passes as it came.
    far = speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_05_am_michael")
    clip = CORPUS["turn_03_af_heart"]
    user = speech(clip.name)
    onset = 3 * RATE
    at = onset - clip.speech_start * RATE // clip.rate
    talk = np.zeros(far.size, np.int16)
    talk[at : at + user.size] = user[: far.size - at]
    windows = [slice(onset + i * RATE // 20, onset + (i + 1) * RATE // 20) for i in range(8)]

    def losses(cleaner: WebRtcCleaner) -> tuple[list[float], float]:
        out, echo = through_room(cleaner, far, user, at, level_db, RATE // 100)
        before = slice(2 * RATE, at)
        return [db(out[w]) - db(talk[w]) for w in windows], db(echo[before]) - db(out[before])

    with mock.patch.object(NearEnd, "add", return_value=False):
        aec3_alone, removed_alone = losses(WebRtcCleaner(RATE, echo=True, noise=False))
    assert min(aec3_alone) <= -10, f"the case in point: AEC3 alone cut the onset {aec3_alone}"
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    kept, removed = losses(cleaner)
    # Passed as it came, a window keeps the echo under the user's voice: within 6 dB of the
    # voice alone (the quiet part of a word at -15 dB: +4.9; the held-out WER over a reply
    # was better for it, 0.120 -> 0.087, than with AEC3 on those frames).
    assert min(kept) >= -6 and max(kept) <= 6, f"every 50 ms of the first 400 kept: {kept} (AEC3 alone: {aec3_alone})"
    assert removed >= removed_alone - 0.5, "the echo before the user spoke is taken out as much"
    assert cleaner.near_end.gain is not None and abs(cleaner.near_end.gain - level_db) <= 8, "the room's gain learned"


@pytest.mark.parametrize("level_db", [-30.0, -15.0, -6.0])
@pytest.mark.parametrize("room", ["reflections", "harsh"])
def test_the_echo_alone_is_never_passed_as_the_user(level_db, room):
    # The harsh room's 300 ms tail after the reply's words was taken for the user at -15
    # and -6 dB (16 frames of this reply), and the reply alone ducked itself in the bench,
    # before the judge counted a room's tail.
    far = at_dbfs(speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_10_bf_emma"), -20)
    room = Echo(replace(HARSH if room == "harsh" else Room(), level_db=level_db), RATE)
    near_end, step = NearEnd(RATE), RATE // 100
    passed = [
        near_end.add(room(far[i : i + step]).astype(np.int16), far[i : i + step]) for i in range(0, far.size, step)
    ]
    assert not any(passed), f"{sum(passed)} frames of echo alone taken for the user"


@pytest.mark.parametrize("level_db", [-15.0, -6.0])
def test_the_user_over_a_loud_echo_is_heard_between_the_replys_words(level_db):
    # With the echo's delay unknown, a frame is the user's only above the loudest echo any
    # lag could give it; once found, only above the reply that played that long ago. Over
    # a reply echoed at -15 dB that passed 71% of the user's voiced frames before, 94%
    # since, 30 voices of either part (-6 dB: 11% -> 55%).
    far = at_dbfs(speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_10_bf_emma"), -20)
    user = at_dbfs(speech("turn_03_af_heart", "turn_09_bf_emma"), -26)  # the user 6 dB under the reply
    at = int(1.65 * RATE)
    talk = np.zeros(far.size)
    talk[at : at + user.size] = user[: far.size - at]
    room, step = Echo(Room(level_db=level_db), RATE), RATE // 100

    def voiced_frames_passed(near_end: NearEnd) -> float:
        passed = []
        for i in range(0, far.size - step + 1, step):
            f = far[i : i + step]
            near = np.clip(talk[i : i + step] + room(f), -32768, 32767).astype(np.int16)
            user_frame = near_end.add(near, f)
            if db(talk[i : i + step]) - db(np.full(1, 32768.0)) > -45:  # the user's voice, not a pause
                passed.append(user_frame)
        return float(np.mean(passed))

    aligned = NearEnd(RATE)
    share = voiced_frames_passed(aligned)
    assert aligned.delay.lag == round(Room().delay_ms / 10), "the first reflection's delay, in frames"
    room = Echo(Room(level_db=level_db), RATE)
    unaligned = NearEnd(RATE)
    with mock.patch.object(unaligned.delay, "add"):  # never finds the delay: every lag
        before = voiced_frames_passed(unaligned)
    # (this pair at -15 dB: 0.86 -> 0.96; at -6 dB: 0.11 -> 0.30, 0.35 before the judge
    # counted a room's tail; over 28 voices of both parts the tail changed no share)
    loud = level_db == -6
    assert 1 - share <= (1 - before) * (0.8 if loud else 0.75) and share >= (0.25 if loud else 0.9), (share, before)


def test_a_fricative_under_the_echos_vowels_is_the_users_in_the_high_band_before_its_vowel_is():
    # "Send a message...": the "s" is quieter than the reply's echo over the whole band
    # but louder above 3 kHz than any echo of what the reply played there. Measured: the
    # first frame passed 160 ms into the clip with the high band, 230 ms without it (held
    # out, "Switch...", "Send...": 160 against 250-280 ms).
    far = at_dbfs(speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_10_bf_emma"), -20)
    user = at_dbfs(speech("turn_21_am_adam"), -26)
    at, step = int(1.65 * RATE), RATE // 100
    talk = np.zeros(far.size)
    talk[at : at + user.size] = user[: far.size - at]

    def first_passed(near_end: NearEnd) -> int:
        room = Echo(Room(level_db=-15.0), RATE)
        for i in range(0, far.size - step + 1, step):
            f = far[i : i + step]
            if near_end.add(np.clip(talk[i : i + step] + room(f), -32768, 32767).astype(np.int16), f) and i >= at:
                return (i - at) * 1000 // RATE
        raise AssertionError("the user was never passed")

    with_high, overall = NearEnd(RATE), NearEnd(RATE)
    overall.high = None
    hiss, level = first_passed(with_high), first_passed(overall)
    assert hiss <= level - 50, (hiss, level)
    assert with_high.by in ("level", "hiss") and NearEnd(8000).high is None, "a phone line's band has no high band"


def test_the_next_reply_is_cancelled_after_the_user_talked_over_the_last():
    # A reply, the user talking over it, the reply cut, the user going on, the next reply:
    # judged over the user's seconds the echo seemed gone, and the next reply reached
    # the recogniser raw (the mic demo's next reply interrupted itself).
    first = speech("turn_05_am_michael", "turn_13_bm_george")[: int(2.5 * RATE)]
    user = speech("turn_10_bf_emma", "turn_09_bf_emma")  # 4.6 s
    far = np.concatenate(
        [first, np.zeros(int(4.5 * RATE), np.int16), speech("turn_07_am_michael", "turn_05_am_michael")]
    )
    at = 2 * RATE  # the user talks from 2 s, the reply is cut at 2.5 s, the next one comes at 7 s
    assert at + user.size < 7 * RATE
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    out, echo = through_room(cleaner, far, user, at, -15.0, RATE // 100)
    next_reply = slice(int(7.3 * RATE), int(9 * RATE))
    assert cleaner.presence.audible, f"the room is still there (r={cleaner.presence.correlation})"
    assert db(echo[next_reply]) - db(out[next_reply]) >= 20, "the next reply's echo taken out"


def test_any_slicing_keeps_every_sample_and_still_cancels():
    far = speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael")
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    out, echo = through_room(cleaner, far, np.zeros(0, np.int16), 0, -15.0, 173)  # 7.2 ms: never a whole frame
    assert out.size == far.size, "as many samples out as in"
    assert 0 < cleaner.lag < 240, "at most one frame behind"
    settled = slice(RATE * 2, None)
    assert db(echo[settled]) - db(out[settled]) >= 25


def test_nothing_is_processed_while_nothing_plays():
    calls: list[int] = []

    def step(near: np.ndarray, far: np.ndarray) -> np.ndarray:
        calls.append(near.size)
        return near

    framed = Framed(RATE, step, always=False)
    mic = np.full(480, 100, np.int16)
    for _ in range(100):  # two seconds, nothing playing
        assert framed.process(mic, None) is mic
    assert calls == [] and framed.lag == 0
    framed.process(mic, np.full(480, 1000, np.int16))  # a reply plays: every frame now
    assert calls == [240, 240]
    for _ in range(25):  # the room's tail: still processed for half a second
        framed.process(mic, None)
    assert len(calls) == 2 + 50
    framed.process(mic, None)
    assert len(calls) == 52, "then nothing again"


def test_near_field_suppresses_steady_noise():
    rng = np.random.default_rng(1)
    hiss = (rng.standard_normal(RATE * 4) * 300).astype(np.int16)  # -40 dBFS of fan noise
    cleaner = WebRtcCleaner(RATE, echo=False, noise=True)
    out = np.concatenate([cleaner.process(hiss[i : i + 480], None) for i in range(0, hiss.size, 480)])
    assert db(hiss[RATE * 2 :]) - db(out[RATE * 2 :]) >= 6


class Recorder:
    """A cleaner that keeps what it was given (to read the reference the session builds)."""

    echo, noise, cpu_s = True, False, 0.0

    def __init__(self) -> None:
        self.far: list[np.ndarray | None] = []

    def process(self, near: np.ndarray, far: np.ndarray | None) -> np.ndarray:
        self.far.append(far)
        return near


class Recording:
    name = "recording"

    def __init__(self) -> None:
        self.opened: list[Recorder] = []

    def open(self, rate: int, *, echo: bool, noise: bool) -> Recorder:
        self.opened.append(Recorder())
        return self.opened[-1]


def test_the_reference_is_what_the_client_played_over_each_piece_of_input():
    cleaning = Recording()
    s = Session("sess_echo", 0.0, cleaning=cleaning)
    rec = cleaning.opened[-1]
    s.hear(np.zeros(2400, np.int16).tobytes(), 0.1)  # 0.1 s of input: the input clock runs
    action = start_reply(s)
    ramp = AudioBuffer.pcm(np.arange(4800, dtype=np.int16), RATE, "test")  # each sample tells where it is
    s.on_output(ChunkEvent(action.response_id, 1, 0, action.epoch, "audio", OutputChunk(ramp, 0)), 0.1)
    s.hear(np.zeros(1200, np.int16).tobytes(), 0.15)  # 50 ms: played from when it arrived
    assert rec.far[0] is None, "nothing played before the reply"
    assert np.array_equal(rec.far[-1], np.arange(1200))
    s.hear(np.zeros(2400, np.int16).tobytes(), 0.25)
    assert np.array_equal(rec.far[-1], np.arange(1200, 3600))
    # The client says it had played only 2400 samples by then: its playback is believed.
    s.feed(ev("playback.ack", response_id=action.response_id, played_samples=2400, input_samples=2400 + 3600), 0.25)
    s.hear(np.zeros(1200, np.int16).tobytes(), 0.3)
    assert np.array_equal(rec.far[-1], np.arange(2400, 3600))


def test_noise_reduction_is_applied_and_reported():
    s = Session("sess_nr", 0.0, cleaning=WebRtcCleaning())
    assert s.intake.cleaner is not None and (s.intake.cleaner.echo, s.intake.cleaner.noise) == (True, False)
    update = {"audio": {"input": {"noise_reduction": {"type": "near_field"}}}}
    out = s.feed(ev("session.update", session=update), 0.0)
    session = out[0].settings
    assert session.noise_reduction == "near_field"
    from duplex.app.core.wire import session_object

    assert session_object("sess_nr", session)["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
    assert (s.intake.cleaner.echo, s.intake.cleaner.noise) == (False, True), "a headset: noise only"
    s.feed(ev("session.update", session={"input_audio_noise_reduction": {"type": "far_field"}}), 0.0)
    assert (s.intake.cleaner.echo, s.intake.cleaner.noise) == (True, True), "a speakerphone: both"
    assert session_object("sess_nr", s.settings, beta=True)["input_audio_noise_reduction"] == {"type": "far_field"}
    bad = s.feed(ev("session.update", session={"input_audio_noise_reduction": {"type": "loud"}}), 0.0)
    assert bad[0].error.code == "invalid_value" and s.settings.noise_reduction == "far_field"
    s.feed(ev("session.update", session={"input_audio_noise_reduction": None, "echo_cancellation": False}), 0.0)
    assert s.intake.cleaner is None, "nothing to clean"


# -- through the real server ----------------------------------------------------


@pytest.fixture
async def speakerphone(make_server, backends: Backends):
    backends.cleaning = WebRtcCleaning()
    return await make_server(turn_detection="semantic_vad")


async def echoed(server, level_db: float, *, cancel: bool = True) -> SimulatedClient:
    sim = await SimulatedClient.open(server.port, room=Room(level_db=level_db))
    if not cancel:
        await sim.send("session.update", session={"echo_cancellation": False})
    return sim


def interrupted_itself(sim: SimulatedClient) -> bool:
    return bool(
        sim.of_type("response.output_audio.ducked")
        or sim.of_type("response.output_audio.paused")
        or sim.of_type("conversation.item.truncated")
        or sim.of_type("input_audio_buffer.speech_started")
    )


async def test_a_reply_on_a_speakerphone_never_interrupts_itself(speakerphone):
    sim = await echoed(speakerphone, -15.0)
    rid = await start_typed_reply(sim, REPLY)
    await sim.silence(12.0)
    done = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] == rid]
    assert done and done[0]["status"] == "completed"
    assert not interrupted_itself(sim), [r.event["type"] for r in sim.events]
    assert sim.heard[rid].played == sim.heard[rid].received > 3 * RATE
    await sim.ws.close()
    # The same room without the canceller: the reply hears itself (what the test guards).
    sim = await echoed(speakerphone, -15.0, cancel=False)
    await start_typed_reply(sim, REPLY)
    await sim.silence(6.0)
    assert interrupted_itself(sim)
    await sim.ws.close()


async def test_a_backchannel_over_an_echoed_reply_does_not_cancel_it(speakerphone):
    sim = await echoed(speakerphone, -15.0)
    rid = await start_typed_reply(sim, REPLY)
    await sim.silence(2.0)
    await sim.stream(variant(CORPUS["bc_okay_am_michael"], "clean", RATE))
    await sim.silence(12.0)
    done = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] == rid]
    assert done and done[0]["status"] == "completed", done
    assert not sim.of_type("conversation.item.truncated")
    await sim.ws.close()


async def test_an_interruption_over_an_echoed_reply_cuts_it_where_the_user_began(speakerphone):
    clip = CORPUS["turn_07_am_michael"]
    sim = await echoed(speakerphone, -15.0)
    rid = await start_typed_reply(sim, REPLY)
    await sim.silence(2.0)
    base = sim.input_samples
    await sim.stream(variant(clip, "clean", RATE))
    await sim.silence(3.0)
    onset = base + clip.speech_start * RATE // clip.rate
    done = [r for r in sim.of_type("response.done") if r.event["response"]["id"] == rid][0]
    assert done.event["response"]["status"] == "cancelled"
    cut = sim.of_type("conversation.item.truncated")[0].event
    played = sim.played_at(rid, onset) * 1000 // RATE
    assert abs(cut["audio_end_ms"] - played) <= 150, (cut["audio_end_ms"], played)
    heard = sim.of_type("conversation.item.input_audio_transcription.completed")[-1].event["transcript"]
    assert "sentence number" not in heard.lower(), f"the reply's words leaked into the user's: {heard!r}"
    await sim.ws.close()


@pytest.mark.parametrize("level_db", [-40.0, -30.0, -15.0])
def test_an_echo_is_judged_present_and_a_user_over_the_reply_is_not(level_db):
    far = speech("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael")
    user = speech("turn_10_bf_emma", "turn_09_bf_emma")
    echoed = WebRtcCleaner(RATE, echo=True, noise=False)
    through_room(echoed, far, np.zeros(0, np.int16), 0, level_db, RATE // 50)
    assert echoed.presence.audible and (echoed.presence.correlation or 0) >= 0.5
    # No echo, a real microphone's noise, and the user talking over most of the reply:
    # the user's levels do not follow the reply's.
    talked_over = WebRtcCleaner(RATE, echo=True, noise=False)
    through_room(talked_over, far, user, RATE // 2, -200.0, RATE // 50)
    assert not talked_over.presence.audible and (talked_over.presence.correlation or 1) < 0.3
