"""A real conversation through the server with the shipped chat model: a spoken question
answered in the model's words, a barge-in that cuts what the model is told it said, a
function tool round trip, a spoken command obeyed and never asked, and the session's
settings reaching the model. Real voice activity, Whisper, Smart Turn and voice; the
thinker is the real model, watched by a recorder that passes every request on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from duplex.app.clients.simulated import SimulatedClient
from duplex.app.edge.config import ServerConfig
from duplex.pipeline.backends import Backends
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.thinkers.local import LocalChatThinker
from duplex.pipeline.tools import ToolCallDelta
from duplex.pipeline.vocoders.pcm import PcmVocoder
from lab.commands import command
from lab.questions import TOOLS
from lab.servers import ServerProcess, serving
from tests.util import start_reply, text_item

RATE = 24000


class Recorder:
    """The real thinker, with every request it was asked kept."""

    name = "local"
    tools = True

    def __init__(self, thinker: LocalChatThinker) -> None:
        self.thinker = thinker
        self.asked: list[ThinkRequest] = []
        self.wrote: dict[str, str] = {}
        """Request id -> the text the model wrote for it."""

    async def start(self) -> None:
        pass

    async def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]:
        self.asked.append(request)
        self.wrote[request.request_id] = ""
        async for piece in self.thinker.think(request):
            if isinstance(piece, str):
                self.wrote[request.request_id] += piece
            yield piece

    async def prefill(self, request: ThinkRequest) -> None:
        await self.thinker.prefill(request)

    async def aclose(self) -> None:
        pass


@pytest.fixture(scope="module")
def model():
    thinker = LocalChatThinker(slots=2)
    asyncio.run(thinker.start())
    yield thinker
    asyncio.run(thinker.aclose())


@pytest.fixture
async def served(model, talker, vad_model, recognizer, turn_model):
    recorder = Recorder(model)
    backends = Backends(talker, PcmVocoder(), recorder, vad_model, recognizer, turn_model)
    config = ServerConfig(host="127.0.0.1", port=0, turn_detection="semantic_vad")
    async with serving(backends, config) as server:
        yield server, recorder


def done_of(sim: SimulatedClient, rid: str) -> dict:
    return next(r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] == rid)


async def answered(sim: SimulatedClient, replies: int, most_s: float = 60.0) -> None:
    """Stream silence until ``replies`` responses are done (the model takes the time it
    takes on a busy machine), at most ``most_s`` of input."""
    for _ in range(int(most_s / 0.5)):
        if len(sim.of_type("response.done")) >= replies:
            return
        await sim.silence(0.5)
    raise AssertionError(f"{replies} responses not done after {most_s:g} s of input")


def words_of(response: dict) -> str:
    return " ".join(
        part.get("transcript") or part.get("text") or ""
        for item in response.get("output") or []
        for part in item.get("content") or []
    )


def test_the_default_server_answers_a_spoken_question_with_the_models_words(tmp_path: Path):
    question = asyncio.run(command("What is the capital of France?", "am_michael"))

    async def talk(port: int) -> tuple[str, str]:
        sim = await SimulatedClient.open(port)
        await sim.silence(0.5)
        await sim.stream(np.concatenate([question.pcm, np.zeros(RATE * 8, np.int16)]))
        heard = sim.of_type("conversation.item.input_audio_transcription.completed")[0].event["transcript"]
        rid = sim.of_type("response.created")[0].event["response"]["id"]
        await sim.ws.close()
        return heard, words_of(done_of(sim, rid))

    with ServerProcess(log=tmp_path / "server.log").running() as server:  # every default
        heard, answer = asyncio.run(talk(server.port))
    assert "france" in heard.lower()
    assert "paris" in answer.lower(), answer
    assert answer.strip().lower() != heard.strip().lower()  # the model's words, not the echo


async def test_a_barge_in_cuts_what_the_model_is_told_it_said(served):
    server, recorder = served
    sim = await SimulatedClient.open(server.port, keep_audio=True)
    rid = await start_reply(sim, "Tell me a long story about a friendly dragon, in at least six sentences.")
    await sim.silence(3.0)
    assert not sim.heard[rid].done  # still speaking when the user talks over it
    interruption = await command("Wait, what is the capital of Spain?", "am_michael")
    await sim.stream(np.concatenate([interruption.pcm, np.zeros(RATE * 8, np.int16)]))
    cancelled = done_of(sim, rid)
    assert cancelled["status"] == "cancelled"
    assert sim.of_type("conversation.item.truncated")[0].event["audio_end_ms"] > 0
    told = [m for m in recorder.asked[-1].messages if m["role"] == "assistant"]
    assert told, "the next request tells the model what it said"
    heard, wrote = told[-1]["content"].strip(), recorder.wrote[rid]
    assert heard and wrote.startswith(heard) and len(heard) < len(wrote.strip()), (heard, wrote)
    assert heard == words_of(cancelled).strip()  # what the client was told it heard
    answer = words_of(sim.of_type("response.done")[-1].event["response"])
    assert "madrid" in answer.lower(), answer
    await sim.ws.close()


async def test_a_tool_call_round_trip(served):
    server, recorder = served
    sim = await SimulatedClient.open(server.port)
    await sim.send("session.update", session={"tools": list(TOOLS)})
    await sim.send("conversation.item.create", item=text_item("What's the weather like in Paris right now?"))
    await sim.send("response.create", response={"tool_choice": "required"})
    await answered(sim, 1)
    calls = sim.of_type("response.function_call_arguments.done")
    assert calls and calls[0].event["name"] == "get_weather"
    assert json.loads(calls[0].event["arguments"])["city"].lower() == "paris"
    output = {
        "type": "function_call_output",
        "call_id": calls[0].event["call_id"],
        "output": '{"temperature_c": 18, "condition": "sunny"}',
    }
    await sim.send("conversation.item.create", item=output)
    await sim.send("response.create")
    await answered(sim, 2)
    answer = words_of(sim.of_type("response.done")[-1].event["response"])
    assert "sunny" in answer.lower() or "18" in answer or "eighteen" in answer.lower(), answer
    asked = recorder.asked[-1]
    assert [m["role"] for m in asked.messages][-2:] == ["assistant", "tool"]
    await sim.ws.close()


async def test_a_spoken_command_is_obeyed_and_never_asked(served):
    server, recorder = served
    stop = await command("Stop.", "am_michael")
    sim = await SimulatedClient.open(server.port)
    await sim.silence(0.5)
    await sim.stream(np.concatenate([stop.pcm, np.zeros(RATE * 4, np.int16)]))
    heard = sim.of_type("conversation.item.input_audio_transcription.completed")
    assert heard and "stop" in heard[0].event["transcript"].lower()
    assert not sim.of_type("response.created")
    assert not recorder.asked
    await sim.ws.close()


async def test_the_sessions_settings_reach_the_model(served):
    server, recorder = served
    sim = await SimulatedClient.open(server.port)
    await sim.send("session.update", session={"max_output_tokens": 6, "temperature": 0.1})
    await start_reply(sim, "Describe the sea in three long sentences.")
    await sim.silence(3.0)
    asked = recorder.asked[-1]
    assert asked.options == {"max_tokens": 6, "temperature": 0.1}
    assert recorder.thinker.last_timings["predicted_n"] <= 6
    await sim.ws.close()
