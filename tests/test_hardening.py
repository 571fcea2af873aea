"""Access, limits, faults and observability, over real WebSockets."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import time
import urllib.request

import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI

from duplex.app.clients.realtime import RealtimeClient, audio_of, pcm_b64
from duplex.app.clients.simulated import SimulatedClient
from duplex.app.clients.sounds import mix, silence, speech, trim
from duplex.app.core.limits import SessionLimits
from duplex.pipeline.backends import Backends
from duplex.pipeline.talker import TalkerError
from duplex.pipeline.thinker import NOT_UNDERSTOOD, EchoThinker
from lab.procs import cpu_seconds
from lab.servers import serving
from tests.util import gate, stage_tasks, until, ws_url

LONG = " ".join(f"This is sentence number {i} of a long reply." for i in range(20))


async def _refused(port: int, **kwargs) -> int:
    with pytest.raises(websockets.InvalidStatus) as info:
        await websockets.connect(ws_url(port, kwargs.pop("query", "")), **kwargs)
    return info.value.response.status_code


# -- access -----------------------------------------------------------------------


async def test_api_key_from_header_query_or_subprotocol(make_server, caplog):
    server = await make_server(api_key="sekret")
    caplog.set_level(logging.WARNING, logger="duplex.server")
    assert await _refused(server.port) == 401
    assert await _refused(server.port, additional_headers={"Authorization": "Bearer wrong"}) == 401
    assert any("refused" in r.getMessage() and "API key" in r.getMessage() for r in caplog.records)
    for kwargs in (
        {"additional_headers": {"Authorization": "Bearer sekret"}},
        {"query": "?api_key=sekret"},
        {"subprotocols": ["realtime", "openai-insecure-api-key.sekret"]},
    ):
        query = kwargs.pop("query", "")
        ws = await websockets.connect(ws_url(server.port, query), **kwargs)
        assert json.loads(await ws.recv())["type"] == "session.created"
        if "subprotocols" in kwargs:
            assert ws.subprotocol == "realtime", "the key subprotocol is never echoed back"
        await ws.close()
    # The official SDK sends its key as a Bearer header.
    client = AsyncOpenAI(
        api_key="sekret",
        base_url=f"http://127.0.0.1:{server.port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
    )
    async with client.realtime.connect(model="duplex") as conn:
        assert (await conn.recv()).type == "session.created"
    assert 'duplex_refusals_total{kind="unauthorized"} 2.0' in server.metrics_text()


async def test_origin_allow_list_stops_cross_site_pages(make_server):
    server = await make_server()
    own = f"http://127.0.0.1:{server.port}"
    assert await _refused(server.port, origin="http://evil.example") == 403
    ws = await websockets.connect(ws_url(server.port), origin=own)  # the server's own page
    await ws.close()
    ws = await websockets.connect(ws_url(server.port))  # no Origin: not a browser
    await ws.close()
    listed = await make_server(allowed_origins=("https://app.example",))
    ws = await websockets.connect(ws_url(listed.port), origin="https://app.example")
    await ws.close()
    assert await _refused(listed.port, origin=f"http://127.0.0.1:{listed.port}") == 403


async def test_session_limit_refuses_with_503(make_server):
    server = await make_server(max_sessions=2)
    a, b = await RealtimeClient.connect(server.port), await RealtimeClient.connect(server.port)
    assert await _refused(server.port) == 503
    await a.close()
    await until(lambda: len(server.connections) == 1)
    c = await RealtimeClient.connect(server.port)  # room again
    await asyncio.gather(b.close(), c.close())


# -- limits -----------------------------------------------------------------------


async def test_input_faster_than_allowed_is_refused_and_the_session_goes_on(make_server):
    server = await make_server(limits=SessionLimits(max_input_speed=2.0, input_burst_s=1.0))
    c = await RealtimeClient.connect(server.port)
    await c.update(turn_detection=None)
    await c.send("input_audio_buffer.append", audio=pcm_b64(np.zeros(12000, np.int16)))  # 0.5 s: fine
    await c.send("input_audio_buffer.append", audio=pcm_b64(np.zeros(72000, np.int16)), event_id="fast")
    err = await c.until("error")
    assert err["error"]["code"] == "input_rate_exceeded" and err["error"]["event_id"] == "fast"
    await c.send("input_audio_buffer.commit")
    committed = await c.until("input_audio_buffer.committed")  # the half second accepted before stays
    assert committed["item_id"]
    await c.close()


@pytest.mark.parametrize(
    "frame", [b"\x00" * 8192, json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 8192})]
)
async def test_a_message_over_the_size_limit_is_refused_before_it_is_buffered(make_server, frame):
    server = await make_server(max_message_bytes=4096)
    other = await RealtimeClient.connect(server.port)
    c = await RealtimeClient.connect(server.port)
    await c.update(binary_audio=True)
    await c.send_raw(frame)
    with pytest.raises(websockets.ConnectionClosed) as info:
        async with asyncio.timeout(10):
            await c.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # message too big
    await other.say("the other session goes on")
    await other.close()


async def test_reply_length_limit_ends_the_reply_and_stops_the_talker(make_server, espeak_runtime):
    server = await make_server(limits=SessionLimits(max_reply_s=1.0))
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False})
    await c.say(LONG)
    await c.send("response.create")
    done = await c.until("response.done")
    assert done["response"]["status"] == "incomplete"
    assert done["response"]["status_details"]["reason"] == "max_output_tokens"
    assert 24000 <= audio_of(c.events).size <= 24000 + 2 * 1441
    await until(lambda: not stage_tasks(), what="the reply's stages stopped")
    assert await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    await c.say("ok")
    await c.send("response.create")
    assert (await c.until("response.done"))["response"]["status"] == "completed"
    await c.close()


async def test_idle_session_is_closed_with_a_reason(make_server):
    server = await make_server(idle_timeout_s=0.5)
    ws = await websockets.connect(ws_url(server.port))
    await ws.recv()  # session.created, then say nothing
    with pytest.raises(websockets.ConnectionClosed) as info:
        async with asyncio.timeout(10):
            await ws.recv()
    assert info.value.rcvd.code == 1008 and "idle" in info.value.rcvd.reason
    await until(lambda: not server.connections)


async def test_a_client_that_stops_reading_is_closed_within_bounds(make_server):
    server = await make_server(stall_timeout_s=1.0)
    ws = await websockets.connect(ws_url(server.port), max_size=None)
    await ws.recv()
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    for event in (
        {"type": "session.update", "session": {"pacing": {"enabled": False}}},
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG * 3}]},
        },
        {"type": "response.create"},
    ):
        await ws.send(json.dumps(event))
    ws.transport.pause_reading()  # and never read again
    stalled = 'duplex_refusals_total{kind="stalled"} 1.0'
    await until(lambda: stalled in server.metrics_text(), 30, what="the stall noticed")
    refused_at = asyncio.get_running_loop().time()
    await until(lambda: not server.connections, 30, what="the stalled client closed")
    # Closed within a second or so of the refusal, not at the next keepalive tick (20 s).
    assert asyncio.get_running_loop().time() - refused_at < 3.0
    bound = server.config.queues.talker_queue.max_bytes + server.config.queues.output_queue.max_bytes
    assert server.metrics.value("duplex_queue_high_water_bytes") <= bound
    assert stage_tasks() == []
    assert 'duplex_refusals_total{kind="stalled"} 1.0' in server.metrics_text()
    ws.transport.abort()


async def test_a_client_that_stops_reading_a_paced_reply_is_closed_soon_after(make_server):
    # Finding 10: the stall timeout starts once the kernel stops taking data; with the
    # send buffer Linux grows to 4 MiB, that took ~a minute of a paced reply (64 KB/s of
    # base64), holding its slot. The client here is an ordinary one (buffers as is).
    server = await make_server(stall_timeout_s=1.0)
    ws = await websockets.connect(ws_url(server.port), max_size=None)
    await ws.recv()
    for event in (
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG * 3}]},
        },
        {"type": "response.create"},
    ):
        await ws.send(json.dumps(event))
    loop = asyncio.get_running_loop()
    await until(lambda: server.metrics.value("duplex_bytes_out_total") > 0, 30, what="the reply begun")
    ws.transport.pause_reading()  # and never read again
    stopped = loop.time()
    await until(lambda: not server.connections, 60, what="the stalled client closed")
    took = loop.time() - stopped
    # The bytes in flight (the client's window, the server's fixed send buffer, the
    # write buffer) take seconds at the voice's pace, then the 1 s timeout.
    assert took < 20, f"closed {took:.1f} s after the client stopped reading"
    assert 'duplex_refusals_total{kind="stalled"} 1.0' in server.metrics_text()
    ws.transport.abort()


async def test_a_sync_waiting_on_a_long_unpaced_reply_still_hears_the_user(server, talker, espeak_runtime, monkeypatch):
    # Issue 42 #2: the answer to session.sync held the socket's reader until an unpaced
    # reply was all made, so speech sent meanwhile was never heard (no barge-in).
    words = await speech(talker, "wait a moment please", 24000)  # made before the voice is held
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False})
    await c.say(LONG)
    hold = gate(espeak_runtime.pool, monkeypatch)  # the reply's voice is slow: still being made
    await c.send("response.create")
    await c.until("response.created")
    await c.send("session.sync")
    await c.append(mix(silence(0.5), words, silence(1.0)))
    await c.until("input_audio_buffer.speech_started")
    assert not [e for e in c.events if e["type"] == "session.synced"], "heard before the sync was answered"
    hold.set()
    await c.until("session.synced")
    await c.close()


# -- faults -----------------------------------------------------------------------


class _Flaky:
    """Wraps a real backend to raise once, mid-reply: a fault a real part won't make on demand."""

    def __init__(self, inner, after: int) -> None:
        self.inner, self.after, self.failed = inner, after, False
        self.name, self.artifact_id = inner.name, getattr(inner, "artifact_id", "x")
        self.blocking = getattr(inner, "blocking", False)

    def check_voice(self, voice: str) -> None:
        self.inner.check_voice(voice)

    def release(self, request_id: str) -> None:
        self.inner.release(request_id)

    async def speak(self, request):
        n = 0
        async for chunk in self.inner.speak(request):
            if not self.failed and n == self.after:
                self.failed = True
                raise TalkerError("injected talker fault")
            n += 1
            yield chunk

    def open(self, input_rate, output_rate):
        stream = self.inner.open(input_rate, output_rate)
        flaky = self

        class Stream:
            output_rate = stream.output_rate

            def push(self, buf):
                if not flaky.failed:
                    flaky.failed = True
                    raise RuntimeError("injected vocoder fault")
                return stream.push(buf)

            def flush(self):
                return stream.flush()

            def output_position(self, p):
                return stream.output_position(p)

        return Stream()


