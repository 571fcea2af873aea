"""The holes found by attacking the surfaces added after the first reliability review
(function tools, semantic_vad with prepared replies, partial transcripts, session
changes mid-speech), each reproduced and held shut: every test here failed before
its fix. The numbers in the section titles are the review's findings."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import replace

import numpy as np
import pytest
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.core.actions import PredictTurn, StartReply, Transcribe
from duplex.app.core.events import BufferCommitted, SpeechStarted, SpeechStopped
from duplex.app.core.listening.semantic import EAGERNESS
from duplex.app.core.session import Session
from duplex.app.core.tool_settings import MAX_DESCRIPTION_CHARS, MAX_SCHEMA_DEPTH, MAX_TOOLS
from duplex.app.edge.transport import PING_BURST
from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.tools import echo_call
from tests.test_hearing import SEMANTIC, hear, session
from tests.test_listening import WINDOW
from tests.test_session import ev, wire
from tests.test_tools import WEATHER
from tests.util import text_item


# -- 1: an id the server has promised is the server's ---------------------------------
def test_a_client_item_cannot_take_the_id_of_a_reply_message_still_to_be_announced():
    s = Session("sess_test", 0.0)
    s.feed(ev("session.update", session={"tools": [WEATHER]}), 0.0)
    start = next(o for o in s.feed(ev("response.create"), 0.0) if isinstance(o, StartReply))
    assert s.replies.active is not None
    promised = s.replies.active.item.id  # a reply that may call a function announces its message later
    out = wire(s.feed(ev("conversation.item.create", item=text_item("mine", id=promised)), 0.1))
    assert [o["type"] for o in out] == ["error"] and out[0]["error"]["code"] == "duplicate_item_id"
    words = OutputChunk(AudioBuffer.pcm(np.zeros(2400, np.int16), 24000, "engine"), 0, text="Hello.")
    out = wire(s.on_output(ChunkEvent(start.response_id, 2, 0, start.epoch, "talker", words), 0.2).events)
    added = [o for o in out if o["type"] == "conversation.item.added"]
    assert [o["item"]["id"] for o in added] == [promised], "the reply's message came with the id it was given"
    done = wire(s.on_reply_finished(start.response_id, 0.3))
    assert done[-1]["type"] == "response.done" and done[-1]["response"]["status"] == "completed"
    # Once the reply is over, its id is an item like any other; a reply of calls alone frees its id.
    assert s.conversation.taken(promised) and promised in s.conversation


async def test_a_guessed_reply_item_id_gets_an_error_and_the_reply_completes(make_server):
    server = await make_server()
    c = await RealtimeClient.connect(server.port)
    sid = c.events[0]["session"]["id"]
    await c.send("session.update", session={"tools": [WEATHER]})
    await c.until("session.updated")
    await c.send("conversation.item.create", item=text_item("Tell me a story."))
    added = await c.until("conversation.item.added")
    # The server's ids are a counter: the reply's message is the next one.
    n = int(added["item"]["id"][-5:])
    await c.send("response.create")
    await c.until("response.created")
    await c.send("conversation.item.create", item=text_item("mine", id=f"item_{sid[-8:]}{n + 1:05d}"))
    error = await c.until("error")
    assert error["error"]["code"] == "duplicate_item_id"
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed", "the session lives on and the reply ends"
    await c.send("conversation.item.create", item=text_item("still here"))
    assert (await c.until("conversation.item.added"))["item"]["content"][0]["text"] == "still here"
    await c.close()


# -- 2: a session change mid-speech keeps the speech ----------------------------------
def _types(out: list[object]) -> list[str]:
    return [type(o).__name__ for o in out]


def test_turning_server_vad_off_mid_speech_keeps_the_speech_for_the_manual_commit():
    s = session(replace(SEMANTIC, type="server_vad"))
    out = hear(s, 30)  # 0.96 s of speech, still going
    [started] = [e for e in out if isinstance(e, SpeechStarted)]
    out = s.feed(ev("session.update", session={"turn_detection": None}), 1.0)
    [stopped] = [e for e in out if isinstance(e, SpeechStopped)]
    assert stopped.item_id == started.item_id, "the speech that started has its end"
    out = s.feed(ev("input_audio_buffer.commit"), 1.1)
    assert [e for e in out if isinstance(e, BufferCommitted)], "the speech heard so far is committed"
    [job] = [a for a in out if isinstance(a, Transcribe)]
    assert job.audio.size >= 29 * WINDOW, "all of it"


def test_switching_detector_mid_speech_lets_the_new_one_end_that_speech():
    s = session(replace(SEMANTIC, type="server_vad", silence_duration_ms=300))
    out = hear(s, 30)
    [started] = [e for e in out if isinstance(e, SpeechStarted)]
    s.feed(ev("session.update", session={"turn_detection": {"type": "semantic_vad"}}), 1.0)
    out = hear(s, 10 + 60)  # the rest of the speech, then silence past semantic_vad's longest wait
    assert not [e for e in out if isinstance(e, SpeechStarted)], "one speech, not two"
    [stopped] = [e for e in out if isinstance(e, SpeechStopped)]
    assert stopped.item_id == started.item_id
    [committed] = [e for e in out if isinstance(e, BufferCommitted)]
    assert committed.item_id == started.item_id
    assert s.intake.listener is not None and s.intake.listener.td.type == "semantic_vad"


# -- 3: a clear clears the speech in progress too ----------------------------------------
def test_a_clear_while_the_turn_is_undecided_ends_it_as_no_turn():
    s = session()
    out = hear(s, 40 + 12)  # speech, then a pause the semantic detector is still deciding
    [started] = [e for e in out if isinstance(e, SpeechStarted)]
    assert not [e for e in out if isinstance(e, BufferCommitted)]
    out = s.feed(ev("input_audio_buffer.clear"), 2.0)
    assert _types(out)[:2] == ["SpeechStopped", "BufferCleared"]
    assert out[0].item_id == started.item_id  # type: ignore[attr-defined]
    out = hear(s, 200)  # only silence follows
    assert not [e for e in out if isinstance(e, (BufferCommitted, SpeechStopped, StartReply))], _types(out)


# -- 4 and 11: no user-controlled scan that grows faster than its input ----------------
def test_the_echo_thinkers_argument_search_is_linear_and_deep_json_is_only_words():
    tools = (WEATHER,)
    for said in ("get_weather " + "{" * 128 * 1024, "get_weather " + "[" * 5000 + "]" * 5000, "get_weather {" * 20000):
        started = time.perf_counter()
        call = echo_call(tools, "auto", "resp_x", said)
        # Quadratic before: 32 KiB of "{" took seconds; 128 KiB would take about a minute.
        assert time.perf_counter() - started < 2.0
        assert call is not None and call.name == "get_weather"
    deep = '{"city": ' + '{"a": ' * 5000 + "1" + "}" * 5001
    call = echo_call(tools, "auto", "resp_x", "get_weather " + deep)
    assert call is not None, "the reply goes on"
    assert json.loads(call.arguments) == {"city": deep}, "too deep to be arguments: it is words, the city's"


# -- 5 and 11: tools and transcription settings are bounded and checked up front ----------
def _update(s: Session, **session: object) -> list[dict]:
    return wire(s.feed(ev("session.update", session=session), 0.0))


def _tool(name: str, **extra: object) -> dict[str, object]:
    return {"type": "function", "name": name, **extra}


def test_tools_are_bounded_in_count_bytes_and_depth_and_their_schemas_are_checked():
    s = Session("sess_test", 0.0)
    cases = {
        "session.tools": [_tool(f"t{i}") for i in range(MAX_TOOLS + 1)],
        "session.tools[0].parameters.properties": [_tool("a", parameters={"type": "object", "properties": ["city"]})],
        "session.tools[0].parameters.properties.x.properties": [
            _tool("a", parameters={"type": "object", "properties": {"x": {"properties": "oops"}}})
        ],
        "session.tools[0].parameters.required": [_tool("a", parameters={"type": "object", "required": "city"})],
        "session.tools[0].name": [_tool("get_weather\n")],
        "session.tools[0].description": [_tool("a", description="x" * (MAX_DESCRIPTION_CHARS + 1))],
    }
    deep: dict[str, object] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"x": deep}}
    cases["session.tools[0].parameters"] = [_tool("a", parameters=deep)]
    big = [_tool(f"t{i}", description="d" * 4000) for i in range(20)]
    cases["session.tools"] = big  # 20 x 4 KB: over the bytes bound, under the count bound
    for param, offered in cases.items():
        out = _update(s, tools=offered)
        assert [o["type"] for o in out] == ["error"], param
        assert out[0]["error"]["code"] == "invalid_value" and out[0]["error"]["param"] == param, out[0]
    assert s.settings.tools == (), "a refused update changes nothing"
    many = _update(s, tools=[_tool(f"t{i}") for i in range(MAX_TOOLS + 1)])
    assert many[0]["error"]["param"] == "session.tools" and str(MAX_TOOLS) in many[0]["error"]["message"]
    ok = _update(s, tools=[_tool(f"t{i}") for i in range(MAX_TOOLS)])
    assert ok[0]["type"] == "session.updated" and len(s.settings.tools) == MAX_TOOLS


def test_transcription_settings_keep_only_what_is_used_and_are_bounded():
    s = Session("sess_test", 0.0)
    junk = {"model": "whisper-1", "language": "en", "prompt": "Names: Oslo.", "x": ["y"] * 10_000}
    out = _update(s, audio={"input": {"transcription": junk}})
    assert out[0]["type"] == "session.updated"
    assert s.settings.transcription == {"model": "whisper-1", "language": "en", "prompt": "Names: Oslo."}
    out = _update(s, audio={"input": {"transcription": {"prompt": "p" * 5000}}})
    assert out[0]["error"]["param"] == "session.audio.input.transcription.prompt"
    out = _update(s, input_audio_transcription={"model": ["not", "a", "string"]})
    assert out[0]["error"]["param"] == "session.input_audio_transcription.model"


# -- 6: only the latest pause's questions are worth asking --------------------------------
def test_a_queued_question_about_a_pause_the_user_spoke_past_is_moot():
    probs = [0.9] * 40 + [0.0] * 10 + [0.9] * 20 + [0.0] * 400
    s = session(probs=probs)
    out = hear(s, 40 + 10)
    [candidate] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    asks = [a for a in out if isinstance(a, PredictTurn)]
    assert len(asks) == len(EAGERNESS["medium"].asks) and all(
        s.turn_taking.still_wanted(a) for a in (candidate, *asks)
    ), "the pause is being decided"
    hear(s, 5)  # the user goes on
    assert not any(s.turn_taking.still_wanted(a) for a in (candidate, *asks)), "moot: that pause is over"
    out = hear(s, 15 + 12)  # the next pause
    [candidate2] = [a for a in out if isinstance(a, Transcribe) and a.kind == "candidate"]
    asks2 = [a for a in out if isinstance(a, PredictTurn)]
    assert asks2 and all(s.turn_taking.still_wanted(a) for a in (candidate2, *asks2))


# -- 8: pings are answered outside any session's share: a flood of them is refused ------
async def test_a_client_flooding_pings_is_closed_and_one_that_pings_in_bursts_is_not(make_server):
    server = await make_server()
    calm = await RealtimeClient.connect(server.port)
    for _ in range(int(PING_BURST) - 5):  # a latency probe: a burst under the bound
        await calm.ws.ping()
    for _ in range(3):  # and a keepalive now and then
        await (await calm.ws.ping())
        await calm.say("still here")
    flood = await RealtimeClient.connect(server.port)
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with asyncio.timeout(15):
            while True:
                pong = await flood.ws.ping()  # read every pong: the unsent bound never fires
                await pong
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert closed.value.rcvd.reason == "ping flood"
    assert 'duplex_refusals_total{kind="ping_flood"} 1.0' in server.metrics_text()
    assert (await calm.say("and still")) and server.connections, "the calm client stays"
    await calm.close()


# -- 11: the input format is fixed by the first audio, however little of it --------------
@pytest.mark.parametrize(
    ("law", "update", "param"),
    [
        (
            {"audio": {"input": {"format": {"type": "audio/pcmu"}}}},
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
            "session.audio.input.format",
        ),
        ({"input_audio_format": "g711_ulaw"}, {"input_audio_format": "pcm16"}, "session.input_audio_format"),
    ],
)
def test_the_input_format_cannot_change_after_a_few_bytes_of_g711(law, update, param):
    s = Session("sess_test", 0.0)
    assert _update(s, **law)[0]["type"] == "session.updated"
    message = ev("input_audio_buffer.append", audio=base64.b64encode(bytes(160)).decode())  # 20 ms at 8 kHz
    raw = s.audio_of(message)
    s.accept_audio(raw, 0.0)
    s.hear(raw, 0.0)
    out = _update(s, **update)
    assert [o["type"] for o in out] == ["error"] and out[0]["error"]["param"] == param, out
