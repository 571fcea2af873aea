"""The rest of what Realtime clients use: idle timeouts, out-of-band responses, G.711
audio, and a client's truncation racing the server's own; each over a real WebSocket."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.simulated import SimulatedClient
from duplex.pipeline import g711
from lab.voices import load_corpus, resample


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
    assert len(s.ctx.messages()) == 11, "auto: all of it fits the default budget"
    limit = {"post_instructions": 500}  # 2000 characters: five messages
    s.feed(
        ev(
            "session.update",
            session={"truncation": {"type": "retention_ratio", "retention_ratio": 1.0, "token_limits": limit}},
        ),
        0.0,
    )
    kept = s.ctx.messages()
    assert kept[0] == {"role": "system", "content": "Be brief."}, "the instructions always stay"
    assert [m["content"][0] for m in kept[1:]] == list("56789")
    s.feed(
        ev(
            "session.update",
            session={"truncation": {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": limit}},
        ),
        0.0,
    )
    assert [m["content"][0] for m in s.ctx.messages()[1:]] == list("89"), "cut to half the budget at once"
    s.feed(ev("session.update", session={"truncation": "disabled"}), 0.0)
    assert len(s.ctx.messages()) == 11
    out = s.feed(ev("session.update", session={"truncation": {"type": "retention_ratio", "retention_ratio": 2.0}}), 0.0)
    assert out[0].error.param == "session.truncation.retention_ratio"


@pytest.mark.parametrize(
    ("dialect", "session", "law"),
    [
        (
            "ga",
            {
                "audio": {
                    "input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "server_vad"}},
                    "output": {"format": {"type": "audio/pcmu"}},
                }
            },
            "pcmu",
        ),
        (
            "beta",
            {
                "input_audio_format": "g711_alaw",
                "output_audio_format": "g711_alaw",
                "turn_detection": {"type": "server_vad"},
            },
            "pcma",
        ),
    ],
)
async def test_a_telephone_call_in_g711(server, dialect, session, law):
    """A human telephone recording, sent as 8 kHz G.711, is heard and answered in G.711."""
    clip = load_corpus()["human_allison_vm-nobodyavail"]
    phone = resample(clip.pcm, clip.rate, g711.RATE)
    c = await RealtimeClient.connect(server.port, beta=dialect == "beta")
    updated = await c.update(**session)
    if dialect == "ga":
        assert updated["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    else:
        assert updated["session"]["output_audio_format"] == "g711_alaw"
    line = np.concatenate([np.zeros(g711.RATE // 2, np.int16), phone, np.zeros(g711.RATE * 2, np.int16)])
    for i in range(0, line.size, 1600):  # 200 ms packets
        await c.send("input_audio_buffer.append", audio=base64.b64encode(g711.encode(line[i : i + 1600], law)).decode())
    heard = await c.until("conversation.item.input_audio_transcription.completed")
    words = set(re.findall(r"[a-z]+", heard["transcript"].lower()))
    assert len(words & set(re.findall(r"[a-z]+", (clip.text or "").lower()))) >= 6, heard["transcript"]
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "completed"
    delta_type = "response.audio.delta" if dialect == "beta" else "response.output_audio.delta"
    reply = b"".join(base64.b64decode(e["delta"]) for e in c.events if e["type"] == delta_type)
    pcm = g711.decode(reply, law)
    spoken = done["output"][0]["content"][0]["transcript"]
    # One byte per 8 kHz sample: a byte per 16-bit sample or a 24 kHz rate would be 2-3x this.
    assert 0.03 * g711.RATE * len(spoken) < pcm.size < 0.12 * g711.RATE * len(spoken), (pcm.size, spoken)
    assert np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300, "it is speech, not noise or silence"
    await c.close()


def test_g711_is_the_reference_codec_bit_for_bit():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop  # the reference implementation (CPython's, through 3.12)

    every = np.arange(-32768, 32768, dtype=np.int16)
    for law, encode, decode in (
        ("pcmu", audioop.lin2ulaw, audioop.ulaw2lin),
        ("pcma", audioop.lin2alaw, audioop.alaw2lin),
    ):
        assert g711.encode(every, law) == encode(every.tobytes(), 2)
        assert g711.decode(bytes(range(256)), law).tobytes() == decode(bytes(range(256)), 2)