@pytest.mark.parametrize("stage", ["talker", "vocoder"])
async def test_a_failing_stage_fails_the_reply_and_the_next_one_works(talker, stage, vad_model, recognizer):
    from duplex.pipeline.vocoders.pcm import PcmVocoder

    t, v = (_Flaky(talker, 3), PcmVocoder()) if stage == "talker" else (talker, _Flaky(PcmVocoder(), 0))
    async with serving(Backends(t, v, voice_activity=vad_model, recognizer=recognizer)) as server:
        c = await RealtimeClient.connect(server.port)
        await c.update(pacing={"enabled": False})
        await c.say(LONG)
        await c.send("response.create")
        events = []
        while (e := await c.recv())["type"] != "response.done":
            events.append(e)
        assert e["response"]["status"] == "failed"
        errors = [x for x in events if x["type"] == "error"]
        assert errors and "injected" in errors[0]["error"]["message"]
        assert stage_tasks() == []
        await c.say("again")
        await c.send("response.create")
        assert (await c.until("response.done"))["response"]["status"] == "completed"
        await c.close()


async def test_pocketsphinx_decodes_outside_the_server_process(talker):
    # pocketsphinx holds the GIL while it decodes: in the server's process it would
    # stall the event loop (VAD, barge-in, pacing) for the length of every decode.
    from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer

    recognizer = PocketsphinxRecognizer(workers=1)
    try:
        pcm = trim(await speech(talker, "the weather is nice and sunny today, please tell me a story"), 24000)
        text = await recognizer.transcribe(pcm, 24000)  # starts the worker
        assert "weather" in text, text
        (worker,) = recognizer.pids()
        ours, theirs = time.process_time(), cpu_seconds(worker)
        assert "weather" in await recognizer.transcribe(pcm, 24000)
        ours, theirs = time.process_time() - ours, cpu_seconds(worker) - theirs
        assert theirs >= 0.1 and ours < 0.25 * theirs, (ours, theirs)
    finally:
        recognizer.close()


