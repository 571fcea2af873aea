"""The Realtime server over real WebSockets: replies, cancel, truncate, bad input, HTTP."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import numpy as np

from duplex.app.clients.realtime import RealtimeClient, audio_of, pcm_b64
from duplex.app.edge.server import DuplexServer
from duplex.pipeline.stages import ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.vocoders.pcm import PcmVocoder
from tests.util import stage_tasks, until

LONG = " ".join(f"This is sentence number {i} of a long reply." for i in range(12))
DELTA = "response.output_audio.delta"


async def _fresh_audio(talker, text: str) -> np.ndarray:
    parts: list[np.ndarray] = []

    async def sink(ev: ChunkEvent) -> None:
        parts.append(np.asarray(ev.payload.audio.data))

    await ReplyStages(talker, PcmVocoder(), SpeechRequest("x", text), epoch=0, output_rate=24000).run(sink)
    return np.concatenate(parts)


async def test_reply_deltas_carry_response_id_epoch_and_transcript(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False})
    await c.say("Watermarks and epochs.")
    await c.send("response.create")
    created = await c.until("response.created")
    rid = created["response"]["id"]
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed"
    deltas = [e for e in c.events if e["type"] == DELTA]
    assert deltas and all(d["response_id"] == rid and d["epoch"] == 1 for d in deltas)
    assert [d["seq"] for d in deltas] == list(range(len(deltas)))
    assert all("input_watermark" in d and "item_id" in d for d in deltas)
    said = "".join(e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta")
    assert said == "Watermarks and epochs."
    order = [e["type"] for e in c.events]
    assert order[-6:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    assert order.index("response.created") < order.index("response.output_item.added") < order.index(DELTA)
    await c.close()


async def test_cancel_is_clean_and_next_reply_has_no_tail(server: DuplexServer, talker):
    c = await RealtimeClient.connect(server.port)
    await c.say(LONG)
    await c.send("response.create")
    old = (await c.until("response.created"))["response"]["id"]
    await c.until(DELTA)
    await c.send("response.cancel")
    done = await c.until("response.done")
    assert done["response"]["id"] == old
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    at_done = len(c.events)
    await c.update(pacing={"enabled": False})
    await c.say("A short new reply.")
    await c.send("response.create")
    new = (await c.until("response.created"))["response"]["id"]
    assert (await c.until("response.done"))["response"]["status"] == "completed"
    after = c.events[at_done:]
    assert not [e for e in after if e.get("response_id") == old], "audio of the cancelled reply after its response.done"
    new_deltas = [e for e in after if e["type"] == DELTA]
    assert all(e["response_id"] == new and e["epoch"] == 2 for e in new_deltas)
    got = audio_of(after, new)
    expected = await _fresh_audio(talker, "A short new reply.")
    # eSpeak NG is not sample-deterministic run to run (a few samples of jitter),
    # but one leaked chunk of the old reply would add at least ~900 samples.
    assert abs(got.size - expected.size) < 200, "the new reply must be its own audio, no tail of the old one"
    said = "".join(e["delta"] for e in after if e["type"] == "response.output_audio_transcript.delta")
    assert said == "A short new reply."
    await c.close()


async def test_bad_input_gets_named_errors_and_loses_nothing(make_server):
    server = await make_server(max_message_bytes=64 * 1024)
    c = await RealtimeClient.connect(server.port)
    kept = await c.say("keep me")

    async def expect(code: str, send, param: str | None = None, event_id: str | None = None) -> dict:
        await send
        err = await asyncio.wait_for(c.until("error"), 5)
        assert err["error"]["code"] == code, err
        assert err["error"]["message"]
        if param is not None:
            assert err["error"]["param"] == param
        if event_id is not None:
            assert err["error"]["event_id"] == event_id
        return err

    await expect("invalid_json", c.send_raw("{not json"))
    await expect("invalid_event", c.send_raw("[1, 2]"))
    await expect("missing_type", c.send_raw('{"event_id": "e0"}'), event_id="e0")
    await expect("unknown_event", c.send("response.explode", event_id="e1"), event_id="e1")
    await expect(
        "invalid_type",
        c.send("conversation.item.truncate", item_id=5, content_index=0, audio_end_ms=0, event_id="e2"),
        param="item_id",
        event_id="e2",
    )
    await expect("invalid_type", c.send("response.create", response="now"), param="response")
    await expect(
        "invalid_type",
        c.send("conversation.item.truncate", item_id=kept, content_index=True, audio_end_ms=0),
        param="content_index",
    )
    await expect("missing_field", c.send("input_audio_buffer.append"), param="audio")
    await expect("invalid_audio", c.send("input_audio_buffer.append", audio="!!not base64!!"), param="audio")
    await expect("invalid_audio", c.send("input_audio_buffer.append", audio="AAAA"), param="audio")  # 3 bytes
    await expect(
        "invalid_value",
        c.send("session.update", session={"audio": {"output": {"format": {"type": "audio/opus"}}}}),
        param="session.audio.output.format",
    )
    await expect(
        "unsupported_rate",
        c.send("session.update", session={"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}}),
    )
    await expect("invalid_value", c.send("session.update", session={"voice": "no-such-voice"}), param="session.voice")
    await expect(
        "invalid_type", c.send("session.update", session={"pacing": {"enabled": "yes"}}), param="session.pacing.enabled"
    )
    await expect(
        "invalid_audio",
        c.send(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "AAAA"}]},
        ),
    )
    await expect(
        "invalid_value", c.send("conversation.item.create", item={"type": "message", "role": "robot", "content": []})
    )
    await expect("item_not_found", c.send("conversation.item.retrieve", item_id="nope"))
    await expect("response_cancel_not_active", c.send("response.cancel"))
    await expect("binary_not_enabled", c.send_raw(b"\x00\x01"))
    # A failed session.update changed nothing: the default voice still works.
    # Everything accepted before is still there, and the session still answers.
    await c.send("conversation.item.retrieve", item_id=kept)
    assert (await c.until("conversation.item.retrieved"))["item"]["content"][0]["text"] == "keep me"
    await c.update(pacing={"enabled": False})
    await c.send("response.create")
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed"
    assert done["response"]["output"][0]["content"][0]["transcript"] == "keep me"
    assert audio_of(c.events).size > 0
    await c.close()


async def test_second_response_while_one_runs_is_refused(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.say(LONG)
    await c.send("response.create")
    await c.until("response.created")
    await c.send("response.create")
    err = await c.until("error")
    assert err["error"]["code"] == "conversation_already_has_active_response"
    await c.send("response.cancel")
    assert (await c.until("response.done"))["response"]["status"] == "cancelled"
    await c.close()


async def test_truncate_cuts_audio_and_transcript_at_the_heard_word(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False})
    text = "One two three four five six seven eight nine ten."
    await c.say(text)
    await c.send("response.create")
    done = await c.until("response.done")
    item = done["response"]["output"][0]
    total_ms = audio_of(c.events).size * 1000 // 24000
    await c.send("conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=total_ms + 500)
    err = await c.until("error")
    assert err["error"]["param"] == "audio_end_ms" and "past the end" in err["error"]["message"]
    await c.send("conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=total_ms // 2)
    truncated = await c.until("conversation.item.truncated")
    assert truncated["item_id"] == item["id"] and truncated["audio_end_ms"] == total_ms // 2
    await c.send("conversation.item.retrieve", item_id=item["id"])
    kept = (await c.until("conversation.item.retrieved"))["item"]["content"][0]["transcript"]
    assert text.startswith(kept) and 0 < len(kept) < len(text)
    assert kept.split()[-1] in text.split(), "cut at a word boundary"
    await c.close()


async def test_truncating_the_live_reply_cancels_it(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.say(LONG)
    await c.send("response.create")
    item = (await c.until("response.output_item.added"))["item"]["id"]
    await c.until(DELTA)
    await c.send("conversation.item.truncate", item_id=item, content_index=0, audio_end_ms=0)
    done = await c.until("response.done")
    assert done["response"]["status"] == "cancelled"
    truncated = await c.until("conversation.item.truncated")
    assert truncated["audio_end_ms"] == 0
    assert not [e for e in c.events[c.events.index(done) :] if e["type"] == DELTA]
    await c.close()


async def test_text_only_reply(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.say("just text")
    await c.send("response.create", response={"output_modalities": ["text"]})
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed"
    assert [e["delta"] for e in c.events if e["type"] == "response.output_text.delta"] == ["just text"]
    assert not [e for e in c.events if e["type"] == DELTA]
    await c.close()


async def test_output_is_paced_on_the_input_clock(make_server):
    """Audio goes out no further than the lead ahead of the client's (input-clock) playback."""
    server = await make_server(input_idle_s=30.0)  # only input moves time in this test
    c = await RealtimeClient.connect(server.port)
    lead_s, frame = 0.25, np.zeros(2400, np.int16)  # 100 ms of silence per append
    await c.update(pacing={"enabled": True, "lead_ms": 250}, turn_detection=None)
    await c.say(LONG)
    await c.send("input_audio_buffer.append", audio=pcm_b64(frame))
    await c.send("response.create")
    state = {"input": 0.0, "received": 0.0}
    progress = asyncio.Event()
    done: dict = {}

    async def read() -> None:  # reads everything, always: a flood could not hide
        while True:
            ev = await c.recv()
            if ev["type"] == DELTA:
                state["received"] += len(ev["delta"]) * 3 // 4 / 2 / 24000
                assert state["received"] <= state["input"] + lead_s + 0.1, "audio ran ahead of playback"
            elif ev["type"] == "response.done":
                done.update(ev)
                progress.set()
                return
            progress.set()

    async def feed() -> None:  # more input only once the server released what it allowed
        while not done:
            while not done and state["received"] < state["input"] + lead_s - 0.1:
                progress.clear()
                await progress.wait()
            if not done:
                state["input"] += 0.1  # counted before sending: an upper bound on what the server saw
                await c.send("input_audio_buffer.append", audio=pcm_b64(frame))

    await asyncio.gather(read(), feed())
    assert done["response"]["status"] == "completed"
    # response.done came when the reply had nearly been heard, on the input clock.
    assert state["input"] >= state["received"] - lead_s - 0.1
    assert state["received"] > 20
    await c.close()


