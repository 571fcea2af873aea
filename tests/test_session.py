"""The session state machine, sans I/O: events in, events and actions out."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from duplex.app.core.actions import CancelReply, Heard, Prefill, StartReply, Transcribe
from duplex.app.core.conversation import Item, Part
from duplex.app.core.protocol import ClientEvent, decode_event
from duplex.app.core.session import Session
from duplex.app.core.wire import Wire
from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.stages import OutputChunk
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import WordMark


def ev(etype: str, **data) -> ClientEvent:
    return ClientEvent(etype, {"type": etype, **data})


def wire(out: list[Any]) -> list[Any]:
    """The session's outputs with every event rendered as the wire's JSON object."""
    w = Wire("sess_test")
    return [
        o if isinstance(o, (StartReply, CancelReply, Transcribe)) or type(o).__name__ == "Sync" else w.to_dict(o)
        for o in out
        if not isinstance(o, Prefill)  # reading ahead: the thinker's business (tests/test_turn_taking.py)
    ]


def chunk(rid: str, epoch: int, seq: int, start: int, n: int = 2400, words=(), text: str = "") -> ChunkEvent:
    audio = AudioBuffer.pcm(np.ones(n, np.int16), 24000, "test")
    return ChunkEvent(rid, 1, seq, epoch, "audio", OutputChunk(audio, start, tuple(words), text))


def start_reply(s: Session, text: str = "one two three") -> StartReply:
    s.feed(
        ev(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        ),
        0.0,
    )
    out = s.feed(ev("response.create"), 0.0)
    [action] = [o for o in out if isinstance(o, StartReply)]
    return action


def test_cancel_retires_the_epoch_before_anything_else():
    s = Session("sess_test", 0.0)
    a = start_reply(s)
    assert s.on_output(chunk(a.response_id, a.epoch, 0, 0), 0.0).events
    out = wire(s.feed(ev("response.cancel"), 0.0))
    assert isinstance(out[0], CancelReply) and out[0].epoch == a.epoch
    assert out[-1]["type"] == "response.done" and out[-1]["response"]["status"] == "cancelled"
    # Audio of the cancelled epoch that was already in flight produces nothing.
    late = chunk(a.response_id, a.epoch, 1, 2400)
    assert not s.replies.current(late)
    assert s.on_output(late, 0.0).events == []
    assert s.on_reply_finished(a.response_id, 0.0) == [], "response.done is sent once"
    b = start_reply(s, "next")
    assert b.epoch == a.epoch + 1
    assert s.on_output(chunk(a.response_id, a.epoch, 2, 4800), 0.0).events == []


def test_transcript_follows_the_audio_sent():
    s = Session("sess_test", 0.0)
    a = start_reply(s, "one two three")
    out = wire(
        s.on_output(chunk(a.response_id, a.epoch, 0, 0, words=[WordMark(0, 3, 0)], text="one two three"), 0.0).events
    )
    assert [e["delta"] for e in out if e["type"] == "response.output_audio_transcript.delta"] == ["one"]
    out = wire(
        s.on_output(
            chunk(a.response_id, a.epoch, 1, 2400, words=[WordMark(4, 7, 3000), WordMark(8, 13, 4000)]), 0.0
        ).events
    )
    assert [e["delta"] for e in out if e["type"] == "response.output_audio_transcript.delta"] == [" two three"]
    done = wire(s.on_reply_finished(a.response_id, 0.0))
    assert done[-1]["response"]["output"][0]["content"][0]["transcript"] == "one two three"


def test_paced_output_waits_for_playback():
    s = Session("sess_test", 0.0)
    a = start_reply(s)
    assert s.output_wait(2400, 0.0) == 0.0
    s.on_output(chunk(a.response_id, a.epoch, 0, 0, n=6000), 0.0)  # 250 ms sent at t=0
    assert s.output_wait(2400, 0.0) > 0  # the next 100 ms would exceed the lead
    assert s.output_wait(2400, 0.2) == 0.0  # 200 ms of it has been played by then


def test_same_input_faster_or_slower_gives_same_events():
    def run(step_wall: float) -> list:
        s = Session("sess_same", 0.0)
        out = []
        for i in range(20):
            out += s.feed(ev("input_audio_buffer.append", audio="AAAAAAAA"), i * step_wall)
        out += s.feed(ev("input_audio_buffer.commit"), 20 * step_wall)
        return [{k: v for k, v in e.items() if k != "event_id"} for e in wire(out) if isinstance(e, dict)]

    assert run(0.001) == run(0.1)


def test_decode_then_feed_unknown_field_types():
    s = Session("sess_test", 0.0)
    out = wire(
        s.feed(
            decode_event('{"type":"session.update","session":{"audio":{"output":{"speed":3}}}}', max_bytes=1000), 0.0
        )
    )
    assert out[0]["type"] == "error" and out[0]["error"]["param"] == "session.audio.output.speed"
    assert s.settings.speed == 1.0


def test_a_turn_heard_as_nothing_is_asked_again_without_the_thinker():
    # A model asked about an empty message guesses ("I don't know.", 2.4 s late beside
    # three other conversations): the reply asks the user to say it again, at once.
    from duplex.pipeline.detectors.silero_vad import SileroVad
    from duplex.pipeline.thinker import NOT_UNDERSTOOD

    s = Session("sess_test", 0.0, voice_activity=SileroVad())
    s.conversation.add(Item("u1", "user", [Part("input_audio", None)]))
    out = wire(s.on_transcript(Heard("u1", " "), 1.0))
    assert out[0]["type"] == "conversation.item.input_audio_transcription.completed"
    [start] = [o for o in out if isinstance(o, StartReply)]
    assert start.plan.said == NOT_UNDERSTOOD
    assert start.plan.speech(start.response_id).text == NOT_UNDERSTOOD
    assert not any(isinstance(o, Transcribe) for o in out)
    s = Session("sess_test", 0.0, voice_activity=SileroVad())
    s.conversation.add(Item("u2", "user", [Part("input_audio", None)]))
    out = wire(s.on_transcript(Heard("u2", "What time is it?"), 1.0))
    [start] = [o for o in out if isinstance(o, StartReply)]
    assert start.plan.said is None, "words heard are the thinker's to answer"


def test_the_thinker_sees_instructions_and_only_what_was_heard():
    s = Session("sess_test", 0.0)
    s.feed(ev("session.update", session={"instructions": "Be brief."}), 0.0)
    a = start_reply(s, "tell me about the sea")
    s.on_output(chunk(a.response_id, a.epoch, 0, 0, n=2400, words=[WordMark(0, 3, 0)]), 0.0)
    live = s.replies.active
    assert live is not None
    live.text = "The sea is deep and wide."  # what the thinker said in full
    live.item.full_text = live.text
    live.item.words = [WordMark(0, 3, 0), WordMark(4, 7, 1200), WordMark(8, 10, 3000)]
    out = wire(s.feed(ev("conversation.item.truncate", item_id=live.item.id, content_index=0, audio_end_ms=60), 0.0))
    assert out[-1]["type"] == "conversation.item.truncated"
    b = start_reply(s, "and then?")
    assert b.think.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "tell me about the sea"},
        {"role": "assistant", "content": "The sea"},  # heard up to the word begun at 50 ms
        {"role": "user", "content": "and then?"},
    )


def test_every_client_event_the_protocol_accepts_has_a_handler():
    from duplex.app.core.protocol import CLIENT_EVENT_TYPES
    from duplex.app.core.session import _HANDLERS

    assert set(_HANDLERS) == CLIENT_EVENT_TYPES


def test_response_metadata_is_echoed_and_bounded():
    # LiveKit matches response.created to its response.create by metadata.client_event_id.
    s = Session("sess_test", 0.0)
    asked = {"client_event_id": "evt_lk_1", "purpose": "greeting"}
    raw = json.dumps({"type": "response.create", "response": {"metadata": asked}})
    out = wire(s.feed(decode_event(raw, max_bytes=1 << 20), 0.0))
    created = next(o for o in out if isinstance(o, dict) and o["type"] == "response.created")
    assert created["response"]["metadata"] == asked
    s.feed(ev("response.cancel"), 0.0)
    too_many = {f"k{i}": "v" for i in range(17)}
    out = wire(s.feed(ev("response.create", response={"metadata": too_many}), 0.0))
    assert [o["error"]["param"] for o in out if isinstance(o, dict) and o["type"] == "error"] == ["response.metadata"]


def test_tools_are_refused_with_an_error_and_the_rest_of_the_update_applies():
    # The Agents SDKs send instructions, voice and tools in one update: losing the first two
    # for want of the third is what real clients hit; ignoring tools silently is worse.
    s = Session("sess_test", 0.0, tools=False)  # a thinker that cannot call tools
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    update = {"instructions": "Be brief.", "tools": [tool], "tool_choice": "auto", "tracing": "auto"}
    out = wire(s.feed(ev("session.update", event_id="c7", session=update), 0.0))
    assert [o["type"] for o in out] == ["session.updated", "error"]
    assert out[0]["session"]["instructions"] == "Be brief."
    assert out[1]["error"]["code"] == "tools_unsupported" and out[1]["error"]["param"] == "session.tools"
    assert out[1]["error"]["event_id"] == "c7"
    assert [o["type"] for o in wire(s.feed(ev("session.update", session={"tools": []}), 0.0))] == ["session.updated"]


def test_a_clients_truncate_after_the_servers_own_ends_in_one_cut():
    s = Session("sess_test", 0.0)
    a = start_reply(s, "one two three")
    words = [WordMark(0, 3, 0), WordMark(4, 7, 12000), WordMark(8, 13, 36000)]
    s.on_output(chunk(a.response_id, a.epoch, 0, 0, n=48000, words=words, text="one two three"), 0.0)
    item = s.replies.active.item
    cut = wire(s.replies.interrupt(0, 0.0))  # the server's barge-in: nothing had been played
    assert cut[-1] == {**cut[-1], "type": "conversation.item.truncated", "audio_end_ms": 0}
    # The client's truncate arrives after, at its own (later) position: no error, the same cut.
    out = wire(s.feed(ev("conversation.item.truncate", item_id=item.id, content_index=0, audio_end_ms=900), 0.1))
    assert [(o["type"], o.get("audio_end_ms")) for o in out] == [("conversation.item.truncated", 0)]
    assert item.truncated_ms == 0 and item.content[0].text == ""

    b = start_reply(s, "one two three")
    s.on_output(chunk(b.response_id, b.epoch, 0, 0, n=48000, words=words, text="one two three"), 0.0)
    item = s.replies.active.item
    s.replies.cancel(s.replies.active, "turn_detected")
    item.truncate(1600)  # cut by the server at 1.6 s: "one two" heard
    out = wire(s.feed(ev("conversation.item.truncate", item_id=item.id, content_index=0, audio_end_ms=400), 0.1))
    assert [(o["type"], o.get("audio_end_ms")) for o in out] == [("conversation.item.truncated", 400)]
    assert item.content[0].text == "one", "the client heard less: the earlier cut wins, words and all"
