"""The wire: every kind of server event renders, in GA and beta shapes, from one module."""

from __future__ import annotations

import base64
import json
from typing import Any

from duplex.app.core import events as ev
from duplex.app.core.protocol import ProtocolError
from duplex.app.core.settings import SessionSettings
from duplex.app.core.wire import BETA, BETA_NAMES, GA, Wire

REF = ev.ContentRef("resp_1", "item_2")
AUDIO_ITEM = ev.ItemView("item_2", "message", "completed", "assistant", (ev.PartView("output_audio", "Hi."),))
USER_ITEM = ev.ItemView("item_1", "message", "completed", "user", (ev.PartView("input_text", "Hello"),))
CALL_ITEM = ev.ItemView("item_3", "function_call", "completed", "", (), "call_1", "get_weather", '{"city": "Oslo"}')
RESULT_ITEM = ev.ItemView("item_4", "function_call_output", "completed", "", (), "call_1", output="Sunny.")
TOOLS = ({"type": "function", "name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}},)
RESPONSE = ev.ResponseView(
    "resp_1", "completed", None, (AUDIO_ITEM,), "sess_1", ("audio",), 24000, "alloy", {"first_audio": 3.0}
)

SAMPLES: list[ev.ServerEvent] = [
    ev.SessionCreated("sess_1", SessionSettings()),
    ev.SessionUpdated(
        "sess_1",
        SessionSettings(
            instructions="Be brief.",
            tools=TOOLS,
            tool_choice="required",
            truncation={"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 900}},
        ),
    ),
    ev.SessionSynced("sim3", 4800, 200),
    ev.Error(ProtocolError("invalid_value", "bad", param="session.voice", event_id="c1")),
    ev.ItemAdded(None, USER_ITEM),
    ev.ItemDone(None, USER_ITEM),
    ev.ItemRetrieved(USER_ITEM),
    ev.ItemDeleted("item_1"),
    ev.ItemTruncated("item_2", 0, 120),
    ev.TranscriptionCompleted("item_1", 0, "hello", 12.345),
    ev.TranscriptionDelta("item_1", 0, " hello there"),
    ev.TranscriptionFailed("item_1", 0, "worker died"),
    ev.BufferCommitted(None, "item_1"),
    ev.BufferCleared(),
    ev.BufferTimeoutTriggered(1200, 6200, "item_5"),
    ev.SpeechStarted(100, "item_1"),
    ev.SpeechStopped(900, "item_1"),
    ev.ResponseCreated(
        ev.ResponseView("resp_1", "in_progress", None, (AUDIO_ITEM,), "sess_1", ("audio",), 24000, "alloy")
    ),
    ev.ResponseDone(RESPONSE),
    ev.OutputItemAdded("resp_1", 0, AUDIO_ITEM),
    ev.OutputItemDone("resp_1", 0, AUDIO_ITEM),
    ev.ContentPartAdded(REF, ev.PartView("output_audio", "")),
    ev.ContentPartDone(REF, ev.PartView("output_audio", "Hi.")),
    ev.AudioDelta(REF, 1, 0, 4800, 0, b"\x01\x00\x02\x00"),
    ev.AudioDone(REF),
    ev.AudioTranscriptDelta(REF, "Hi."),
    ev.AudioTranscriptDone(REF, "Hi."),
    ev.TextDelta(REF, "Hi."),
    ev.TextDone(REF, "Hi."),
    ev.FunctionCallArgumentsDelta("resp_1", "item_3", 1, "call_1", '{"city": '),
    ev.FunctionCallArgumentsDone("resp_1", "item_3", 1, "call_1", "get_weather", '{"city": "Oslo"}'),
    ev.ItemAdded("item_3", RESULT_ITEM),
    ev.OutputItemDone("resp_1", 1, CALL_ITEM),
    ev.ResponseDone(
        ev.ResponseView("resp_1", "completed", None, (AUDIO_ITEM, CALL_ITEM), "sess_1", ("audio",), 24000, "alloy")
    ),
    ev.AudioPaused(REF, 1, 80, 96),
    ev.AudioDucked(REF, 1, 80, 96, -24.0),
    ev.AudioResumed(REF, 1),
]


def test_every_kind_of_event_has_a_sample_here():
    assert {type(e) for e in SAMPLES} == set(ev.SERVER_EVENTS)


def test_every_event_renders_as_json_with_a_unique_event_id_in_both_dialects():
    for dialect in (GA, BETA):
        wire = Wire("sess_abcdef", dialect)
        ids = set()
        for event in SAMPLES:
            for frame in wire.render(event):
                body = json.loads(frame)
                name = BETA_NAMES.get(event.type, event.type) if dialect == BETA else event.type
                assert body["type"] == name
                assert body["event_id"].startswith("evt_") and body["event_id"] not in ids
                ids.add(body["event_id"])


AUDIO_DELTA = next(e for e in SAMPLES if isinstance(e, ev.AudioDelta))


def test_ga_and_beta_shapes():
    ga, beta = Wire("s", GA), Wire("s", BETA)
    delta = ga.to_dict(AUDIO_DELTA)
    assert delta["type"] == "response.output_audio.delta"
    assert (delta["response_id"], delta["item_id"], delta["output_index"], delta["content_index"]) == (
        "resp_1",
        "item_2",
        0,
        0,
    )
    assert base64.b64decode(delta["delta"]) == b"\x01\x00\x02\x00"
    assert beta.to_dict(AUDIO_DELTA)["type"] == "response.audio.delta"
    done = beta.to_dict(ev.ResponseDone(RESPONSE))
    assert done["response"]["output"][0]["content"][0] == {"type": "audio", "transcript": "Hi."}
    assert ga.to_dict(ev.ResponseDone(RESPONSE))["response"]["output"][0]["content"][0]["type"] == "output_audio"
    assert beta.render(ev.ItemDone(None, USER_ITEM)) == [], "the beta protocol has no conversation.item.done"
    assert beta.to_dict(ev.ItemAdded(None, USER_ITEM))["type"] == "conversation.item.created"
    assert ga.to_dict(SAMPLES[0])["session"]["audio"]["output"]["voice"] == "alloy"
    assert beta.to_dict(SAMPLES[0])["session"]["voice"] == "alloy"
    err = ga.to_dict(SAMPLES[3])["error"]
    assert (err["code"], err["param"], err["event_id"]) == ("invalid_value", "session.voice", "c1")
    assert "recognition_ms" not in ga.to_dict(ev.TranscriptionCompleted("i", 0, "x"))


def test_binary_audio_goes_as_a_header_then_the_pcm():
    header, pcm = Wire("s").render(AUDIO_DELTA, binary_audio=True)
    body = json.loads(header)
    assert body["binary"] is True and "delta" not in body
    assert pcm == b"\x01\x00\x02\x00"


# Duplex's own events, outside OpenAI's protocol (issue 17 makes them opt-in).
EXTENSIONS = {"session.synced", "response.output_audio.paused", "response.output_audio.ducked",
              "response.output_audio.resumed"}  # fmt: skip


def _validated(types: Any, dialect: str) -> set[str]:
    """Render every sample in ``dialect`` and validate each standard event against the
    ``openai`` package's union of server events; the kinds checked."""
    from pydantic import TypeAdapter

    adapter, wire = TypeAdapter(types), Wire("sess_abcdef", dialect)
    checked = set()
    for event in SAMPLES:
        for frame in wire.render(event):
            body = json.loads(frame)
            if body["type"] not in EXTENSIONS:
                adapter.validate_python(body)
                checked.add(event.type)
    return checked


def test_every_standard_event_validates_against_the_openai_sdk_types():
    # The Agents SDKs validate every event they receive against these types; one that
    # fails is dropped or reported to the application as an error.
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent

    assert _validated(RealtimeServerEvent, GA) == {e.type for e in SAMPLES} - EXTENSIONS


def test_a_transcript_carries_its_usage_by_duration():
    body = Wire("sess_abcdef", GA).to_dict(ev.TranscriptionCompleted("item_1", 0, "hi", 3.0, 1500))
    assert body["usage"] == {"type": "duration", "seconds": 1.5} and "audio_ms" not in body


def test_every_standard_event_validates_against_the_beta_types_in_a_beta_session():
    from openai.types.beta.realtime.realtime_server_event import RealtimeServerEvent
    from pydantic import TypeAdapter

    ga_only = {"conversation.item.done", "input_audio_buffer.timeout_triggered"}
    assert _validated(RealtimeServerEvent, BETA) == {e.type for e in SAMPLES} - EXTENSIONS - ga_only
    adapter, wire = TypeAdapter(RealtimeServerEvent), Wire("sess_abcdef", BETA)
    named = wire.to_dict(ev.SessionCreated("sess_1", SessionSettings(model="gpt-4o-realtime-preview")))
    assert adapter.validate_python(named).session.model == "gpt-4o-realtime-preview"


def test_a_plain_client_gets_no_extension_fields_either():
    plain, duplex = Wire("s", GA, extensions=False), Wire("s", GA)
    for event in SAMPLES:
        for frame in plain.render(event):
            body = json.loads(frame)
            ours = {"epoch", "seq", "input_watermark", "recognition_ms"}
            ours |= {"audio_start_ms"} if body["type"] == "response.output_audio.delta" else set()
            assert not ours & set(body), body
            assert "timings" not in body.get("response", {}) and "pacing" not in body.get("session", {})
    full = json.loads(duplex.render(AUDIO_DELTA)[0])
    assert (full["epoch"], full["seq"], full["input_watermark"]) == (1, 0, 4800)
    assert "timings" in json.loads(duplex.render(ev.ResponseDone(RESPONSE))[0])["response"]
