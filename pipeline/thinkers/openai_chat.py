"""A thinker on any OpenAI-compatible ``/v1/chat/completions`` streaming endpoint
(``vllm serve``, llama.cpp's server and others). Cancelling closes the HTTP
stream; vLLM aborts a request whose client has gone. Function tools go to the
endpoint as chat-completions tools; its streamed ``tool_calls`` come back as
:class:`ToolCallDelta` pieces (``vllm serve`` forces a named or required call
with structured output; ``auto`` needs its ``--enable-auto-tool-choice``)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from duplex.pipeline.openai_http import check_model, reason
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.tools import ToolCallDelta, calls_allowed, chat_tool_choice, chat_tools


class OpenAIChatThinker:
    """Streams replies from a chat-completions endpoint."""

    name = "openai"
    tools = True

    def __init__(
        self,
        url: str,
        model: str,
        *,
        system_prompt: str = "",
        temperature: float = 0.7,
        max_tokens: int = 256,
        extra_body: dict[str, Any] | None = None,
        api_key: str = "local",
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = extra_body or {}
        self._client = httpx.AsyncClient(
            base_url=self.url, timeout=httpx.Timeout(120.0, connect=5.0), headers={"Authorization": f"Bearer {api_key}"}
        )

    async def start(self) -> None:
        """Check the endpoint answers and serves the model (see :mod:`~duplex.pipeline.openai_http`)."""
        await check_model(self._client, self.model, f"the chat endpoint {self.url}")

    def messages(self, request: ThinkRequest) -> list[dict[str, Any]]:
        msgs = [dict(m) for m in request.messages]
        if self.system_prompt and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return msgs

    async def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages(request),
            "stream": True,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
            **request.options,
        }
        if calls_allowed(request.tools, request.tool_choice):
            body["tools"] = chat_tools(request.tools)
            body["tool_choice"] = chat_tool_choice(request.tool_choice)
        calls: dict[int, tuple[str, str]] = {}  # index -> (call id, name), as the stream names them
        async with self._client.stream(
            "POST", "/v1/chat/completions", json=body, headers={"X-Request-Id": request.request_id}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"chat endpoint answered {response.status_code}: {reason(response)}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:]).get("choices") or []
                if not choices:
                    continue
                delta = choices[0].get("delta") or {}
                if delta.get("content"):
                    yield delta["content"]
                for call in delta.get("tool_calls") or []:
                    piece = _call_piece(call, calls, request.request_id)
                    if piece is not None:
                        yield piece
        # Leaving the block (a cancel included) closes the stream: the server aborts.

    async def running(self) -> int:
        """Requests the endpoint is running now (vLLM's metrics), for tests and benchmarks."""
        r = await self._client.get("/metrics")
        m = re.search(r"^vllm:num_requests_running\{[^}]*\}\s+([0-9.e+]+)", r.text, re.M)
        return int(float(m.group(1))) if m else 0

    async def prefill(self, request: ThinkRequest) -> None:
        """Nothing read ahead (the endpoint caches what its requests read)."""

    async def aclose(self) -> None:
        await self._client.aclose()


def _call_piece(call: dict[str, Any], calls: dict[int, tuple[str, str]], request_id: str) -> ToolCallDelta | None:
    """One streamed ``tool_calls`` entry as a call piece: the first names the call."""
    index = int(call.get("index", 0))
    fn = call.get("function") or {}
    if index not in calls:
        calls[index] = (call.get("id") or f"call_{request_id[-10:]}_{index}", fn.get("name") or "")
    call_id, name = calls[index]
    if not name and fn.get("name"):
        calls[index] = (call_id, fn["name"])
    return ToolCallDelta(index, *calls[index], fn.get("arguments") or "")
