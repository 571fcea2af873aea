"""The default thinker: a chat model in this process, on ik_llama.cpp (:mod:`~duplex.pipeline.thinkers.engine`).

The engine's slots decode several conversations at once (continuous batching), each
slot keeps the prompt it last saw in its cache, and the model's own chat template
makes the prompt (:mod:`~duplex.pipeline.thinkers.chatml`; function tools:
:mod:`~duplex.pipeline.thinkers.calls`). Requests go to it as OpenAI-style chat
completions (llama.cpp server's fields), which block their calling thread (not the GIL)
and stream chunks to a callback; the callback hands them to the event loop and, once the
reply is cancelled, the engine stops it at its next step.

A conversation keeps its slot while there are enough of them, so each turn only
evaluates what is new since the last (the user's words; the prefix is cached), and
two requests of one conversation never run at once (a prepared reply and the turn's
own wait for each other instead of splitting the cache). Nothing listens on any port.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from duplex.pipeline.niceness import built_at
from duplex.pipeline.thinker import Message, ThinkRequest
from duplex.pipeline.thinkers.calls import (
    CALL_PROBABILITY,
    TOP_TOKENS,
    CallReader,
    call_grammar,
    call_probability,
    tools_prompt,
    written_call,
)
from duplex.pipeline.thinkers.chat_models import DEFAULT_MODEL, ProgressBar, cache_dir, resolve
from duplex.pipeline.thinkers.engine import Engine, lane_count
from duplex.pipeline.thinkers.said import Speakable
from duplex.pipeline.thinkers.slots import Slots, fit_context
from duplex.pipeline.tools import ToolCallDelta, calls_allowed

log = logging.getLogger("duplex.thinker")

SPEECH_PROMPT = (
    "You are a helpful voice assistant. Your answers are spoken aloud, so answer in one or two short "
    "sentences of plain speech: no markdown, no lists, no emoji; say numbers and units as a person would "
    "say them. Answer general knowledge, everyday advice and arithmetic directly. If you have never heard "
    "of a place, person, event or thing, or the question is about the user's own life, say \"I don't know\" "
    "and nothing else; never invent names, dates or numbers."
)
"""The system prompt a session's instructions are added to: the reply is heard, not read."""

WAITING = "One moment. "
"""Said first by a reply that must wait for a slot (beyond ``slots`` at once replies queue, and say so)."""

PREFILLS_BESIDE = 2
"""Requests in flight beyond which reading ahead waits: replies being spoken come first."""

TEMPERATURE = 0.2
"""Low: a small model answers facts more reliably (scripts/bench_answers.py --set dev). A
tool's result is read back at 0, not improvised on (at 0.2, now and then "I don't know")."""

NICE = 0
"""The engine's threads run at the listening's priority: at nice 5 first audio came ~0.1 s
later, and at 0 a barge-in is heard as soon as with the echo (docs/benchmarks-history.md, "Nice 0")."""


