"""Drives the openai-agents SDK (``agents.realtime``, unmodified) for the conformance checks.

Runs in ``tests/conformance/.venv-agents``: openai-agents pins ``websockets<17`` and the
server needs 17 (see ``tests/conformance/install.sh``). The session is what an
application writes: a ``RealtimeAgent`` with instructions and a ``@function_tool``,
``RealtimeRunner(agent).run(model_config={"url": ...})``, then ``send_message``,
``send_audio`` and the session's event stream.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession
from common import Client, State, run


def _text(content: list[Any]) -> str:
    parts = [getattr(c, "text", None) or getattr(c, "transcript", None) or "" for c in content or []]
    return " ".join(p for p in parts if p)


def _item(item: Any) -> dict[str, Any]:
    if item.type == "message":
        return {"id": item.item_id, "role": item.role, "kind": "message", "text": _text(item.content)}
    if item.type == "function_call":
        return {
            "id": item.item_id,
            "role": None,
            "kind": "function_call",
            "name": item.name,
            "arguments": item.arguments,
            "output": item.output,
            "text": item.output or "",
        }
    return {"id": getattr(item, "item_id", None), "role": None, "kind": item.type, "text": ""}


class AgentsClient(Client):
    def __init__(self) -> None:
        self.state = State()
        self.session: RealtimeSession | None = None
        self.pump: asyncio.Task[None] | None = None
        self.items: dict[str, dict[str, Any]] = {}

    async def open(self, request: dict[str, Any]) -> None:
        st = self.state
        template = request["tool_result"]

        @function_tool
        def get_weather(city: str) -> str:
            """Get the current weather in a city."""
            st.tool_call("get_weather", {"city": city})
            return template.format(city=city)

        agent = RealtimeAgent(name="Assistant", instructions=request["instructions"], tools=[get_weather])
        self.session = await RealtimeRunner(agent).run(model_config={"url": request["url"], "api_key": "local"})
        await self.session.enter()
        self.pump = asyncio.create_task(self._pump(self.session))

    async def _pump(self, session: RealtimeSession) -> None:
        st = self.state
        async for ev in session:
            if ev.type == "audio":
                st.audio(ev.item_id, len(ev.audio.data))
            elif ev.type == "agent_end":
                st.reply_done()
            elif ev.type == "audio_interrupted":
                st.interrupted("audio_interrupted")
            elif ev.type == "error":
                st.error(f"error event: {ev.error}")
            elif ev.type == "raw_model_event" and ev.data.type == "exception":
                st.error(f"exception event: {ev.data.exception!r} ({ev.data.context})")
            elif ev.type == "history_updated":
                st.set_history([_item(i) for i in ev.history])
            elif ev.type == "history_added":
                entry = _item(ev.item)
                rest = [i for i in st.history if i["id"] != entry["id"]]
                st.set_history([*rest, entry])

    async def send_text(self, text: str) -> None:
        assert self.session is not None
        await self.session.send_message(text)

    async def send_audio(self, pcm: bytes) -> None:
        assert self.session is not None
        await self.session.send_audio(pcm)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.pump is not None:
            self.pump.cancel()


if __name__ == "__main__":
    versions = {p: importlib.metadata.version(p) for p in ("openai-agents", "openai", "websockets", "pydantic")}
    run({"client": "openai-agents", "versions": versions}, AgentsClient)
