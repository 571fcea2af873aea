"""Drives LiveKit's OpenAI ``RealtimeModel`` (livekit-plugins-openai, unmodified) standalone.

No room and no ``AgentSession``: ``RealtimeModel(base_url="http://.../v1").session()``,
driven the way ``AgentSession`` drives it: ``update_instructions``, ``update_tools``,
``push_audio`` for the microphone, ``update_chat_ctx`` + ``generate_reply`` for typed
text, and for a function call ``llm.utils.execute_function_call`` (LiveKit's own
executor), its ``FunctionCallOutput`` added with ``update_chat_ctx``, then
``generate_reply``. History is the session's ``chat_ctx``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from common import Client, State, run
from livekit import rtc
from livekit.agents import llm
from livekit.agents.llm.utils import execute_function_call
from livekit.plugins import openai as lk_openai


def _history(ctx: llm.ChatContext) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in ctx.items:
        if item.type == "message":
            text = " ".join(c for c in item.content if isinstance(c, str))
            out.append({"id": item.id, "role": item.role, "kind": "message", "text": text})
        elif item.type == "function_call":
            out.append(
                {
                    "id": item.id,
                    "role": None,
                    "kind": "function_call",
                    "name": item.name,
                    "arguments": item.arguments,
                    "text": "",
                }
            )
        elif item.type == "function_call_output":
            out.append({"id": item.id, "role": None, "kind": "function_call_output", "text": item.output})
    return out


class LiveKitClient(Client):
    def __init__(self) -> None:
        self.state = State()
        self.model: lk_openai.realtime.RealtimeModel | None = None
        self.session: lk_openai.realtime.RealtimeSession | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def open(self, request: dict[str, Any]) -> None:
        st = self.state
        template = request["tool_result"]

        @llm.function_tool
        async def get_weather(city: str) -> str:
            """Get the current weather in a city.

            Args:
                city: The city
            """
            st.tool_call("get_weather", {"city": city})
            return str(template.format(city=city))

        self.tools = llm.ToolContext([get_weather])
        self.model = lk_openai.realtime.RealtimeModel(base_url=request["http_url"], api_key="local")
        s = self.session = self.model.session()
        s.on("error", lambda ev: st.error(f"error event: {ev.error!r} (recoverable={ev.recoverable})"))
        s.on("input_speech_started", lambda _: st.interrupted("input_speech_started"))
        s.on("generation_created", self._on_generation)
        s.on("openai_server_event_received", self._on_server_event)
        await s.update_instructions(request["instructions"])
        await s.update_tools([get_weather])

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _on_server_event(self, event: dict[str, Any]) -> None:
        # Emitted before the session handles the event: read the history once it has.
        if "delta" not in str(event.get("type")):
            asyncio.get_running_loop().call_soon(self._refresh)

    def _refresh(self) -> None:
        if self.session is not None:
            self.state.set_history(_history(self.session.chat_ctx))

    def _on_generation(self, ev: llm.GenerationCreatedEvent) -> None:
        self._spawn(self._messages(ev))
        self._spawn(self._functions(ev))

    async def _messages(self, ev: llm.GenerationCreatedEvent) -> None:
        st = self.state
        async for msg in ev.message_stream:

            async def audio(msg: llm.MessageGeneration = msg) -> None:
                async for frame in msg.audio_stream:
                    st.audio(msg.message_id, frame.data.nbytes)

            async def text(msg: llm.MessageGeneration = msg) -> None:
                async for _ in msg.text_stream:
                    pass

            await asyncio.gather(audio(), text())
            st.reply_done()

    async def _functions(self, ev: llm.GenerationCreatedEvent) -> None:
        assert self.session is not None
        async for call in ev.function_stream:
            request = llm.FunctionToolCall(name=call.name, arguments=call.arguments, call_id=call.call_id)
            result = await execute_function_call(request, self.tools)
            if result.fnc_call_out is None:
                self.state.error(f"the tool gave no output: {result.raw_exception!r}")
                continue
            ctx = self.session.chat_ctx.copy()
            ctx.items.append(result.fnc_call_out)
            await self.session.update_chat_ctx(ctx)
            await self._reply()

    async def _reply(self) -> None:
        assert self.session is not None
        try:
            await self.session.generate_reply()
        except llm.RealtimeError as exc:
            self.state.error(f"generate_reply: {exc}")

    async def send_text(self, text: str) -> None:
        assert self.session is not None
        ctx = self.session.chat_ctx.copy()
        ctx.add_message(role="user", content=text)
        await self.session.update_chat_ctx(ctx)
        self._spawn(self._reply())

    async def send_audio(self, pcm: bytes) -> None:
        assert self.session is not None
        self.session.push_audio(rtc.AudioFrame(pcm, 24000, 1, len(pcm) // 2))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.aclose()
        if self.model is not None:
            await self.model.aclose()
        for task in list(self.tasks):
            task.cancel()


if __name__ == "__main__":
    packages = ("livekit-agents", "livekit-plugins-openai", "livekit", "openai", "pydantic")
    versions = {p: importlib.metadata.version(p) for p in packages}
    run({"client": "livekit", "versions": versions}, LiveKitClient)
