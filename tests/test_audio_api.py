"""Duplex as the voice and ears of other front ends (issue 45): its own ``/v1/audio/speech``
and ``/v1/audio/transcriptions``, and ``--talker openai`` speaking through such an endpoint
(here Duplex's own, on loopback): streamed, cancelled at once, failing with a reason."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import sys
import wave

import httpx
import numpy as np
import pytest

from duplex.app.clients.realtime import RealtimeClient, audio_of
from duplex.app.clients.sounds import mix, silence, speech
from duplex.app.clients.verdicts import wer
from duplex.app.edge import transport
from duplex.app.edge.audio_api import SPEECH_RATE
from duplex.app.edge.audio_serving import HEAR_RATE, WINDOW_S, windows
from duplex.app.edge.config import ServerConfig
from duplex.pipeline.backends import Backends
from duplex.pipeline.talker import SpeechRequest, TalkerError
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.openai_speech import OpenAISpeechTalker, WavStream
from duplex.pipeline.vocoders.pcm import PcmVocoder
from lab.net import free_port
from lab.servers import serving
from tests.conftest import TEST_SERVER
from tests.util import Child, until

SAID = "can you tell me the weather for tomorrow"
LONG = " ".join(f"This is sentence number {i} of a very long answer." for i in range(60))  # ~3 min of speech


def base(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def wav_of(pcm: np.ndarray, rate: int, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(pcm, channels).astype("<i2").tobytes())
    return buf.getvalue()


async def transcribe(port: int, data: bytes, **fields: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base(port), timeout=60) as http:
        return await http.post(
            "/v1/audio/transcriptions",
            data={"model": "whisper-1", **fields},
            files={"file": ("speech.wav", data, "audio/wav")},
        )


async def test_speech_streams_wav_and_pcm_that_its_own_ears_hear(make_server):
    server = await make_server()
    async with httpx.AsyncClient(base_url=base(server.port), timeout=60) as http:
        r = await http.post("/v1/audio/speech", json={"model": "tts-1", "input": SAID, "voice": "alloy"})
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
        assert r.headers["transfer-encoding"] == "chunked"  # streamed as made, not a file built first
        stream = WavStream()
        pcm = stream.feed(r.content)
        assert stream.rate == SPEECH_RATE and pcm.size > SPEECH_RATE  # a second and more of it
        raw = await http.post("/v1/audio/speech", json={"input": SAID, "response_format": "pcm"})
        assert raw.headers["content-type"] == "audio/pcm"
        again = np.frombuffer(raw.content, "<i2")  # the same speech, without the header
        assert again.size == pcm.size and np.corrcoef(again, pcm)[0, 1] > 0.9
        listed = await http.get("/v1/models")
        assert listed.headers["connection"] == "close", "the server ends the connection: a pooled one would be lost"
        models = listed.json()["data"]
        assert {"tts-1", "whisper-1", "espeak"} <= {m["id"] for m in models}
    heard = await transcribe(server.port, r.content)  # its own streamed WAV, sizes "unknown" and all
    assert heard.status_code == 200 and wer(SAID, heard.json()["text"]) <= 0.25, heard.text
    text = await transcribe(server.port, wav_of(pcm, SPEECH_RATE), response_format="text")
    assert text.headers["content-type"].startswith("text/plain") and wer(SAID, text.text) <= 0.25
    assert 'duplex_speech_requests_total{outcome="done"} 2.0' in server.metrics_text()


async def test_transcriptions_take_any_rate_stereo_and_compressed_audio(make_server, espeak_runtime):
    import av

    server = await make_server()
    pcm = await speech(EspeakTalker(espeak_runtime), SAID, 48000)
    stereo = await transcribe(server.port, wav_of(pcm, 48000, channels=2), response_format="verbose_json")
    body = stereo.json()
    assert wer(SAID, body["text"]) <= 0.25 and body["duration"] == pytest.approx(pcm.size / 48000, abs=0.01)
    flac = io.BytesIO()
    with av.open(flac, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=48000, layout="mono")
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.rate = 48000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    compressed = await transcribe(server.port, flac.getvalue())
    assert wer(SAID, compressed.json()["text"]) <= 0.25, compressed.text


def test_long_uploads_are_heard_in_whole_windows_cut_where_it_is_quiet():
    rng = np.random.default_rng(0)
    loud = (rng.standard_normal(int(70 * HEAR_RATE)) * 3000).astype(np.int16)
    quiet_at = int(26.0 * HEAR_RATE)
    loud[quiet_at : quiet_at + HEAR_RATE // 5] = 0  # a pause at 26 s
    pieces = windows(loud)
    assert sum(p.size for p in pieces) == loud.size and np.array_equal(np.concatenate(pieces), loud)
    assert all(p.size <= WINDOW_S * HEAR_RATE for p in pieces)
    assert quiet_at <= pieces[0].size <= quiet_at + HEAR_RATE // 5  # cut in the pause, not through speech
    assert windows(np.zeros(0, np.int16)) == []


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": ""}, 400, "input"),
        ({"input": "x" * 4097}, 400, "input"),
        ({"input": "hi", "voice": "nobody"}, 400, "voice"),
        ({"input": "hi", "model": "someone-else"}, 400, "model"),
        ({"input": "hi", "response_format": "mp3"}, 400, "response_format"),
        ({"input": "hi", "speed": 9}, 400, "speed"),
        ({"input": "hi", "stream_format": "sse"}, 400, "stream_format"),
        ("not json", 400, None),
    ],
)
async def test_a_bad_speech_request_gets_openais_error_and_the_server_goes_on(make_server, body, status, param):
    server = await make_server()
    async with httpx.AsyncClient(base_url=base(server.port), timeout=30) as http:
        content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        r = await http.post("/v1/audio/speech", content=content)
        assert r.status_code == status and r.json()["error"]["param"] == param, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
        ok = await http.post("/v1/audio/speech", json={"input": "still here"})
        assert ok.status_code == 200 and len(ok.content) > 44


async def test_a_bad_upload_gets_a_reason(make_server):
    server = await make_server()
    async with httpx.AsyncClient(base_url=base(server.port), timeout=30) as http:
        r = await http.post("/v1/audio/transcriptions", content=b"{}", headers={"Content-Type": "application/json"})
        assert r.status_code == 415
        r = await http.post("/v1/audio/transcriptions", data={"model": "whisper-1"}, files={"other": ("x", b"1")})
        assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    r = await transcribe(server.port, b"RIFF not really a file at all")
    assert r.status_code == 400 and "not audio" in r.json()["error"]["message"]
    too_big = transport.MAX_POST_BYTES  # not this one's bound: the transcription bound is larger
    r = await transcribe(server.port, wav_of(np.zeros(too_big, np.int16), 16000))  # 0.5 MiB: taken
    assert r.status_code == 200
    with pytest.raises(httpx.HTTPError):  # over the 16 MiB bound: closed unread
        await transcribe(server.port, b"\0" * (17 * 1024 * 1024))


async def test_the_endpoints_keep_the_key_and_the_drain(make_server):
    keyed = await make_server(api_key="sesame")
    async with httpx.AsyncClient(base_url=base(keyed.port), timeout=30) as http:
        assert (await http.post("/v1/audio/speech", json={"input": "hi"})).status_code == 401
        r = await http.post("/v1/audio/speech", json={"input": "hi"}, headers={"Authorization": "Bearer sesame"})
        assert r.status_code == 200
    keyed.begin_drain("test")
    async with httpx.AsyncClient(base_url=base(keyed.port), timeout=30) as http:
        r = await http.post("/v1/audio/speech", json={"input": "hi"}, headers={"Authorization": "Bearer sesame"})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
    off = await make_server(audio_api=False)
    async with httpx.AsyncClient(base_url=base(off.port), timeout=30) as http:
        assert (await http.post("/v1/audio/speech", json={"input": "hi"})).status_code == 405


async def test_a_stream_outlasts_the_open_timeout_which_still_cuts_a_stalled_handshake(make_server, monkeypatch):
    monkeypatch.setattr(transport, "OPEN_TIMEOUT_S", 0.3)
    server = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = json.dumps({"input": LONG, "response_format": "pcm"}).encode()
    writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    await asyncio.sleep(0.6)  # not reading, past the open timeout: the voice waits on this client
    rest = await asyncio.wait_for(reader.read(), 60)  # ...and the whole stream still comes
    assert rest.endswith(b"\r\n0\r\n\r\n") and len(rest) > 60 * SPEECH_RATE * 2
    writer.close()
    slow, stalled = await asyncio.open_connection("127.0.0.1", server.port)
    stalled.write(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\n")  # and never the rest of the handshake
    assert await asyncio.wait_for(slow.read(), 10) == b""  # cut by the connection's own open timeout
    stalled.close()


@pytest.fixture
async def voice_server(make_server):
    """A Duplex whose own voice others speak through."""
    return await make_server()


async def test_the_remote_voice_streams_and_a_cancel_closes_its_stream_at_once(voice_server):
    talker = OpenAISpeechTalker(base(voice_server.port), "tts-1")
    try:
        await talker.start()
        whole = [c async for c in talker.speak(SpeechRequest("r1", SAID, "alloy"))]
        assert all(c.audio.rate == SPEECH_RATE for c in whole) and len(whole) > 1  # pieces, as they came
        gen = talker.speak(SpeechRequest("r2", LONG, "alloy"))
        first = await anext(gen)
        assert first.audio.length > 0
        await gen.aclose()  # what cancelling a reply does
        metrics = voice_server.metrics_text
        await until(lambda: 'duplex_speech_requests_total{outcome="cancelled"} 1.0' in metrics(), 10, what="cancelled")
        with pytest.raises(TalkerError, match="answered 400: voice 'espeak:nobody'"):
            async for _ in talker.speak(SpeechRequest("r3", SAID, "espeak:nobody")):
                pass
    finally:
        await talker.aclose()
    gone = OpenAISpeechTalker(f"http://127.0.0.1:{free_port()}", "tts-1")
    with pytest.raises(ValueError, match="is not reachable"):
        await gone.start()
    wrong = OpenAISpeechTalker(base(voice_server.port), "no-such-voice-model")
    with pytest.raises(ValueError, match="serves .* not 'no-such-voice-model'"):
        await wrong.start()
    await gone.aclose()
    await wrong.aclose()


async def test_a_session_speaks_through_the_remote_voice_and_a_failure_is_said(voice_server, backends):
    talker = OpenAISpeechTalker(base(voice_server.port), "tts-1")
    await talker.start()
    front = Backends(talker, PcmVocoder(), voice_activity=backends.voice_activity)
    try:
        async with serving(front, ServerConfig(**TEST_SERVER)) as server:
            c = await RealtimeClient.connect(server.port)
            await c.update(turn_detection=None)
            await c.say(SAID)
            await c.send("response.create")
            done = await c.until("response.done")
            assert done["response"]["status"] == "completed" and audio_of(c.events).size > SPEECH_RATE
            await c.update(voice="espeak:nobody")  # the front end takes any name: the endpoint refuses this one
            await c.send("response.create")
            events = []
            while (ev := await c.recv())["type"] != "response.done":
                events.append(ev)
            assert ev["response"]["status"] == "failed"
            errors = [e["error"]["message"] for e in events if e["type"] == "error"]
            assert errors and "answered 400" in errors[0], errors
            await c.close()
    finally:
        await talker.aclose()


async def test_one_duplex_speaks_and_hears_through_another(espeak_runtime):
    said = await speech(EspeakTalker(espeak_runtime), SAID, 24000)
    voice_port, front_port = free_port(), free_port()
    serve = [sys.executable, "-m", "duplex.app", "serve", "--thinker", "echo", "--turn-detection", "server_vad"]
    models = await Child.spawn([*serve, "--port", str(voice_port)])
    front = None
    try:
        await models.printed("listening", timeout=120)
        url = base(voice_port)
        front = await Child.spawn(
            [*serve, "--port", str(front_port), "--talker", "openai", "--tts-url", url,
             "--asr", "openai", "--asr-url", url, "--asr-model", "whisper-1"]
        )  # fmt: skip
        await front.printed("listening", timeout=120)
        c = await RealtimeClient.connect(front_port)
        turn = mix(silence(0.5), said, silence(1.5))
        for i in range(0, turn.size, 2400):
            await c.append(turn[i : i + 2400])
        async with asyncio.timeout(60):
            heard = await c.until("conversation.item.input_audio_transcription.completed")
            done = await c.until("response.done")
        assert wer(SAID, heard["transcript"]) <= 0.25, heard
        assert done["response"]["status"] == "completed" and audio_of(c.events).size > SPEECH_RATE
        await c.close()
        metrics = httpx.get(f"{url}/metrics").text
        assert 'duplex_speech_requests_total{outcome="done"}' in metrics
        assert 'duplex_transcription_requests_total{outcome="done"}' in metrics
    finally:
        codes = [await models.stop(), await front.stop() if front is not None else 0]
    assert codes == [0, 0]
    for child in (models, front):
        assert child is not None and "Traceback" not in child.output, child.output


def test_a_wav_stream_is_read_piece_by_piece_whatever_the_cuts():
    pcm = (np.arange(1000) % 200 - 100).astype(np.int16)
    data = wav_of(pcm, 16000)
    for step in (1, 3, 7, 44, 4096):
        stream = WavStream()
        got = np.concatenate([stream.feed(data[i : i + step]) for i in range(0, len(data), step)])
        assert stream.rate == 16000 and np.array_equal(got, pcm)
    with pytest.raises(ValueError, match="not WAV"):
        WavStream().feed(b"ID3 an mp3")
    stereo = wav_of(pcm, 16000, channels=2)
    with pytest.raises(ValueError, match="want PCM16 mono"):
        WavStream().feed(stereo)
    assert struct.unpack("<I", wav_of(pcm, 8000)[24:28])[0] == 8000


async def test_serve_with_a_dead_speech_endpoint_says_so_in_one_line():
    dead = f"http://127.0.0.1:{free_port()}"
    child = await Child.spawn(
        [sys.executable, "-m", "duplex.app", "serve", "--port", str(free_port()), "--talker", "openai",
         "--tts-url", dead]
    )  # fmt: skip
    assert await asyncio.wait_for(child.proc.wait(), 120) == 2
    await child.stop()
    assert f"duplex: the speech endpoint {dead} is not reachable" in child.output, child.output
    assert "Traceback" not in child.output
