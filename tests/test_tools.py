"""Function tools end to end: the session's events for a call (sans-I/O), the offline
thinker calling a tool a real client offers over a real WebSocket, the result going
back and the next reply speaking it. The language-model thinkers are tested with a
real vLLM engine in tests/test_vllm.py and tests/test_vllm_remote.py."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.core.actions import StartReply
from duplex.app.core.session import Session
from duplex.app.core.wire import BETA, Wire
from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.tools import ToolCallDelta, echo_call
from tests.test_session import ev, wire

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _call_chunk(rid: str, epoch: int, seq: int, delta: ToolCallDelta) -> ChunkEvent:
    empty = AudioBuffer.pcm(np.zeros(0, np.int16), 24000, "engine")
    return ChunkEvent(rid, 2, seq, epoch, "tool", OutputChunk(empty, 0, call=delta))


def _types(out: list[Any]) -> list[str]:
    return [o["type"] for o in out if isinstance(o, dict)]


def test_session_update_keeps_function_tools_and_says_what_it_cannot_run():
    s = Session("sess_test", 0.0)
    hosted = {"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"}
    out = wire(s.feed(ev("session.update", session={"tools": [WEATHER, hosted], "tool_choice": "required"}), 0.0))
    assert _types(out) == ["session.updated", "error"]
    assert out[0]["session"]["tools"] == [WEATHER] and out[0]["session"]["tool_choice"] == "required"
    assert out[1]["error"]["code"] == "unsupported_tool_type"
    bad = wire(s.feed(ev("session.update", session={"tool_choice": {"type": "function", "name": "nope"}}), 0.0))
    assert bad[0]["error"]["param"] == "session.tool_choice.name"
    assert s.settings.tool_choice == "required", "a refused update changes nothing"
    beta = Wire("sess_test", BETA).to_dict(wire_event := s.start()[0])
    assert beta["session"]["tools"] == [WEATHER], wire_event


def test_a_reply_that_only_calls_a_function_has_no_message_item():
    s = Session("sess_test", 0.0)
    s.feed(ev("session.update", session={"tools": [WEATHER]}), 0.0)
    out = s.feed(ev("response.create"), 0.0)
    start = next(o for o in out if isinstance(o, StartReply))
    assert start.think.tools == (WEATHER,) and start.think.tool_choice == "auto"
    assert _types(wire(out)) == ["response.created"], "the message waits for something to say"
    rid, epoch = start.response_id, start.epoch
    call = ToolCallDelta(0, "call_1", "get_weather")
    out = wire(s.on_output(_call_chunk(rid, epoch, 0, call), 0.1).events)
    out += wire(
        s.on_output(_call_chunk(rid, epoch, 1, ToolCallDelta(0, "call_1", "get_weather", '{"city": ')), 0.1).events
    )
    out += wire(
        s.on_output(_call_chunk(rid, epoch, 2, ToolCallDelta(0, "call_1", "get_weather", '"Oslo"}')), 0.1).events
    )
    out += wire(s.on_reply_finished(rid, 0.2))
    assert _types(out) == [
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    done = out[4]
    assert (done["name"], done["call_id"], done["arguments"], done["output_index"]) == (
        "get_weather",
        "call_1",
        '{"city": "Oslo"}',
        0,
    )
    response = out[-1]["response"]
    assert response["status"] == "completed"
    assert [i["type"] for i in response["output"]] == ["function_call"]
    assert response["output"][0]["arguments"] == '{"city": "Oslo"}'
    # The client runs the tool and answers; the next reply sees the call and its result.
    result = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 degrees."}
    added = wire(s.feed(ev("conversation.item.create", item=result), 0.3))
    assert added[0]["item"]["type"] == "function_call_output" and added[0]["item"]["output"] == result["output"]
    start = next(o for o in s.feed(ev("response.create"), 0.4) if isinstance(o, StartReply))
    assert start.think.messages[-2:] == (
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 degrees."},
    )


def test_words_then_a_call_make_two_output_items_in_order():
    s = Session("sess_test", 0.0)
    s.feed(ev("session.update", session={"tools": [WEATHER], "output_modalities": ["text"]}), 0.0)
    start = next(o for o in s.feed(ev("response.create"), 0.0) if isinstance(o, StartReply))
    rid, epoch = start.response_id, start.epoch
    empty = AudioBuffer.pcm(np.zeros(0, np.int16), 24000, "engine")
    said = ChunkEvent(rid, 2, 0, epoch, "text", OutputChunk(empty, 0, text="Let me look. "))
    out = wire(s.on_output(said, 0.1).events)
    out += wire(s.on_output(_call_chunk(rid, epoch, 1, ToolCallDelta(0, "call_2", "get_weather", "{}")), 0.1).events)
    out += wire(s.on_reply_finished(rid, 0.2))
    added = [o for o in out if o["type"] == "response.output_item.added"]
    assert [(a["output_index"], a["item"]["type"]) for a in added] == [(0, "message"), (1, "function_call")]
    assert [i["type"] for i in out[-1]["response"]["output"]] == ["message", "function_call"]
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "Let me look. "


def test_a_thinker_without_tools_refuses_them_per_response():
    s = Session("sess_test", 0.0, tools=False)
    out = wire(s.feed(ev("response.create", response={"tools": [WEATHER]}), 0.0))
    assert out[0]["type"] == "error" and out[0]["error"]["code"] == "tools_unsupported"
    assert s.replies.active is None


@pytest.mark.parametrize(
    ("said", "choice", "expected"),
    [
        ("What is get_weather for Paris?", "auto", ("get_weather", {"city": "Paris"})),
        ("get weather in Paris", "auto", ("get_weather", {"city": "Paris"})),
        ('call get_weather {"city": "Oslo"}', "auto", ("get_weather", {"city": "Oslo"})),
        ("hello there", "auto", None),
        ("hello there", "required", ("get_weather", {})),
        ("hello there", {"type": "function", "name": "get_weather"}, ("get_weather", {})),
        ("get weather in Paris", "none", None),
    ],
)
def test_the_offline_thinker_calls_the_tool_the_user_names(said, choice, expected):
    call = echo_call((WEATHER,), choice, "resp_x", said)
    assert (call and (call.name, json.loads(call.arguments))) == expected


async def test_a_tool_round_trip_over_the_wire(server):
    c = await RealtimeClient.connect(server.port)
    await c.update(tools=[WEATHER], output_modalities=["audio"], pacing={"enabled": False})
    await c.say("What is the weather? get weather in Lisbon")
    await c.send("response.create")
    done = (await c.until("response.done"))["response"]
    assert [i["type"] for i in done["output"]] == ["function_call"], done
    call = done["output"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Lisbon"}
    deltas = [e["delta"] for e in c.events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == call["arguments"]
    await c.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": call["call_id"], "output": "Rain all day in Lisbon."},
    )
    await c.until("conversation.item.added")
    await c.send("response.create")
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == "Rain all day in Lisbon."
    await c.close()


def test_speech_while_a_reply_that_may_call_is_still_thinking_cancels_it():
    s = Session("sess_test", 0.0)
    s.feed(ev("session.update", session={"tools": [WEATHER]}), 0.0)
    start = next(o for o in s.feed(ev("response.create"), 0.0) if isinstance(o, StartReply))
    assert s.replies.being_heard(0.1) is not None, "a running reply can be talked over before it speaks"
    assert s.replies.pause(0, 100, 0.1) == [], "nothing to duck yet"
    out = wire(s.replies.interrupt(0, 0.2))
    done = [o for o in out if isinstance(o, dict) and o["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "cancelled"
    assert done[0]["response"]["id"] == start.response_id
    assert not [o for o in out if isinstance(o, dict) and o["type"] == "conversation.item.truncated"]
    assert s.replies.active is None, "the user's turn can be answered"