async def test_whisper_decodes_without_holding_the_event_loop(recognizer, talker):
    # CTranslate2 releases the GIL while it decodes: the loop keeps turning meanwhile.
    pcm = trim(await speech(talker, "the weather is nice and sunny today, please tell me a story"), 24000)
    pcm = np.concatenate([pcm] * 4)  # ~12 s: a decode long enough to watch
    decode = asyncio.ensure_future(recognizer.transcribe(pcm, 24000))
    turns = 0
    while not decode.done():
        await asyncio.sleep(0)  # one turn of the loop
        turns += 1
    assert "sunny" in await decode
    assert turns >= 200, f"the loop turned {turns} times during the decode"


async def test_a_dead_recognition_worker_fails_one_turn_and_the_next_is_heard(talker, vad_model):
    from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer
    from duplex.pipeline.vocoders.pcm import PcmVocoder

    class Asked(EchoThinker):
        """The echo, counting what it is asked."""

        asked = 0

        def think(self, request):  # type: ignore[no-untyped-def]
            Asked.asked += 1
            return super().think(request)

    recognizer = PocketsphinxRecognizer(workers=1)
    recognizer.prewarm()
    backends = Backends(talker, PcmVocoder(), voice_activity=vad_model, recognizer=recognizer, thinker=Asked())
    try:
        async with serving(backends) as server:
            sim = await SimulatedClient.open(server.port)
            turn = mix(silence(0.5), trim(await speech(talker, "hello how are you today"), 24000), silence(4.0))
            (dead,) = recognizer.pids()
            os.kill(dead, signal.SIGKILL)
            await sim.stream(turn)
            failed = sim.of_type("conversation.item.input_audio_transcription.failed")
            assert len(failed) == 1 and failed[0].event["error"]["code"] == "transcription_failed", sim.events
            done = sim.of_type("response.done")
            assert done and done[-1].event["response"]["status"] == "completed"
            assert done[-1].event["response"]["output"][0]["content"][0]["transcript"] == NOT_UNDERSTOOD
            assert Asked.asked == 0, "a turn heard as nothing is asked again without the thinker"
            await sim.stream(turn)  # a new worker hears the next turn
            heard = sim.of_type("conversation.item.input_audio_transcription.completed")
            assert len(heard) == 1 and "you today" in heard[0].event["transcript"], heard
            await until(lambda: Asked.asked == 1, 30, "the words heard are the thinker's to answer")
            assert recognizer.pids() and dead not in recognizer.pids()
            metrics = server.metrics_text()
            assert "duplex_recognition_failures_total 1.0\n" in metrics
            assert "duplex_recognition_seconds_count 1.0\n" in metrics
            await sim.client.close()
    finally:
        recognizer.close()