class LocalChatThinker:
    """Streams replies from a GGUF chat model run by llama.cpp in this process."""

    name = "local"
    tools = True

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        slots: int = 4,
        context: int = 4096,
        threads: int = 2,
        system_prompt: str = SPEECH_PROMPT,
        temperature: float = TEMPERATURE,
        max_tokens: int = 256,
        extra_body: dict[str, Any] | None = None,
        cache: Path | None = None,
        nice: int = NICE,
    ) -> None:
        if min(slots, threads) < 1 or context < 256:
            raise ValueError("a local chat model needs at least 1 slot, 1 thread and a context of 256 tokens")
        self.model = model
        self.slots = slots
        self.context = context
        self.threads = threads
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = extra_body or {}
        self.cache = cache
        self.nice = nice
        self.path: Path | None = None
        self._server: Any = None
        """The :class:`Engine` (a test may stand in for it)."""
        self._pool = ThreadPoolExecutor(max_workers=2 * slots, thread_name_prefix="llama")
        self._slots = Slots(slots, lane_count(threads, slots))
        self._running: dict[str, tuple[threading.Event, asyncio.Future[Any]]] = {}
        """Conversation -> its request in flight: how to stop it, and its end."""
        self._inflight: set[tuple[threading.Event, Future[Any]]] = set()
        """Every call into llama.cpp not yet returned (closing waits for them)."""
        self._halted: set[str] = set()
        """Requests whose stream a newer request of their conversation (or the close) stopped."""
        self.last_timings: dict[str, Any] = {}
        """llama.cpp's own timings of the latest finished reply (prompt and generated tokens, ms)."""

    async def start(self) -> None:
        """Join and check the weights (once), then load the model and warm it."""
        label = f"joining {self.model}"
        self.path = await asyncio.to_thread(resolve, self.model, self.cache or cache_dir(), ProgressBar(label))
        self._server = await asyncio.to_thread(built_at, self.nice, self._build, "llama-load")
        # The speech prompt read into the first slot before the server is ready (a fresh
        # server's first answer came 15.6 s late, the prompt read cold beside Whisper).
        msgs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": "Hello."}]
        await self._call(self._server.handle_chat_completions, {"messages": msgs, "max_tokens": 0, "id_slot": 0})

    def _call(self, fn: Any, *args: Any, stop: threading.Event | None = None) -> asyncio.Future[Any]:
        """``fn(*args)`` on a llama thread, tracked until it returns (whichever loop awaits it)."""
        call = (stop or threading.Event(), self._pool.submit(fn, *args))
        self._inflight.add(call)
        call[1].add_done_callback(lambda _: self._inflight.discard(call))
        return asyncio.wrap_future(call[1])

    def _build(self) -> Engine:
        assert self.path is not None
        return Engine(str(self.path), slots=self.slots, context=self.context, threads=self.threads)

    def messages(self, request: ThinkRequest) -> list[Message]:
        """The request's messages with the speech prompt first (the session's
        instructions, its own system message, come after it)."""
        msgs = [dict(m) for m in request.messages]
        own = str(msgs.pop(0).get("content") or "").strip() if msgs and msgs[0]["role"] == "system" else ""
        parts = [self.system_prompt, own]
        if calls_allowed(request.tools, request.tool_choice):
            parts.append(tools_prompt(request.tools))
        system = "\n\n".join(p for p in parts if p)
        if system:
            msgs.insert(0, {"role": "system", "content": system})
        return fit_context(msgs, self.context - self.max_tokens)

    def body(self, request: ThinkRequest, slot: int | None) -> dict[str, Any]:
        """The chat-completions request for ``request`` (llama.cpp's fields included)."""
        msgs = self.messages(request)
        body: dict[str, Any] = {
            "messages": msgs,
            "stream": True,
            "temperature": 0.0 if msgs and msgs[-1]["role"] == "tool" else self.temperature,
            "max_tokens": self.max_tokens,
            "cache_prompt": True,
            **self.extra_body,
            **request.options,
        }
        if slot is not None:
            body["id_slot"] = slot
        return body

    async def think(self, request: ThinkRequest) -> AsyncIterator[str | ToolCallDelta]:
        if self._server is None:
            raise RuntimeError("the local chat model is not started")
        key = request.conversation
        began = time.monotonic()
        if key and (previous := self._running.get(key)) is not None:
            # A conversation needs only its newest request (a prepared reply the turn did
            # not take, a cancelled one): stop the last and let it leave the slot first.
            previous[0].set()
            await asyncio.shield(previous[1])
        slot = self._slots.of(key)
        body = self.body(request, slot)
        if self._slots.busy_for(slot, key):
            # Every slot is answering someone: this reply waits its turn, and says so.
            log.info("%s waits for slot %s (%d answering)", request.request_id, slot, self._slots.answering)
            yield WAITING
        spoke = False
        try:
            async for out in self._answer(request, body, key, began):
                spoke = True
                yield out
            if not spoke and request.request_id not in self._halted:
                # An empty reply (seen after a tool's result, and on a prepared reply's words
                # cut mid-question): asked once more, its end not allowed before a first token.
                # The cache is kept: read afresh, a prompt with the tools took 6-7 s beside
                # three other conversations. Not a reply a newer one stopped before its first
                # word (a prepared reply its turn did not take): asked again, it read the whole
                # conversation afresh while the turn's own reply waited behind it (5-10 s).
                log.warning("%s: the model said nothing; asking again", request.request_id)
                async for out in self._answer(request, {**body, "min_tokens": 1}, key, began):
                    yield out
        finally:
            self._halted.discard(request.request_id)

    async def _answer(
        self, request: ThinkRequest, body: dict[str, Any], key: str, began: float
    ) -> AsyncIterator[str | ToolCallDelta]:
        """One reply: its words as they become speakable, or the call it makes."""
        tools = request.tools if calls_allowed(request.tools, request.tool_choice) else ()
        forced = bool(tools) and request.tool_choice != "auto"
        if tools and not forced:
            body["logprobs"], body["top_logprobs"] = True, TOP_TOKENS  # whether it begins a call
        written = CallReader(tools, request.request_id)
        clean = Speakable()
        decided = not tools or forced  # whether a call comes is known
        while True:
            if forced:
                body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
                body["grammar"] = call_grammar(tools, request.tool_choice)
            text: list[str] = []
            async for chunk in self._stream(body, key, request.request_id, began):
                if not decided and (p := call_probability(chunk)) is not None:
                    decided = True
                    log.debug("%s: a call at %.3f", request.request_id, p)
                    if p >= CALL_PROBABILITY:
                        forced = True  # its own first token says a call: write it under the tools' grammar
                        break
                for piece in _text(chunk):
                    if forced:
                        text.append(piece)
                        continue
                    if said := clean.feed(written.feed(piece)):
                        yield said
            else:
                break
        if forced and text:
            yield written_call("".join(text), request.request_id)
            return
        for held in written.finish():
            out = clean.feed(held) if isinstance(held, str) else held
            if out:
                yield out
        if rest := clean.flush():
            yield rest

    async def _stream(
        self, body: dict[str, Any], key: str, request_id: str, began: float
    ) -> AsyncIterator[dict[str, Any]]:
        """One request's chunks, as llama.cpp streams them; it stops when this is closed."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def on_chunk(chunk: dict[str, Any]) -> bool:
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)
            return stop.is_set()

        def run() -> None:
            try:
                result = self._server.handle_chat_completions(body, on_chunk, stop)
                if isinstance(result, dict) and "error" in result:
                    loop.call_soon_threadsafe(chunks.put_nowait, _error(result))
            except BaseException as exc:  # raised on the event loop's side
                loop.call_soon_threadsafe(chunks.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(chunks.put_nowait, None)

        waited = time.monotonic() - began
        running = (stop, self._call(run, stop=stop))
        slot = body.get("id_slot")
        if key:
            self._running[key] = running
            self._slots.started(slot, key)
            running[1].add_done_callback(lambda _: self._slots.ended(slot, key))
        timings: dict[str, Any] = {}
        try:
            while (chunk := await chunks.get()) is not None:
                if isinstance(chunk, BaseException):
                    raise chunk
                if "error" in chunk:
                    raise _error(chunk)
                if "timings" in chunk:
                    timings = self.last_timings = chunk["timings"]
                yield chunk
            if stop.is_set():
                self._halted.add(request_id)
        finally:
            stop.set()  # llama.cpp stops at its next token; a cancel does not wait for it
            if key and self._running.get(key) is running:
                del self._running[key]
            log.debug(
                "%s in slot %s: waited %.0f ms, prompt %s tokens (%s cached) in %s ms, %s tokens%s",
                request_id,
                body.get("id_slot"),
                waited * 1000,
                timings.get("prompt_n"),
                timings.get("cache_n"),
                timings.get("prompt_ms"),
                timings.get("predicted_n"),
                ", a call" if "grammar" in body else "",
            )

    async def prefill(self, request: ThinkRequest) -> None:
        """Evaluate the request's prompt into its conversation's slot, answering nothing and
        without the assistant's header (the words so far are not the turn's last: a header
        after them is read in vain); skipped while the conversation has a request running."""
        key = request.conversation
        if self._server is None or not key or key in self._running or len(self._running) >= PREFILLS_BESIDE:
            return
        body = {**self.body(request, self._slots.of(key)), "stream": False, "max_tokens": 0}
        body["add_generation_prompt"] = False  # (3 tokens a read-ahead, beside recognition)
        stop = threading.Event()
        running = (stop, self._call(self._server.handle_chat_completions, body, None, stop, stop=stop))
        self._running[key] = running
        try:
            result = await asyncio.shield(running[1])
            timings = result.get("timings", {}) if isinstance(result, dict) else {}
            read = [body.get("id_slot"), *(timings.get(k) for k in ("prompt_n", "cache_n", "prompt_ms"))]
            said = body["messages"][-1]["content"][-60:]
            log.debug("%s in slot %s: prompt %s tokens (%s cached) in %s ms: %r", request.request_id, *read, said)
        finally:
            if self._running.get(key) is running:
                del self._running[key]

    async def idle(self) -> None:
        """Wait until every call into llama.cpp has returned (a cancelled reply's too)."""
        await asyncio.gather(*(asyncio.wrap_future(f) for _, f in list(self._inflight)), return_exceptions=True)

    def counters(self) -> dict[str, float]:
        """The engine's counters (``tokens_predicted_total``, ``prompt_tokens_total``, ...)."""
        if self._server is None:
            return {}
        out = {}
        for line in str(self._server.handle_metrics()).splitlines():
            if line.startswith("llamacpp:"):
                name, _, value = line.partition(" ")
                out[name.removeprefix("llamacpp:")] = float(value)
        return out

    async def aclose(self) -> None:
        for stop, _ in self._inflight:
            stop.set()  # at the engine's next step
        engine, self._server = self._server, None
        if engine is not None:
            await asyncio.to_thread(engine.close)  # what is still in flight ends with an error
        self._pool.shutdown(wait=False, cancel_futures=True)


def _error(chunk: dict[str, Any]) -> RuntimeError:
    err = chunk.get("error")
    message = err.get("message") if isinstance(err, dict) else err
    return RuntimeError(f"the local chat model refused the request: {message or json.dumps(chunk)[:200]}")


def _text(chunk: dict[str, Any]) -> list[str]:
    """The text one streamed chunk adds."""
    choices = chunk.get("choices") or []
    content = (choices[0].get("delta") or {}).get("content") if choices else None
    return [str(content)] if content else []
