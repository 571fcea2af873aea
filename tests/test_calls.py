"""WebRTC calls (``POST /v1/realtime/calls``) with a real WebRTC peer: aiortc on the
caller's side too, Opus both ways over loopback, events on ``oai-events``.

The caller's microphone is a track that plays a script at real time (a microphone's
own clock); its speaker records the server's track. A spoken question is answered
on the track; talking over the reply cancels it and cuts it where the caller began,
as on the WebSocket.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from duplex.app.clients.sounds import speech, trim
from duplex.app.edge.calls import CallError, parse_call, without_transport
from lab.caller import FRAME, RATE, Caller, loud
from tests.util import until


def test_an_offer_is_read_from_sdp_or_from_the_unified_form():
    sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
    assert parse_call(sdp.encode(), "application/sdp").offer == sdp
    body = (
        b'--b\r\nContent-Disposition: form-data; name="sdp"\r\n\r\n' + sdp.encode() + b"\r\n"
        b'--b\r\nContent-Disposition: form-data; name="session"\r\n\r\n'
        b'{"instructions": "be brief", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}\r\n--b--\r\n'
    )
    call = parse_call(body, "multipart/form-data; boundary=b")
    assert call.offer.startswith("v=0") and call.session is not None
    assert without_transport(call.session) == {"instructions": "be brief", "audio": {"input": {}}}
    for bad, ctype in ((b"hello", "application/sdp"), (sdp.encode(), "text/plain")):
        with pytest.raises(CallError):
            parse_call(bad, ctype)


async def test_a_call_is_answered_and_a_barge_in_cuts_the_reply(server, talker):
    caller = Caller()
    r = await caller.call(server.port)
    assert r.status_code == 201, r.text
    assert r.headers["Location"].startswith("/v1/realtime/calls/rtc_")
    await asyncio.wait_for(caller.opened.wait(), 10)
    await until(lambda: bool(caller.of_type("session.created")), 10, what="session.created on oai-events")
    ask = trim(
        await speech(talker, "please tell me a long story about a dog and a cat who lived on a farm", RATE), RATE
    )
    caller.mic.say(np.zeros(RATE // 2, np.int16))
    caller.mic.say(ask)
    caller.mic.say(np.zeros(RATE * 30, np.int16))
    # Answered on the track: the echo thinker says the question back.
    await until(lambda: bool(caller.of_type("output_audio_buffer.started")), 30, what="the reply's audio")
    heard = caller.of_type("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert "story" in heard.lower(), heard
    assert not caller.of_type("response.output_audio.delta"), "audio goes on the track, not the channel"
    rid = caller.of_type("output_audio_buffer.started")[0]["response_id"]
    await until(lambda: loud(caller.heard) >= RATE, 20, what="a second of the reply heard on the track")
    # Talk over it: cancelled, and cut near where the caller began.
    stop = trim(await speech(talker, "wait, please stop talking now", RATE), RATE)
    caller.mic.queue.clear()
    caller.mic.say(stop)
    frames_heard = len(caller.heard)  # what the caller's speaker had played when it began
    caller.mic.say(np.zeros(RATE * 10, np.int16))
    await until(lambda: bool(caller.of_type("conversation.item.truncated")), 20, what="the reply cut")
    done = [e for e in caller.of_type("response.done") if e["response"]["id"] == rid]
    assert done and done[0]["response"]["status"] == "cancelled"
    cleared = caller.of_type("output_audio_buffer.cleared")
    assert cleared and cleared[0]["response_id"] == rid
    extension = ("response.output_audio.ducked", "response.output_audio.paused", "response.output_audio.resumed")
    assert not [e for e in caller.events if e["type"] in extension], "Duplex's own events stay in the bridge"
    # Cut at what the caller had heard when it began: the reply's audio on its speaker
    # up to then (the track's clock, less the jitter buffer), not where the server was.
    cut_ms = caller.of_type("conversation.item.truncated")[0]["audio_end_ms"]
    first = next(i for i, f in enumerate(caller.heard) if loud([f]))
    heard_ms = (frames_heard - first) * FRAME * 1000 // RATE
    print(f"cut at {cut_ms} ms; the caller had heard {heard_ms} ms when it began")
    assert abs(cut_ms - heard_ms) <= 150, (cut_ms, heard_ms)
    await caller.close()


async def test_a_call_the_server_cannot_take_is_refused_with_its_reason(server):
    caller = Caller()
    r = await caller.call(server.port, content=b"not sdp", headers={"Content-Type": "application/sdp"})
    assert r.status_code == 400 and "SDP" in r.text
    async with httpx.AsyncClient() as http:
        r = await http.post(f"http://127.0.0.1:{server.port}/v1/other", content=b"x")
        assert r.status_code == 405
        r = await http.post(f"http://127.0.0.1:{server.port}/v1/realtime/calls/rtc_nope/hangup")
        assert r.status_code == 404
    await caller.close()


async def test_a_post_the_server_will_not_read_is_closed_and_other_sessions_go_on(server):
    import contextlib

    async def raw(request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    # More than the server takes: nothing is buffered, the connection closes.
    assert await raw(b"POST /v1/realtime/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n") == b""
    # No body where one is needed, or one where none is: a clear answer at once.
    assert (await raw(b"POST /v1/realtime/calls HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 415")
    assert (await raw(b"POST /v1/realtime HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")).startswith(
        b"HTTP/1.1 405"
    )
    # A body is read whole, however it is split.
    answer = await raw(
        b"POST /v1/realtime/calls HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    )
    assert answer.startswith(b"HTTP/1.1 415"), answer
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{server.port}/healthz")).status_code == 200


async def test_a_call_past_the_session_limit_is_refused_like_a_session(make_server):
    full = await make_server(max_sessions=0)
    caller = Caller()
    r = await caller.call(full.port)
    assert r.status_code == 503 and "too many sessions" in r.text
    await caller.close()
