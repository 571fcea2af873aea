"""The rest of what Realtime clients use: idle timeouts, out-of-band responses, G.711
audio, and a client's truncation racing the server's own; each over a real WebSocket."""

from __future__ import annotations

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.simulated import SimulatedClient


async def test_idle_timeout_commits_the_silence_and_answers_it(server):
    """OpenAI's ``idle_timeout_ms``: counted on the input clock from when the last reply
    was heard; speech restarts the count."""
    sim = await SimulatedClient.open(server.port)
    td = {"type": "server_vad", "idle_timeout_ms": 5000}
    await sim.send("session.update", session={"turn_detection": td, "output_modalities": ["text"]})
    got = await sim.silence(4.0)
    assert not [r for r in got if r.event["type"] == "input_audio_buffer.timeout_triggered"]
    got += await sim.silence(1.5)
    fired = [r.event for r in got if r.event["type"] == "input_audio_buffer.timeout_triggered"]
    assert len(fired) == 1, [r.event["type"] for r in got]
    t = fired[0]
    assert 4990 <= t["audio_end_ms"] - t["audio_start_ms"] <= 5100, t
    types = [r.event["type"] for r in got]
    assert types.index("input_audio_buffer.committed") > types.index("input_audio_buffer.timeout_triggered")
    done = [r.event for r in got if r.event["type"] == "response.done"]
    assert done and done[0]["response"]["status"] == "completed"
    await sim.stop()


async def test_an_out_of_band_response_stays_out_of_the_conversation(server):
    c = await RealtimeClient.connect(server.port)
    await c.update(output_modalities=["text"])
    kept = await c.say("remember me")
    await c.until("conversation.item.done")
    before = len(c.events)
    own = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "classify this"}]}
    await c.send(
        "response.create",
        response={
            "conversation": "none",
            "input": [{"type": "item_reference", "id": kept}, own],
            "metadata": {"k": "v"},
        },
    )
    done = (await c.until("response.done"))["response"]
    events = c.events[before:]
    created = next(e for e in events if e["type"] == "response.created")["response"]
    assert created["conversation_id"] is None and done["conversation_id"] is None
    assert done["metadata"] == {"k": "v"}
    assert not [e for e in events if e["type"] in ("conversation.item.added", "conversation.item.done")]
    assert done["output"][0]["content"][0]["text"] == "classify this", "its own input is the context"
    await c.send("conversation.item.retrieve", item_id=done["output"][0]["id"])
    assert (await c.until("error"))["error"]["code"] == "item_not_found"
    await c.send("response.create", response={"conversation": "elsewhere"})
    assert (await c.until("error"))["error"]["param"] == "response.conversation"
    await c.close()


def test_truncation_cuts_the_thinkers_context_as_openai_defines_it():
    from duplex.app.core.session import Session
    from tests.test_session import ev

    s = Session("sess_test", 0.0)
    for i in range(10):
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{i}" * 400}]}
        s.feed(ev("conversation.item.create", item=item), 0.0)
    s.feed(ev("session.update", session={"instructions": "Be brief."}), 0.0)
    assert len(s.messages()) == 11, "auto: all of it fits the default budget"
    limit = {"post_instructions": 500}  # 2000 characters: five messages
    s.feed(
        ev(
            "session.update",
            session={"truncation": {"type": "retention_ratio", "retention_ratio": 1.0, "token_limits": limit}},
        ),
        0.0,
    )
    kept = s.messages()
    assert kept[0] == {"role": "system", "content": "Be brief."}, "the instructions always stay"
    assert [m["content"][0] for m in kept[1:]] == list("56789")
    s.feed(
        ev(
            "session.update",
            session={"truncation": {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": limit}},
        ),
        0.0,
    )
    assert [m["content"][0] for m in s.messages()[1:]] == list("89"), "cut to half the budget at once"
    s.feed(ev("session.update", session={"truncation": "disabled"}), 0.0)
    assert len(s.messages()) == 11
    out = s.feed(ev("session.update", session={"truncation": {"type": "retention_ratio", "retention_ratio": 2.0}}), 0.0)
    assert out[0].error.param == "session.truncation.retention_ratio"
