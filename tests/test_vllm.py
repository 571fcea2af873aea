"""The real-model path in process: a tiny random Llama on a real vLLM engine, SNAC of
the real architecture with random weights, through the WebSocket server.

Needs the ``vllm`` extra (``.ci/run`` installs it); without it the module is
skipped with the reason printed (and fails where DUPLEX_REQUIRE_ALL=1).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

from duplex.app.clients.realtime import RealtimeClient, audio_of
from duplex.app.clients.sounds import mix, silence, speech, trim
from duplex.pipeline.backends import Backends
from duplex.pipeline.state import StateHandle, StateMismatch
from duplex.pipeline.talker import SpeechRequest
from lab.servers import serving
from tests.util import (
    LONG_ANSWER_TOKENS,
    WEATHER_TOOL,
    ask_for_a_long_answer,
    asked_while_listening,
    assert_spoken_while_thinking,
    need,
)

HAVE_VLLM = all(importlib.util.find_spec(m) is not None for m in ("vllm", "snac", "torch"))
pytestmark = pytest.mark.asyncio(loop_scope="module")
LONG = "This reply is long enough to be cut off by the listener well before its end, sentence after sentence."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    need(HAVE_VLLM, "the vLLM tests need the vllm extra: pip install -e '.[vllm]'", extra="vllm")
    from lab.models import build_snac, build_tiny_llama

    root = tmp_path_factory.mktemp("models")
    return build_tiny_llama(root / "tiny-llama"), build_snac(root / "snac")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tiny):
    from duplex.pipeline.talkers.codec import CodecLayout
    from duplex.pipeline.talkers.vllm import CodecTalker, LocalEngine
    from duplex.pipeline.vocoders.snac import SnacVocoder

    model, snac = tiny
    engine = LocalEngine(model, max_model_len=2048)
    await engine.start()
    talker = CodecTalker(engine, CodecLayout.load(model / "codec_layout.json"))
    yield talker, SnacVocoder(snac)
    await talker.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def vserver(backend, vad_model, recognizer):
    talker, vocoder = backend
    async with serving(Backends(talker, vocoder, voice_activity=vad_model, recognizer=recognizer)) as srv:
        yield srv


async def test_a_text_message_streams_pcm_frame_by_frame(vserver, backend):
    talker, _ = backend
    before = talker.frames
    c = await RealtimeClient.connect(vserver.port)
    await c.update(pacing={"enabled": False})
    await c.say("hello there friend")
    await c.send("response.create")
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed", done
    frames = talker.frames - before
    budget = talker.layout.max_tokens("hello there friend") // 7
    assert 0 < frames <= budget
    pcm = audio_of(c.events)
    assert pcm.size == frames * 2048, "every codec frame is 2048 samples of 24 kHz PCM, no more, no less"
    deltas = [e for e in c.events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) > 1 and [d["seq"] for d in deltas] == list(range(len(deltas)))
    assert await talker.engine.running() == 0
    await c.close()


async def test_response_cancel_aborts_the_engine_request(vserver, backend):
    talker, _ = backend
    before = talker.frames
    c = await RealtimeClient.connect(vserver.port)  # paced: the reply takes seconds to hear
    await c.say(LONG)
    await c.send("response.create")
    rid = (await c.until("response.created"))["response"]["id"]
    await c.until("response.output_audio.delta")
    await c.send("response.cancel")
    done = await c.until("response.done")
    assert done["response"]["status"] == "cancelled"
    # The abort completed before response.done was sent: the engine runs nothing.
    assert await talker.engine.running() == 0
    budget = talker.layout.max_tokens(LONG) // 7
    assert talker.frames - before < budget, "the request was stopped, not run to its end"
    at_done = len(c.events)
    await c.update(pacing={"enabled": False})
    await c.say("next")
    await c.send("response.create")
    await c.until("response.done")
    assert not [e for e in c.events[at_done:] if e.get("response_id") == rid], "stale audio after cancel"
    await c.close()


async def test_barge_in_aborts_the_engine_request(vserver, backend, talker):
    codec_talker, _ = backend
    # No reply to the interruption itself, so the engine should be left with nothing.
    sim = await asked_while_listening(vserver.port, LONG)
    await sim.silence(1.0)
    rid = sim.of_type("response.created")[0].event["response"]["id"]
    interrupt = trim(await speech(talker, "wait, please stop talking now"), 24000)
    await sim.stream(mix(interrupt, silence(1.2)))
    done = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] == rid]
    assert done and done[0]["status"] == "cancelled" and done[0]["status_details"]["reason"] == "turn_detected"
    assert sim.of_type("conversation.item.truncated")
    assert await codec_talker.engine.running() == 0
    assert sum(h.stale_bytes for h in sim.heard.values()) == 0
    await sim.ws.close()


async def test_a_state_handle_from_another_checkpoint_is_rejected(backend):
    talker, _ = backend
    own = StateHandle("s1", "vllm", talker.artifact_id)
    other = StateHandle("s1", "vllm", "another-checkpoint@0123456789abcdef")
    with pytest.raises(StateMismatch):
        async for _ in talker.speak(SpeechRequest("r", "hi", state=other)):
            pass
    chunks = [c async for c in talker.speak(SpeechRequest("r", "hi", state=own))]
    assert chunks and await talker.engine.running() == 0


async def test_configuration_is_checked_before_anything_starts(tiny, tmp_path):
    model, snac = tiny

    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "duplex.app", "serve", "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = serve("--talker", "vllm", "--model", str(tmp_path / "missing"), "--vocoder-weights", str(snac))
    assert r.returncode == 2 and "does not exist" in r.stderr
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "vocab_size": 30522}))
    (bert / "model.safetensors").write_bytes(b"")
    r = serve("--talker", "vllm", "--model", str(bert), "--vocoder-weights", str(snac))
    assert r.returncode == 2 and "not a supported causal LM" in r.stderr
    r = serve("--talker", "vllm", "--model", str(model), "--vocoder-weights", str(snac))  # orpheus layout
    assert r.returncode == 2 and "cannot hold the orpheus codec tokens" in r.stderr
    r = serve("--talker", "vllm", "--model", str(model), "--codec-layout", str(model / "codec_layout.json"))
    assert r.returncode == 2 and "--vocoder-weights" in r.stderr
    r = serve(
        "--talker",
        "vllm",
        "--model",
        str(model),
        "--codec-layout",
        str(model / "codec_layout.json"),
        "--vocoder-weights",
        str(tmp_path),
    )
    assert r.returncode == 2 and "not a SNAC checkpoint" in r.stderr


async def test_snac_streaming_matches_a_whole_decode(tiny, monkeypatch):
    """Windowed, batched streaming gives the audio a single whole-signal decode gives.

    SNAC's decoder injects random noise by design; it is switched off here so two
    decodes can be compared at all."""
    import numpy as np
    import snac.layers

    from duplex.pipeline.frames import CODES, AudioBuffer
    from duplex.pipeline.vocoders.snac import SnacVocoder

    monkeypatch.setattr(snac.layers.NoiseBlock, "forward", lambda self, x: x)
    _, weights = tiny
    frames = np.random.default_rng(1).integers(0, 4096, (7, 24))
    whole = SnacVocoder(weights).decode([frames[:, i] for i in range(24)])

    def stream(vocoder, cuts):
        s = vocoder.open(11.71875, 24000)
        out = [s.push(AudioBuffer(frames[:, a:b], CODES, 11.71875, "t")) for a, b in cuts] + [s.flush()]
        return np.concatenate([o.data for o in out if o is not None]).astype(np.float64) / 32767

    for vocoder, cuts in (
        (SnacVocoder(weights), [(0, 5), (5, 17), (17, 24)]),
        (SnacVocoder(weights, max_batch=1), [(i, i + 1) for i in range(24)]),
    ):
        x = stream(vocoder, cuts)
        assert x.size == 24 * 2048
        error = np.sqrt(((x - whole) ** 2).mean()) / np.sqrt((whole**2).mean())
        assert error < 0.02, f"streamed audio is {error:.1%} off a whole decode"


# -- the thinker: replies from the language model, in process ------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tserver(backend, espeak_runtime, vad_model, recognizer):
    """The built-in voice speaking what a vLLM chat model (on the talker's engine) says."""
    from duplex.pipeline.talkers.espeak import EspeakTalker
    from duplex.pipeline.thinkers.vllm_chat import VllmChatThinker
    from duplex.pipeline.vocoders.pcm import PcmVocoder
    from lab.models import text_token_ids

    codec_talker, _ = backend
    talker = EspeakTalker(espeak_runtime)
    thinker = VllmChatThinker(
        codec_talker.engine,
        owns_engine=False,
        max_tokens=1800,
        temperature=1.0,
        sampling={"allowed_token_ids": text_token_ids()},
    )
    async with serving(Backends(talker, PcmVocoder(), thinker, vad_model, recognizer)) as srv:
        yield srv, thinker


async def test_thinker_reply_audio_starts_before_the_model_finishes(tserver):
    srv, thinker = tserver
    thinker.max_tokens = LONG_ANSWER_TOKENS
    c, done = await ask_for_a_long_answer(srv.port)
    assert done["status"] == "completed"
    assert_spoken_while_thinking(srv, done)
    said = done["output"][0]["content"][0]["transcript"]
    streamed = "".join(e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta")
    assert said == streamed and len(said) > 40, "the model's words, streamed as the audio went out"
    assert audio_of(c.events).size > 24000
    await c.close()


async def test_barge_in_aborts_the_thinker_and_keeps_what_was_heard(tserver, talker):
    srv, thinker = tserver
    thinker.max_tokens = 1800  # the model is still talking when the user interrupts
    sim = await asked_while_listening(srv.port, "tell me a story")
    await sim.silence(1.5)
    assert await thinker.engine.running() == 1, "the model was still generating"
    interrupt = trim(await speech(talker, "wait, please stop talking now"), 24000)
    await sim.stream(mix(interrupt, silence(1.2)))
    done = [r.event["response"] for r in sim.of_type("response.done")]
    assert done and done[0]["status"] == "cancelled" and done[0]["status_details"]["reason"] == "turn_detected"
    assert await thinker.engine.running() == 0, "the barge-in aborted the language-model request"
    item_id = sim.of_type("conversation.item.truncated")[0].event["item_id"]
    await sim.send("conversation.item.retrieve", item_id=item_id)
    await sim.sync()
    kept = sim.of_type("conversation.item.retrieved")[0].event["item"]["content"][0]["transcript"]
    streamed = "".join(r.event["delta"] for r in sim.of_type("response.output_audio_transcript.delta"))
    assert kept and streamed.startswith(kept) and len(kept) < len(streamed) + 1
    assert len(streamed) == len(kept) or not streamed[len(kept)].isalnum(), "cut at the end of a heard word"
    assert sum(h.stale_bytes for h in sim.heard.values()) == 0
    await sim.ws.close()


async def test_thinker_and_talker_share_one_engine(backend, vad_model, recognizer):
    """A vLLM chat model says it, the vLLM codec talker speaks it, one engine for both."""
    from duplex.pipeline.thinkers.vllm_chat import VllmChatThinker
    from lab.models import text_token_ids

    codec_talker, vocoder = backend
    thinker = VllmChatThinker(
        codec_talker.engine, owns_engine=False, max_tokens=40, sampling={"allowed_token_ids": text_token_ids()}
    )
    async with serving(Backends(codec_talker, vocoder, thinker, vad_model, recognizer)) as srv:
        c = await RealtimeClient.connect(srv.port)
        await c.update(pacing={"enabled": False})
        await c.say("hello")
        await c.send("response.create")
        done = (await c.until("response.done"))["response"]
        assert done["status"] == "completed"
        assert audio_of(c.events).size % 2048 == 0 and audio_of(c.events).size > 0
        assert thinker.engine is codec_talker.engine and await codec_talker.engine.running() == 0
        await c.close()


@pytest.mark.parametrize("choice", [{"type": "function", "name": "get_weather"}, "required"], ids=["named", "required"])
async def test_the_model_calls_a_forced_tool_and_then_answers(tserver, choice):
    srv, thinker = tserver
    thinker.max_tokens = 200
    c = await RealtimeClient.connect(srv.port)
    await c.update(tools=[WEATHER_TOOL], tool_choice=choice, pacing={"enabled": False})
    await c.say("what is the weather like")
    await c.send("response.create")
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "completed", done
    calls = done["output"]
    assert calls and {i["type"] for i in calls} == {"function_call"}, done  # "required" may make several
    assert len(calls) == 1 or choice == "required"
    for call in calls:
        assert call["name"] == "get_weather"
        assert json.loads(call["arguments"])["city"] in ("Paris", "Oslo", "Lima"), call["arguments"]
        streamed = "".join(
            e["delta"]
            for e in c.events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == call["id"]
        )
        assert streamed == call["arguments"]
        await c.send(
            "conversation.item.create",
            item={"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
        )
        await c.until("conversation.item.added")
    await c.send("response.create", response={"tool_choice": "none"})  # now it must speak
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "completed" and [i["type"] for i in done["output"]] == ["message"], done
    assert audio_of(c.events).size > 0
    await c.close()


async def test_with_auto_choice_vllms_tool_parser_reads_the_models_call(tserver):
    """The model writes words, then a call in Hermes' format (held to it by a regex here:
    a random model would not); the words are spoken, the call is read by vLLM's parser."""
    import re

    from vllm.sampling_params import StructuredOutputsParams

    from duplex.pipeline.thinker import ThinkRequest
    from duplex.pipeline.tools import ToolCallDelta

    _, thinker = tserver
    written = 'Let me see. <tool_call>{"name": "get_weather", "arguments": {"city": "Lima"}}</tool_call>'
    held = {"structured_outputs": StructuredOutputsParams(regex=re.escape(written)), "allowed_token_ids": None}
    request = ThinkRequest("resp_auto", ({"role": "user", "content": "weather?"},), options=held, tools=(WEATHER_TOOL,))
    pieces = [p async for p in thinker.think(request)]
    said = "".join(p for p in pieces if isinstance(p, str))
    calls = [p for p in pieces if isinstance(p, ToolCallDelta)]
    assert said.strip() == "Let me see.", pieces
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Lima"})]


async def test_a_required_answer_cut_short_by_max_tokens_keeps_its_complete_calls():
    need(HAVE_VLLM, "the vLLM tests need the vllm extra: pip install -e '.[vllm]'", extra="vllm")
    from duplex.pipeline.thinkers.vllm_chat import _complete_calls

    whole = (
        '[{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "get_weather", "parameters": {"city": "Li'
    )
    assert _complete_calls(whole) == [{"name": "get_weather", "parameters": {"city": "Oslo"}}]
    with pytest.raises(ValueError, match="no complete function call"):
        _complete_calls('[{"name": "get_wea')
