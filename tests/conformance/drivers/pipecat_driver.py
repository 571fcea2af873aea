"""Drives Pipecat's ``OpenAIRealtimeLLMService`` (unmodified) for the conformance checks.

A bare pipeline without a transport, as a Pipecat bot is built around a realtime
service: ``[user aggregator, OpenAIRealtimeLLMService(base_url=...), assistant
aggregator]`` on an ``LLMContext`` that holds the tool, run by a ``PipelineWorker``.
The test is the transport: it queues ``InputAudioRawFrame`` (microphone) and
``LLMMessagesAppendFrame`` (typed text), and watches the frames with an observer.
History is the ``LLMContext`` the aggregators keep.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
from typing import Any

from common import Client, State, run
from loguru import logger

# Pipecat logs every frame decision at DEBUG through loguru: keep warnings and worse.
logger.remove()
logger.add(sys.stderr, level="WARNING")

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema  # noqa: E402
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    ErrorFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMMessagesAppendFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair  # noqa: E402
from pipecat.services.llm_service import FunctionCallParams  # noqa: E402
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _history(context: LLMContext) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in context.get_messages():
        if not isinstance(message, dict):
            continue
        m: dict[str, Any] = dict(message)  # an OpenAI-shaped chat message
        role = m.get("role")
        if role == "tool":
            out.append(
                {
                    "id": m.get("tool_call_id"),
                    "role": None,
                    "kind": "function_call_output",
                    "text": _content(m.get("content")),
                }
            )
            continue
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            out.append(
                {
                    "id": call.get("id"),
                    "role": None,
                    "kind": "function_call",
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                    "text": "",
                }
            )
        if role in ("user", "assistant", "system") and m.get("content") is not None:
            out.append({"id": None, "role": role, "kind": "message", "text": _content(m.get("content"))})
    return out


class Watch(BaseObserver):
    """Records what the application sees flowing out of the realtime service."""

    def __init__(self, state: State, context: LLMContext) -> None:
        super().__init__(observe_every_push=False)
        self.state = state
        self.context = context
        self.replies = 0
        self.started = asyncio.Event()

    async def on_push_frame(self, data: FramePushed) -> None:
        f = data.frame
        st = self.state
        if isinstance(f, TTSAudioRawFrame):
            st.audio(f"reply-{self.replies}", len(f.audio))
            return
        if isinstance(f, InputAudioRawFrame):
            return
        if isinstance(f, StartFrame):
            self.started.set()
        elif isinstance(f, TTSStartedFrame):
            self.replies += 1
        elif isinstance(f, TTSStoppedFrame):
            st.reply_done()
        elif isinstance(f, InterruptionFrame):
            st.interrupted("InterruptionFrame")
        elif isinstance(f, ErrorFrame):
            st.error(f"ErrorFrame: {f.error}")
        st.set_history(_history(self.context))


class PipecatClient(Client):
    def __init__(self) -> None:
        self.state = State()
        self.worker: PipelineWorker | None = None
        self.runner_task: asyncio.Task[None] | None = None

    async def open(self, request: dict[str, Any]) -> None:
        st = self.state
        template = request["tool_result"]
        weather = FunctionSchema(
            name="get_weather",
            description="Get the current weather in a city.",
            properties={"city": {"type": "string", "description": "The city"}},
            required=["city"],
        )

        async def get_weather(params: FunctionCallParams) -> None:
            args = dict(params.arguments)
            st.tool_call("get_weather", args)
            await params.result_callback(template.format(city=args.get("city")))

        llm = OpenAIRealtimeLLMService(
            api_key="local",
            base_url=request["url"],
            settings=OpenAIRealtimeLLMService.Settings(system_instruction=request["instructions"]),
        )
        llm.register_function("get_weather", get_weather)
        context = LLMContext(tools=ToolsSchema(standard_tools=[weather]))
        pair = LLMContextAggregatorPair(context)
        watch = Watch(st, context)
        self.worker = PipelineWorker(
            Pipeline([pair.user(), llm, pair.assistant()]), observers=[watch], enable_rtvi=False, idle_timeout_secs=None
        )
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.runner_task = asyncio.create_task(runner.run())
        await asyncio.wait_for(watch.started.wait(), 30)

    async def send_text(self, text: str) -> None:
        assert self.worker is not None
        await self.worker.queue_frame(
            LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True)
        )

    async def send_audio(self, pcm: bytes) -> None:
        assert self.worker is not None
        await self.worker.queue_frame(InputAudioRawFrame(audio=pcm, sample_rate=24000, num_channels=1))

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.cancel()
        if self.runner_task is not None:
            await asyncio.wait_for(self.runner_task, 30)


if __name__ == "__main__":
    versions = {p: importlib.metadata.version(p) for p in ("pipecat-ai", "openai", "websockets", "pydantic")}
    run({"client": "pipecat", "versions": versions}, PipecatClient)
