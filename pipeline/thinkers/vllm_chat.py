"""A thinker on a vLLM chat model in this process: the model's chat template makes the
prompt, the engine streams text, and cancelling aborts the engine request. It can
share its engine with the vLLM talker when both use the same checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from duplex.pipeline.talkers.vllm import LocalEngine
from duplex.pipeline.thinker import ThinkRequest


class VllmChatThinker:
    """Streams replies from an in-process vLLM engine."""

    name = "vllm"

    def __init__(
        self,
        engine: LocalEngine,
        *,
        system_prompt: str = "",
        temperature: float = 0.7,
        max_tokens: int = 256,
        sampling: dict[str, Any] | None = None,
        owns_engine: bool = True,
    ) -> None:
        self.engine = engine
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.sampling = sampling or {}
        self.owns_engine = owns_engine

    def prompt_ids(self, request: ThinkRequest) -> list[int]:
        msgs = [dict(m) for m in request.messages]
        if self.system_prompt and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        text = self.engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return list(self.engine.tokenizer.encode(text, add_special_tokens=False))

    async def think(self, request: ThinkRequest) -> AsyncIterator[str]:
        params = {"max_tokens": self.max_tokens, "temperature": self.temperature, **self.sampling, **request.options}
        async for text in self.engine.stream_text(self.prompt_ids(request), params, request.request_id):
            if text:
                yield text

    async def aclose(self) -> None:
        if self.owns_engine:
            await self.engine.close()
