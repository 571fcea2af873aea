"""A thinker on a vLLM chat model in this process: the model's chat template makes the
prompt, the engine streams text, and cancelling aborts the engine request. It can
share its engine with the vLLM talker when both use the same checkpoint.

Function tools as vLLM's own server does them: a forced call (one named function,
or ``required``) is written under structured output, so even a small model emits a
valid call; with ``auto`` the model's text is read by one of vLLM's tool parsers
(``tool_parser``, Hermes' ``<tool_call>`` JSON by default), and what it says before
a call is spoken.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from duplex.pipeline.talkers.vllm import LocalEngine
from duplex.pipeline.thinker import ThinkRequest
from duplex.pipeline.tools import (
    ToolCallDelta,
    call_id,
    calls_allowed,
    chat_tools,
    forced_name,
    parameters,
    required_schema,
)


class VllmChatThinker:
    """Streams replies from an in-process vLLM engine."""

    name = "vllm"
    tools = True

    def __init__(
        self,
        engine: LocalEngine,
        *,
        system_prompt: str = "",
        temperature: float = 0.7,
        max_tokens: int = 256,
        sampling: dict[str, Any] | None = None,
        owns_engine: bool = True,
        tool_parser: str = "hermes",
    ) -> None:
        self.engine = engine
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.sampling = sampling or {}
        self.owns_engine = owns_engine
        self.tool_parser = tool_parser

    def prompt_ids(self, request: ThinkRequest) -> list[int]:
        msgs = [dict(m) for m in request.messages]
        if self.system_prompt and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        extra = {"tools": chat_tools(request.tools)} if calls_allowed(request.tools, request.tool_choice) else {}
        text = self.engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **extra)
        return list(self.engine.tokenizer.encode(text, add_special_tokens=False))

    async def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]:
        params: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            **self.sampling,
            **request.options,
        }
        ids = self.prompt_ids(request)
        rid = request.request_id
        if not calls_allowed(request.tools, request.tool_choice):
            async for text in self.engine.stream_text(ids, params, rid):
                if text:
                    yield text
            return
        from vllm.sampling_params import StructuredOutputsParams

        name = forced_name(request.tool_choice)
        if name is not None:  # the whole output is the call's arguments: stream them
            params.pop("allowed_token_ids", None)  # the schema decides what may be written
            schema = parameters(request.tools, name)
            params["structured_outputs"] = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
            yield ToolCallDelta(0, call_id(rid, 0), name)
            async for text in self.engine.stream_text(ids, params, rid):
                if text:
                    yield ToolCallDelta(0, call_id(rid, 0), name, text)
            return
        if request.tool_choice == "required":  # a list of calls, read when complete
            params.pop("allowed_token_ids", None)
            schema = required_schema(request.tools)
            params["structured_outputs"] = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
            written = "".join([t async for t in self.engine.stream_text(ids, params, rid)])
            for i, call in enumerate(_complete_calls(written)):
                yield ToolCallDelta(i, call_id(rid, i), call["name"], json.dumps(call["parameters"]))
            return
        async for piece in self._auto(ids, params, request):
            yield piece

    async def _auto(
        self, ids: list[int], params: dict[str, Any], request: ThinkRequest
    ) -> AsyncIterator[str | ToolCallDelta]:
        """Speak the text up to a call's start tag; read the calls after it with the parser."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        parser = ToolParserManager.get_tool_parser(self.tool_parser)(self.engine.tokenizer)
        tag: str = getattr(parser, "tool_call_start_token", "<tool_call>")
        held, calling = "", False
        async for text in self.engine.stream_text(ids, params, request.request_id):
            if calling:
                held += text
                continue
            held += text
            if tag in held:
                before, held = held.split(tag, 1)
                held = tag + held
                calling = True
                if before:
                    yield before
                continue
            keep = _partial(held, tag)  # a suffix that may begin the tag waits
            if len(held) > keep:
                yield held[: len(held) - keep]
                held = held[len(held) - keep :]
        if not calling:
            if held:
                yield held
            return
        chat = ChatCompletionRequest(model="duplex", messages=[], tools=chat_tools(request.tools))
        found = parser.extract_tool_calls(held, chat)
        for i, call in enumerate(found.tool_calls if found.tools_called else []):
            yield ToolCallDelta(
                i, call.id or call_id(request.request_id, i), call.function.name, call.function.arguments
            )

    async def start(self) -> None:
        """Nothing to check: its engine is started by whoever builds it (it may be the talker's)."""

    async def prefill(self, request: ThinkRequest) -> None:
        """Nothing read ahead (the endpoint caches what its requests read)."""

    async def aclose(self) -> None:
        if self.owns_engine:
            await self.engine.close()


def _partial(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that begins ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def _complete_calls(written: str) -> list[dict[str, Any]]:
    """The calls of a ``required`` answer (a JSON list of ``{"name", "parameters"}``):
    every complete one, should ``max_tokens`` have cut the list short."""
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    at = written.find("[") + 1
    while at > 0:
        at = len(written) - len(written[at:].lstrip(" ,\n\t"))
        try:
            call, at = decoder.raw_decode(written, at)
        except ValueError:
            break
        calls.append(call)
    if not calls:
        raise ValueError(f"the model wrote no complete function call within max_tokens: {written[:200]!r}")
    return calls