# -- observability ----------------------------------------------------------------


async def test_metrics_count_what_happened(server):
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False})
    await c.say("count me")
    await c.send("response.create")
    await c.until("response.done")
    await c.update(pacing={"enabled": True})
    await c.say(LONG)
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    await c.send("response.cancel")
    await c.until("response.done")
    await c.send_raw("{bad json")
    await c.until("error")
    text = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
    )
    for needle in (
        "duplex_sessions 1.0",
        'duplex_replies_total{status="completed"} 1.0',
        'duplex_cancels_total{reason="client_cancelled"} 1.0',
        'duplex_errors_total{code="invalid_json"} 1.0',
        "duplex_bytes_in_total",
        "duplex_bytes_out_total",
        "duplex_queue_high_water_bytes",
        "duplex_stale_events_dropped_total",
        "duplex_first_audio_seconds_count 2.0",
        "duplex_tasks",
        "duplex_loop_share_sessions 1.0",
    ):
        assert needle in text, needle
    await c.close()


def test_every_metric_is_declared_once_and_scraped_as_prometheus_reads_it():
    from prometheus_client.parser import text_string_to_metric_families

    from duplex.app.edge.metrics import METRICS, Metrics

    m = Metrics()
    m.inc("duplex_refusals_total", kind="memory")
    m.inc("duplex_refusals_total", 2, kind="memory")
    m.high_water("duplex_queue_high_water_bytes", 300)
    m.high_water("duplex_queue_high_water_bytes", 200)  # lower: the mark stays
    m.count_to("duplex_turn_transcripts_total", 4, model="base.en")
    m.count_to("duplex_turn_transcripts_total", 6, model="base.en")
    m.observe("duplex_first_audio_seconds", 0.3)
    families = {f.name: f for f in text_string_to_metric_families(m.render())}
    # prometheus' parser names a counter's family without its _total
    assert {f.name + ("_total" if f.type == "counter" else "") for f in families.values()} == set(METRICS)
    assert all(families[n.removesuffix("_total")].documentation == spec.help for n, spec in METRICS.items())
    assert m.value("duplex_refusals_total", kind="memory") == 3
    assert m.value("duplex_queue_high_water_bytes") == 300
    assert m.value("duplex_turn_transcripts_total", model="base.en") == 6
    (first,) = [s for s in families["duplex_first_audio_seconds"].samples if s.name.endswith("_count")]
    assert first.value == 1
    with pytest.raises(KeyError):
        m.inc("duplex_not_declared_total")


def test_json_logs_carry_session_ids(capsys):
    from duplex.app.edge import logs

    logs.setup("INFO", "json")
    logging.getLogger("duplex.server").info("session opened", extra={"session": "sess_abc"})
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "session opened" and line["session"] == "sess_abc" and line["level"] == "INFO"
    logging.getLogger().handlers.clear()