async def test_pacing_off_sends_as_fast_as_made(make_server):
    server = await make_server(input_idle_s=30.0)
    c = await RealtimeClient.connect(server.port)
    await c.update(pacing={"enabled": False}, turn_detection=None)
    await c.send("input_audio_buffer.append", audio=pcm_b64(np.zeros(2400, np.int16)))
    await c.say(LONG)
    await c.send("response.create")
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed"
    assert audio_of(c.events).size / 24000 > 20  # 20 s of audio for 0.1 s of input
    await c.close()


async def test_wall_clock_pacing_when_no_input_streams(server: DuplexServer):
    c = await RealtimeClient.connect(server.port)
    await c.say("A reply of about two seconds, paced.")
    await c.send("response.create")
    await c.until(DELTA)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await c.until("response.done")
    elapsed = loop.time() - t0
    heard = audio_of(c.events).size / 24000
    assert elapsed >= heard - 0.25 - 0.1, f"done after {elapsed:.2f}s for {heard:.2f}s of audio"
    await c.close()


async def test_disconnect_mid_reply_frees_everything(server: DuplexServer, espeak_runtime):
    c = await RealtimeClient.connect(server.port)
    await c.say(LONG)
    await c.send("response.create")
    await c.until(DELTA)
    c.ws.transport.abort()  # no close frame: the network just went away
    await until(lambda: not server.connections, what="session freed")
    assert stage_tasks() == []
    assert await asyncio.to_thread(espeak_runtime.wait_idle, 10)
    assert server.metrics.value("duplex_cancels_total", reason="client_disconnected") == 1
    c2 = await RealtimeClient.connect(server.port)  # and the server keeps serving
    await c2.close()


async def test_http_routes(server: DuplexServer):
    base = f"http://127.0.0.1:{server.port}"

    def get(path: str) -> tuple[int, bytes, str]:
        try:
            with urllib.request.urlopen(base + path) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")

    status, body, ctype = await asyncio.to_thread(get, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok" and "json" in ctype
    status, body, ctype = await asyncio.to_thread(get, "/")
    assert status == 200 and b"Duplex" in body and ctype.startswith("text/html")
    assert (await asyncio.to_thread(get, "/nope.js"))[0] == 404
    assert (await asyncio.to_thread(get, "/../pyproject.toml"))[0] == 404
    assert (await asyncio.to_thread(get, "/v1/realtime"))[0] == 426
