"""What every Python client driver shares: the line protocol to pytest, a real-time
microphone, and waiting on the client's own events.

Standard library only: the openai-agents driver runs in its own virtual environment
(its websockets pin excludes the project's), without the project's packages.

Protocol: the driver writes lines ``@@conformance <json>`` to its standard output and
reads one JSON request a line from standard input. It says ``{"hello": {...versions}}``
once, then answers each ``{"id", "check", ...}`` with ``{"id", "report": {...}}``. A
check may say ``{"id", "event": ...}`` before its report and read commands meanwhile
(the defaults check waits for ``{"cmd": "finish"}``). Anything else a library prints
goes to standard error, so it cannot be taken for a protocol line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

MARK = "@@conformance "
RATE = 24000
"""Sample rate of the audio the drivers send (PCM16 mono, the Realtime default)."""
FRAME_MS = 20
"""A microphone frame: what a real capture callback delivers at a time."""

Report = dict[str, Any]
Handler = Callable[[dict[str, Any], "Control"], Awaitable[Report]]


class WaitTimeout(Exception):
    """A driver's bound ran out while it waited on the client: the message says for what."""


class Changes:
    """Wakes whoever waits for a condition on a client's state, at each client event.

    A driver's callbacks call :meth:`poke` whenever they record something; :meth:`until`
    re-checks its condition then. Nothing polls a clock: the timeout is a failure bound.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def poke(self) -> None:
        self._event.set()

    async def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(what)
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                if not predicate():
                    raise WaitTimeout(what) from None


class Mic:
    """A microphone in real time: 20 ms frames of silence, or of the speech queued with
    :meth:`say`, handed to ``send`` on a steady schedule (as a capture device would),
    from :meth:`start` until :meth:`stop`.

    The schedule is absolute (frame ``n`` is due at ``start + n * 20 ms``), so a loaded
    machine sends late frames back to back instead of drifting.
    """

    def __init__(self, send: Callable[[bytes], Awaitable[None]], changes: Changes | None = None) -> None:
        self._send = send
        self._changes = changes
        self._queue = bytearray()
        self._task: asyncio.Task[None] | None = None
        self.frames_sent = 0
        self.speech_done = 0
        """How many :meth:`say` utterances have been sent in full."""
        self._ends: list[int] = []
        self._sent_bytes = 0
        self.error: str | None = None

    @property
    def frame_bytes(self) -> int:
        return RATE * FRAME_MS // 1000 * 2

    def say(self, pcm: bytes, lead_silence_ms: int = 0) -> None:
        """Queue ``lead_silence_ms`` of silence, then ``pcm`` (PCM16 at 24 kHz)."""
        silence = bytes(RATE * lead_silence_ms // 1000 * 2)
        self._queue += silence + pcm
        self._ends.append(self._sent_bytes + len(self._queue))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        n = self.frame_bytes
        t0 = time.monotonic()
        try:
            while True:
                if self._queue:
                    frame = bytes(self._queue[:n]).ljust(n, b"\0")
                    del self._queue[:n]
                else:
                    frame = bytes(n)
                await self._send(frame)
                self._sent_bytes += n
                self.frames_sent += 1
                done = sum(1 for end in self._ends if end <= self._sent_bytes)
                if done != self.speech_done:
                    self.speech_done = done
                    if self._changes is not None:
                        self._changes.poke()
                delay = t0 + self.frames_sent * FRAME_MS / 1000 - time.monotonic()
                await asyncio.sleep(max(0.0, delay))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client refused audio: the check reports it
            self.error = f"{type(exc).__name__}: {exc}"
            if self._changes is not None:
                self._changes.poke()


def read_pcm(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Control:
    """A running check's line to pytest: say something before the report, or wait for
    a command."""

    def __init__(self, request_id: int, out: TextIO, commands: asyncio.Queue[dict[str, Any]]) -> None:
        self.request_id = request_id
        self._out = out
        self._commands = commands

    def emit(self, event: dict[str, Any]) -> None:
        _write(self._out, {"id": self.request_id, "event": event})

    async def command(self, timeout: float) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self._commands.get(), timeout)
        except TimeoutError:
            raise WaitTimeout("a command from pytest") from None


def _write(out: TextIO, obj: dict[str, Any]) -> None:
    out.write(MARK + json.dumps(obj) + "\n")
    out.flush()


def serve(hello: dict[str, Any], checks: dict[str, Handler]) -> None:
    """Run the driver: announce ``hello``, then answer requests until stdin closes."""
    # Keep the real stdout for the protocol; whatever else writes to fd 1 goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    asyncio.run(_serve(out, hello, checks))


async def _serve(out: TextIO, hello: dict[str, Any], checks: dict[str, Handler]) -> None:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def reader() -> None:
        for line in sys.stdin:
            if line.strip():
                loop.call_soon_threadsafe(lines.put_nowait, json.loads(line))
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=reader, daemon=True).start()
    _write(out, {"hello": hello})
    commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    requests: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def sort_lines() -> None:
        # Commands go to the running check; requests wait their turn.
        while True:
            line = await lines.get()
            if line is not None and "cmd" in line:
                commands.put_nowait(line)
            else:
                requests.put_nowait(line)
            if line is None:
                return

    sorter = asyncio.create_task(sort_lines())
    while True:
        request = await requests.get()
        if request is None:
            sorter.cancel()
            return
        while not commands.empty():  # stale commands from an earlier check
            commands.get_nowait()
        rid = int(request["id"])
        report = await _run_check(checks, request, Control(rid, out, commands))
        _write(out, {"id": rid, "report": report})


async def _run_check(checks: dict[str, Handler], request: dict[str, Any], control: Control) -> Report:
    handler = checks.get(request["check"])
    if handler is None:
        return {"crash": f"this driver has no check {request['check']!r}"}
    try:
        return await handler(request, control)
    except Exception:
        return {"crash": traceback.format_exc()}


class State:
    """What the client application saw, recorded from the client's own events and API."""

    def __init__(self) -> None:
        self.changes = Changes()
        self.errors: list[str] = []
        self.history: list[dict[str, Any]] = []
        """The client's history, as ``{"id", "role", "kind", "text"}`` (``kind``: message,
        function_call, function_call_output)."""
        self.replies: list[dict[str, Any]] = []
        """Replies with audio, in the order their audio began: ``{"key", "audio_bytes", "done"}``."""
        self.interruptions: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.soft_timeouts: list[str] = []
        self.notes: list[str] = []

    def error(self, text: str) -> None:
        self.errors.append(text)
        self.changes.poke()

    def audio(self, key: str, nbytes: int) -> None:
        """``nbytes`` of reply audio reached the application, for reply ``key``."""
        for r in self.replies:
            if r["key"] == key:
                r["audio_bytes"] += nbytes
                break
        else:
            self.replies.append({"key": key, "audio_bytes": nbytes, "done": False})
        self.changes.poke()

    def reply_done(self) -> None:
        """The client says the reply (the latest one with audio) is over."""
        for r in reversed(self.replies):
            if not r["done"]:
                r["done"] = True
                break
        self.changes.poke()

    def interrupted(self, name: str) -> None:
        self.interruptions.append(name)
        self.changes.poke()

    def tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        self.tool_calls.append({"name": name, "arguments": arguments})
        self.changes.poke()

    def set_history(self, items: list[dict[str, Any]]) -> None:
        self.history = items
        self.changes.poke()

    def texts(self, role: str) -> list[str]:
        return [i["text"] for i in self.history if i.get("role") == role and i.get("kind") == "message"]

    def reply_finished(self, index: int) -> bool:
        return len(self.replies) > index and bool(self.replies[index]["done"])

    def report(self, mic: Mic | None = None) -> Report:
        return {
            "errors": self.errors,
            "history": self.history,
            "replies": self.replies,
            "interruptions": self.interruptions,
            "tool_calls": self.tool_calls,
            "soft_timeouts": self.soft_timeouts,
            "notes": self.notes,
            "mic_error": mic.error if mic else None,
        }


