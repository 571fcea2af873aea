"""Listening while speaking, through the real server: VAD, turns, recognition, barge-in.

The simulated client streams real eSpeak NG speech, silence and noise on the
input sample clock (faster than real time, exact through ``session.sync``) and
plays what it receives through a simulated speaker on the same clock.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import websockets

from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import cough, mix, noise, silence, speech, trim, voiced_bounds
from duplex.app.clients.verdicts import wer
from tests.util import start_reply

RATE = 24000
LONG = " ".join(f"This is sentence number {i} of a long reply." for i in range(12))


def ms(samples: int, rate: int = RATE) -> int:
    return samples * 1000 // rate


async def connect(server, extensions: bool = True, **session) -> SimulatedClient:
    sim = await SimulatedClient.open(server.port, keep_audio=True, extensions=extensions)
    if session:
        await sim.send("session.update", session=session)
        await sim.sync()
        assert sim.of_type("session.updated"), [r.event for r in sim.events]
    return sim


@pytest.mark.parametrize("rate", [24000, 16000])
async def test_speech_boundaries_turn_transcript_and_reply(server, talker, rate):
    sim = await connect(server, audio={"input": {"format": {"type": "audio/pcm", "rate": rate}}})
    sim.input_rate = rate
    sim.frame = rate // 50
    said = "hello how are you today"
    words = await speech(talker, said, rate)
    on, off = voiced_bounds(words, rate)
    lead_in = rate  # one second of silence first
    await sim.stream(mix(silence(1.0, rate), words, silence(1.0, rate)))
    started = sim.of_type("input_audio_buffer.speech_started")
    stopped = sim.of_type("input_audio_buffer.speech_stopped")
    assert len(started) == 1 and len(stopped) == 1
    true_on, true_off = ms(lead_in + on, rate), ms(lead_in + off, rate)
    onset = started[0].event["audio_start_ms"] + 300  # reported with the 300 ms prefix padding
    assert abs(onset - true_on) <= 100, (onset, true_on)
    offset = stopped[0].event["audio_end_ms"] - 500  # reported after the 500 ms silence window
    assert -50 <= offset - true_off <= 250, (offset, true_off)
    item_id = started[0].event["item_id"]
    assert stopped[0].event["item_id"] == item_id
    assert sim.of_type("input_audio_buffer.committed")[0].event["item_id"] == item_id
    heard = sim.of_type("conversation.item.input_audio_transcription.completed")[0].event
    assert heard["item_id"] == item_id
    assert wer(said, heard["transcript"]) <= 0.4, heard["transcript"]
    # The default reply says back what it heard, paced on this client's clock.
    await sim.silence(4.0)
    done = sim.of_type("response.done")
    assert done and done[0].event["response"]["status"] == "completed"
    assert done[0].event["response"]["output"][0]["content"][0]["transcript"] == heard["transcript"]
    rid = done[0].event["response"]["id"]
    assert sim.heard[rid].received > 0.8 * RATE and sim.heard[rid].stale_bytes == 0
    await sim.ws.close()


async def test_barge_in_pauses_cancels_and_truncates_at_the_heard_position(server, talker):
    sim = await connect(server)
    rid = await start_reply(sim, LONG)
    await sim.silence(2.0)  # the reply plays
    interruption = trim(await speech(talker, "wait, what time is it now"), RATE)  # not a command: answered
    talk_from = sim.input_samples
    await sim.stream(mix(interruption, silence(1.5)))
    h = sim.heard[rid]
    paused = sim.of_type("response.output_audio.ducked")
    assert paused and paused[0].event["response_id"] == rid
    # Output stopped soon after the speech began (the benchmark measures it properly).
    assert ms(h.stopped_at - talk_from) <= 250
    done = [r for r in sim.of_type("response.done") if r.event["response"]["id"] == rid][0].event
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    truncated = sim.of_type("conversation.item.truncated")[0].event
    assert truncated["item_id"] == done["response"]["output"][0]["id"]
    # Cut where the user began (the speech is trimmed: it begins at talk_from), to within
    # one talker chunk (the server's onset is where the speech rose, app/core/listening/onset.py).
    played = ms(sim.played_at(rid, talk_from))
    chunk_ms = 60  # one talker chunk
    assert abs(truncated["audio_end_ms"] - played) <= chunk_ms, (truncated["audio_end_ms"], played)
    assert truncated["audio_end_ms"] <= ms(h.received)  # clamped to what was sent
    assert h.stale_bytes == 0
    # The item keeps only the words heard.
    await sim.send("conversation.item.retrieve", item_id=truncated["item_id"])
    await sim.sync()
    kept = sim.of_type("conversation.item.retrieved")[0].event["item"]["content"][0]["transcript"]
    assert LONG.startswith(kept) and len(kept) < len(LONG) / 3
    # The interruption became a turn: it is answered, with none of the old reply.
    await sim.silence(4.0)
    replies = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] != rid]
    assert replies and replies[0]["status"] == "completed"
    new = sim.heard[replies[0]["id"]]
    assert new.stale_bytes == 0 and h.stale_bytes == 0
    said = replies[0]["output"][0]["content"][0]["transcript"]
    expected = await speech(talker, said, RATE, voice="en-us+klatt2")
    assert abs(new.received - expected.size) < 0.05 * expected.size, "no tail of the cancelled reply"
    await sim.ws.close()


@pytest.mark.parametrize("sound", ["noise", "cough", "hm", "uh huh"])
async def test_noise_coughs_and_backchannels_do_not_cancel(server, talker, sound):
    sim = await connect(server)
    text = "This reply should survive a short sound from the listener."
    rid = await start_reply(sim, text)
    await sim.silence(1.0)
    if sound == "noise":
        burst = noise(0.3, RATE, level=6000)
    elif sound == "cough":
        burst = cough(RATE, 0.3)
    else:
        burst = trim(await speech(talker, sound), RATE)
    await sim.stream(mix(burst, silence(5.0)))
    done = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] == rid]
    assert done and done[0]["status"] == "completed", done
    assert not sim.of_type("conversation.item.truncated")
    h = sim.heard[rid]
    assert h.dropped == 0 and h.played == h.received, "the whole reply was heard"
    paused, resumed = sim.of_type("response.output_audio.ducked"), sim.of_type("response.output_audio.resumed")
    assert len(paused) == len(resumed)
    if sound in ("hm", "uh huh"):  # speech-like: paused at once, then resumed where it was
        assert len(paused) == 1
    assert not [r for r in sim.of_type("response.created") if r.event["response"]["id"] != rid], "not a turn"
    await sim.ws.close()


async def test_pause_mid_sentence_shorter_than_silence_window_is_one_turn(server, talker):
    sim = await connect(server)
    a = trim(await speech(talker, "I would like"), RATE)
    b = trim(await speech(talker, "to order a pizza"), RATE)
    await sim.stream(mix(silence(0.5), a, silence(0.35), b, silence(1.0)))
    assert len(sim.of_type("input_audio_buffer.speech_started")) == 1
    assert len(sim.of_type("input_audio_buffer.committed")) == 1
    await sim.ws.close()


async def test_turn_detection_settings_are_honoured(server, talker):
    words = trim(await speech(talker, "turn on the lights"), RATE)
    # create_response off: the turn is committed and transcribed, nobody answers.
    sim = await connect(server, turn_detection={"type": "server_vad", "create_response": False})
    await sim.stream(mix(silence(0.5), words, silence(1.0)))
    assert sim.of_type("conversation.item.input_audio_transcription.completed")
    assert not sim.of_type("response.created")
    await sim.ws.close()
    # interrupt_response off: talking over a reply neither pauses nor cancels it.
    sim = await connect(server, turn_detection={"type": "server_vad", "interrupt_response": False})
    rid = await start_reply(sim, "A reply that will not be interrupted.")
    await sim.stream(mix(silence(0.5), words, silence(4.0)))
    assert not sim.of_type("response.output_audio.ducked")
    assert [r.event["response"]["status"] for r in sim.of_type("response.done")][0] == "completed"
    assert sim.heard[rid].dropped == 0
    await sim.ws.close()
    # A longer silence window keeps two phrases in one turn.
    sim = await connect(
        server, turn_detection={"type": "server_vad", "silence_duration_ms": 1200, "create_response": False}
    )
    await sim.stream(mix(silence(0.5), words, silence(0.8), words, silence(1.5)))
    assert len(sim.of_type("input_audio_buffer.committed")) == 1
    stopped = sim.of_type("input_audio_buffer.speech_stopped")[0].event["audio_end_ms"]
    assert stopped > ms(RATE // 2 + 2 * words.size + int(0.8 * RATE))
    await sim.ws.close()
    # A higher threshold and no server VAD at all.
    sim = await connect(server, turn_detection=None)
    await sim.stream(mix(silence(0.5), words, silence(1.0)))
    assert not sim.of_type("input_audio_buffer.speech_started")
    await sim.send("input_audio_buffer.commit")
    await sim.sync()
    assert sim.of_type("conversation.item.input_audio_transcription.completed")
    await sim.ws.close()


async def test_same_input_at_any_speed_gives_the_same_events(server, talker):
    words = trim(await speech(talker, "please tell me a story about a dog"), RATE)
    stream = mix(silence(0.7), words, silence(0.9), words[: RATE // 2], silence(1.2))

    async def run(frame_ms: int) -> list[tuple]:
        sim = await connect(server, turn_detection={"type": "server_vad", "create_response": False})
        sim.frame = RATE * frame_ms // 1000
        await sim.stream(stream)
        await sim.ws.close()
        keep = (
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.completed",
        )
        return [
            (r.event["type"], r.event.get("audio_start_ms"), r.event.get("audio_end_ms"), r.event.get("transcript"))
            for r in sim.events
            if r.event["type"] in keep
        ]

    fine, coarse = await run(10), await run(100)
    assert fine == coarse
    assert len(fine) == 8


async def test_acks_drive_pacing(server, talker):
    sim = await connect(server)
    sim.ack_every = None
    rid = await start_reply(sim, LONG)
    # A client whose speaker is stuck says so: the server sends no more than the lead.
    for _ in range(20):
        await sim.send("playback.ack", response_id=rid, played_samples=0, input_samples=sim.input_samples)
        sim._paused = True  # its speaker plays nothing
        await sim.silence(0.1)
    assert ms(sim.heard[rid].received) <= 250 + 100
    # Without acks the server estimates playback from the input clock instead.
    sim2 = await connect(server)
    sim2.ack_every = None
    rid2 = await start_reply(sim2, LONG)
    await sim2.silence(2.0)
    assert 2000 <= ms(sim2.heard[rid2].received) <= 2000 + 250 + 100
    await sim.ws.close()
    await sim2.ws.close()


async def test_an_ack_from_the_future_does_not_freeze_the_reply(server, talker):
    sim = await connect(server)
    sim.ack_every = None
    rid = await start_reply(sim, LONG)
    await sim.silence(0.2)
    # Stamped far past the input sent: taken as stamped now, not as playback's state until then.
    await sim.send("playback.ack", response_id=rid, played_samples=0, input_samples=2**53)
    await sim.silence(2.0)
    assert ms(sim.heard[rid].received) >= 1800  # it went on at real time (it once stood at 0.33 s)
    await sim.ws.close()


async def test_threshold_and_prefix_padding_are_honoured(server, talker):
    words = trim(await speech(talker, "what time is it now"), RATE)
    stream = mix(silence(1.0), words, silence(1.0))

    async def started(**td) -> list[dict]:
        sim = await connect(server, turn_detection={"type": "server_vad", "create_response": False, **td})
        await sim.stream(stream)
        await sim.ws.close()
        return [r.event for r in sim.of_type("input_audio_buffer.speech_started")]

    wide, narrow = await started(prefix_padding_ms=300), await started(prefix_padding_ms=100)
    assert wide[0]["audio_start_ms"] == narrow[0]["audio_start_ms"] - 200
    assert await started(threshold=1.0) == []  # nothing is that certain to be speech


async def test_binary_audio_mode(server, talker):
    """Opt-in binary frames: raw PCM16 in, JSON header + binary PCM out, no base64."""
    ws = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1", max_size=None)  # an extension
    assert json.loads(await ws.recv())["type"] == "session.created"
    await ws.send(
        json.dumps({"type": "session.update", "session": {"binary_audio": True, "pacing": {"enabled": False}}})
    )
    assert json.loads(await ws.recv())["session"]["binary_audio"] is True
    await ws.send(b"\x01\x02\x03")  # odd length: refused, nothing else changes
    err = json.loads(await ws.recv())
    assert err["type"] == "error" and err["error"]["code"] == "invalid_audio"
    words = trim(await speech(talker, "hello how are you today"), RATE)
    for part in np.array_split(mix(silence(0.5), words, silence(1.0)), 60):
        await ws.send(part.astype("<i2").tobytes())
    audio, heard, header = bytearray(), None, None
    while True:
        msg = await asyncio.wait_for(ws.recv(), 30)
        if isinstance(msg, bytes):
            assert header is not None, "a binary frame always follows its delta header"
            audio += msg
            header = None
            continue
        assert header is None, "the header's binary frame must come next"
        event = json.loads(msg)
        if event["type"] == "response.output_audio.delta":
            assert event["binary"] is True and "delta" not in event and event["epoch"] == 1
            header = event
        elif event["type"] == "conversation.item.input_audio_transcription.completed":
            heard = event["transcript"]
        elif event["type"] == "response.done":
            break
    assert wer("hello how are you today", heard) <= 0.4
    assert len(audio) > RATE  # more than half a second of PCM16
    await ws.close()


async def test_a_plain_realtime_client_has_the_reply_stop_at_speech_and_one_cut(server, talker):
    """A client that cannot be told to duck (no ``?duplex=1``) gets what OpenAI's server
    does: the reply's output stops at the speech; its own truncate, which the SDKs send
    on speech_started at their wall-clock position, then agrees with the server's."""
    sim = await connect(server, extensions=False)
    rid = await start_reply(sim, LONG)
    await sim.silence(2.0)
    interruption = trim(await speech(talker, "wait, please stop talking now"), RATE)
    talk_from = sim.input_samples
    await sim.stream(interruption[: RATE // 2])
    started = sim.of_type("input_audio_buffer.speech_started")
    assert started, "the speech was heard"
    h = sim.heard[rid]
    last = max(r.at for r in sim.of_type("response.output_audio.delta") if r.event["response_id"] == rid)
    assert ms(last - talk_from) <= 250, "the reply's output stopped at the speech"
    item_id = sim.of_type("response.output_item.added")[0].event["item"]["id"]
    # The SDK's own truncate, at what it played by its clock when speech_started came.
    await sim.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=ms(h.played))
    await sim.stream(mix(interruption[RATE // 2 :], silence(1.5)))
    late = [r for r in sim.of_type("response.output_audio.delta") if r.event["response_id"] == rid and r.at > last]
    assert not late, "and did not start again"
    cuts = {
        r.event["audio_end_ms"] for r in sim.of_type("conversation.item.truncated") if r.event["item_id"] == item_id
    }
    assert len(cuts) == 1, cuts
    assert not sim.of_type("error"), [r.event for r in sim.of_type("error")]
    done = [r for r in sim.of_type("response.done") if r.event["response"]["id"] == rid][0].event
    assert done["response"]["status"] == "cancelled"
    await sim.ws.close()
