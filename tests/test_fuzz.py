"""Fuzzing the protocol codec and the session state machine with random and mutated input.

Whatever arrives, no exception escapes, a bad input gets exactly one ``error``
event, and the session's invariants hold.
"""

from __future__ import annotations

import base64
import json
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex.app.core.actions import Action
from duplex.app.core.events import SERVER_EVENTS, Error
from duplex.app.core.protocol import CLIENT_EVENT_TYPES, ClientEvent, ProtocolError, decode_event
from duplex.app.core.session import Session
from duplex.app.core.wire import Wire
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.voices import load_corpus, resample

MODEL = SileroVad()

# Integers well past JSON's safe range: an error, never an overflow somewhere deeper.
huge = st.integers(60, 400).map(lambda k: 10**k) | st.integers(60, 400).map(lambda k: -(10**k))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | huge | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=12,
)
TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
_CLIP = next(c for c in load_corpus().turns if c.family == "human")
SPEECH = base64.b64encode(
    resample(_CLIP.pcm[_CLIP.speech_start :], _CLIP.rate, 24000)[:7200].astype("<i2").tobytes()
).decode()  # 0.3 s of a person speaking: voice activity hears it
valid = [
    {"type": "session.update", "session": {"voice": "alloy", "instructions": "hi", "pacing": {"enabled": False}}},
    {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}},
    {"type": "session.update", "session": {"turn_detection": None}},
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(np.zeros(480, "<i2").tobytes()).decode()},
    {"type": "input_audio_buffer.commit"},
    {"type": "input_audio_buffer.clear"},
    {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
    },
    {"type": "conversation.item.retrieve", "item_id": "item_x"},
    {"type": "conversation.item.delete", "item_id": "item_x"},
    {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": 10},
    {"type": "response.create"},
    {"type": "response.create", "response": {"output_modalities": ["text"], "instructions": "x"}},
    {"type": "response.cancel"},
    {"type": "playback.ack", "response_id": "r", "played_samples": 10, "input_samples": 5},
    {"type": "session.sync"},
    # Tools, schemas and the tool choice (the echo thinker calls a tool whose name is said).
    {"type": "session.update", "session": {"tools": [TOOL], "tool_choice": "auto"}},
    {"type": "session.update", "session": {"tools": [TOOL], "tool_choice": "required"}},
    {"type": "session.update", "session": {"tools": [{**TOOL, "parameters": {"type": "object", "properties": {}}}]}},
    {
        "type": "response.create",
        "response": {"tools": [TOOL], "tool_choice": {"type": "function", "name": "get_weather"}},
    },
    {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": 'get weather {"city": 1}'}],
        },
    },
    {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_x", "output": "ok"}},
    # Session changes mid-speech: real speech, then the detector switched, off, or cleared.
    {"type": "input_audio_buffer.append", "audio": SPEECH},
    {"type": "session.update", "session": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}},
    {"type": "session.update", "session": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}},
    # G.711 in and out, in both dialects' names.
    {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}},
    {"type": "session.update", "session": {"input_audio_format": "g711_alaw", "output_audio_format": "g711_ulaw"}},
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(range(256)) * 2).decode()},
    # The ids the server gives its own items: a client may take them first.
    *(
        {
            "type": "conversation.item.create",
            "item": {
                "id": f"item_ess_fuzz{n:05d}",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "mine"}],
            },
        }
        for n in range(1, 6)
    ),
]


def nested(depth: int) -> str:
    """A session.update whose transcription settings nest ``depth`` levels deep."""
    return (
        '{"type":"session.update","session":{"audio":{"input":{"transcription":'
        + '{"a":' * depth
        + "1"
        + "}" * depth
        + "}}}}"
    )


@st.composite
def mutated(draw) -> str | bytes:
    """A valid event with a field dropped, replaced or added; or junk."""
    kind = draw(st.sampled_from(["mutate", "random_event", "json", "text", "bytes", "deep", "constants"]))
    if kind == "deep":
        return nested(draw(st.integers(1, 3000)))
    if kind == "constants":  # JSON has no NaN or Infinity; Python's parser accepts them unless told not to
        value = draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        return '{"type":"session.update","session":{"speed":' + value + "}}"
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "text":
        return draw(st.text(max_size=64))
    if kind == "json":
        return json.dumps(draw(json_values))
    if kind == "random_event":
        event = {
            "type": draw(st.sampled_from(sorted(CLIENT_EVENT_TYPES))),
            **draw(st.dictionaries(st.text(max_size=12), json_values, max_size=4)),
        }
        return json.dumps(event)
    event = json.loads(json.dumps(draw(st.sampled_from(valid))))
    keys = [k for k in event if k != "type"]
    action = draw(st.sampled_from(["drop", "replace", "add", "keep"]))
    if action == "drop" and keys:
        event.pop(draw(st.sampled_from(keys)))
    elif action == "replace" and keys:
        event[draw(st.sampled_from(keys))] = draw(json_values)
    elif action == "add":
        event[draw(st.text(max_size=10))] = draw(json_values)
    return json.dumps(event)


def check_invariants(s: Session, last_samples: int) -> None:
    ids = [i.id for i in s.conversation.items]
    assert len(ids) == len(set(ids)), "item ids are unique"
    r = s.replies.active
    assert r is None or r.item in s.conversation.items or s.conversation.taken(r.item.id), (
        "the live reply's item is in the conversation, or its id held for it"
    )
    assert s.conversation.chars == sum(i.chars for i in s.conversation.items), "the running total is true"
    assert s.input_samples >= last_samples, "the input clock never goes back"
    assert s.settings.input_rate in (16000, 24000) and s.settings.output_rate > 0
    assert s.replies.epoch >= 0


@settings(
    max_examples=int(os.environ.get("DUPLEX_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(messages=st.lists(mutated(), min_size=1, max_size=25), finish=st.lists(st.booleans(), min_size=1))
def test_random_and_mutated_input_never_breaks_the_session(messages, finish):
    s = Session("sess_fuzz", 0.0, voice_activity=MODEL)
    wire = Wire(s.id)
    s.start()
    now, samples = 0.0, 0
    for i, message in enumerate(messages):
        now += 0.02
        out: list = []
        if isinstance(message, bytes):
            out = s.feed_binary(message, now)  # binary audio mode is off: always an error
            assert [type(e) for e in out] == [Error]
        else:
            try:
                event = decode_event(message, max_bytes=1 << 20)
            except ProtocolError as err:
                assert err.code
            else:
                assert isinstance(event, ClientEvent)
                out = s.feed(event, now)
                errors = [e for e in out if isinstance(e, Error)]
                assert len(errors) <= 1
                if errors:  # a refused event changed nothing visible but the error
                    assert len(out) == 1
        for o in out:
            assert isinstance(o, SERVER_EVENTS + Action.__args__)
            if isinstance(o, SERVER_EVENTS):
                for frame in wire.render(o, binary_audio=True):  # every event can go on the wire
                    assert isinstance(frame, bytes) or json.loads(frame)["type"]
        r = s.replies.active
        if r is not None and finish[i % len(finish)]:
            s.on_reply_finished(r.id, now)  # the engine finished it meanwhile
        check_invariants(s, samples)
        samples = s.input_samples