class Client:
    """One third-party client, driven through its public API (each driver has one)."""

    state: State

    async def open(self, request: dict[str, Any]) -> None:
        """Connect with the client's defaults: the agent's instructions and the tool."""
        raise NotImplementedError

    async def send_text(self, text: str) -> None:
        """A typed user message, the way the client's application sends one."""
        raise NotImplementedError

    async def send_audio(self, pcm: bytes) -> None:
        """One microphone frame (PCM16, 24 kHz) into the client's audio input."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class Budget:
    """A check's overall failure bound, shared by its waits."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.1, self.deadline - time.monotonic())


async def _soft(state: State, predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """Wait a little for something that should follow at once; pytest judges its absence."""
    try:
        await state.changes.until(predicate, seconds, what)
    except WaitTimeout:
        state.soft_timeouts.append(what)


async def _finish(client: Client, mic: Mic | None, waits: Awaitable[None]) -> Report:
    """Run a check's waits, then close the client; the report says what timed out, if anything."""
    waiting_for = None
    try:
        await waits
    except WaitTimeout as exc:
        waiting_for = str(exc)
    if mic is not None:
        await mic.stop()
    try:
        await client.close()
    except Exception as exc:
        client.state.notes.append(f"close: {type(exc).__name__}: {exc}")
    report = client.state.report(mic)
    report["waiting_for"] = waiting_for
    return report


async def check_defaults(client: Client, request: dict[str, Any], control: Control) -> Report:
    """Connect with the defaults, tell pytest, and stay until it has seen the answers on the wire."""
    await client.open(request)
    control.emit({"connected": True})

    async def waits() -> None:
        await control.command(request["timeout"])

    return await _finish(client, None, waits())


async def check_text_audio(client: Client, request: dict[str, Any], control: Control) -> Report:
    budget = Budget(request["timeout"])
    st = client.state
    await client.open(request)
    await client.send_text(request["text"])

    async def waits() -> None:
        await st.changes.until(lambda: st.reply_finished(0), budget.left(), "the reply's audio and its end")
        await _soft(st, lambda: any(st.texts("assistant")), min(5.0, budget.left()), "assistant text in history")

    return await _finish(client, None, waits())


async def check_spoken_turn(client: Client, request: dict[str, Any], control: Control) -> Report:
    budget = Budget(request["timeout"])
    st = client.state
    await client.open(request)
    mic = Mic(client.send_audio, st.changes)
    mic.start()
    mic.say(read_pcm(request["speech"]), lead_silence_ms=500)

    async def waits() -> None:
        await st.changes.until(
            lambda: st.reply_finished(0) or mic.error is not None,
            budget.left(),
            "a reply (audio and its end) to the spoken turn",
        )
        await _soft(st, lambda: any(st.texts("user")), min(5.0, budget.left()), "the user's transcript in history")
        await _soft(st, lambda: any(st.texts("assistant")), min(5.0, budget.left()), "assistant text in history")

    return await _finish(client, mic, waits())


async def check_interruption(client: Client, request: dict[str, Any], control: Control) -> Report:
    budget = Budget(request["timeout"])
    st = client.state
    await client.open(request)
    mic = Mic(client.send_audio, st.changes)
    mic.start()
    await client.send_text(request["text"])
    after = RATE * 2 * request["interrupt_after_ms"] // 1000

    async def waits() -> None:
        await st.changes.until(
            lambda: bool(st.replies) and st.replies[0]["audio_bytes"] >= after,
            budget.left(),
            f"{request['interrupt_after_ms']} ms of the long reply's audio",
        )
        mic.say(read_pcm(request["speech"]))
        await st.changes.until(
            lambda: mic.speech_done >= 1 or mic.error is not None, budget.left(), "the interrupting speech to be sent"
        )
        # A later reply with real audio, ended: the answer to the interrupting turn. (Not
        # simply the second reply: a client may take stray audio for a reply of its own.)
        await st.changes.until(
            lambda: (
                any(r["done"] and r["audio_bytes"] >= request["min_audio_bytes"] for r in st.replies[1:])
                or mic.error is not None
            ),
            budget.left(),
            "the reply to the interrupting speech (audio and its end)",
        )
        await _soft(st, lambda: bool(st.interruptions), min(5.0, budget.left()), "the client's interruption event")
        await _soft(st, lambda: len(st.texts("user")) >= 2, min(5.0, budget.left()), "the interrupting turn in history")

    return await _finish(client, mic, waits())


async def check_tool(client: Client, request: dict[str, Any], control: Control) -> Report:
    budget = Budget(request["timeout"])
    st = client.state
    await client.open(request)
    await client.send_text(request["text"])

    async def waits() -> None:
        await st.changes.until(lambda: bool(st.tool_calls), budget.left(), "the tool handler to run")
        await st.changes.until(
            lambda: st.reply_finished(0), budget.left(), "a spoken reply (audio and its end) after the tool's output"
        )
        await _soft(st, lambda: any(st.texts("assistant")), min(5.0, budget.left()), "assistant text in history")

    return await _finish(client, None, waits())


def run(hello: dict[str, Any], make_client: Callable[[], Client]) -> None:
    """Serve the five checks, each on a fresh client session."""

    def bind(check: Callable[[Client, dict[str, Any], Control], Awaitable[Report]]) -> Handler:
        async def handler(request: dict[str, Any], control: Control) -> Report:
            return await check(make_client(), request, control)

        return handler

    serve(
        hello,
        {
            "defaults": bind(check_defaults),
            "text_audio": bind(check_text_audio),
            "spoken_turn": bind(check_spoken_turn),
            "interruption": bind(check_interruption),
            "tool": bind(check_tool),
        },
    )
