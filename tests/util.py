"""Test helpers that wait on conditions, never on the clock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.simulated import SimulatedClient
from duplex.app.core.protocol import REALTIME_PATH


def ws_url(port: int, query: str = "") -> str:
    """The Realtime WebSocket URL of a server on a loopback port."""
    return f"ws://127.0.0.1:{port}{REALTIME_PATH}{query}"


def text_item(text: str, **extra: object) -> dict[str, object]:
    """A user message item of ``text`` (the shape of ``conversation.item.create``)."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}], **extra}


async def start_reply(sim: SimulatedClient, text: str) -> str:
    """Type ``text`` as the user's, ask for the reply, and return its response id once
    everything sent so far has taken effect."""
    await sim.send("conversation.item.create", item=text_item(text))
    await sim.send("response.create")
    await sim.sync()
    return str(sim.of_type("response.created")[-1].event["response"]["id"])


async def until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Yield to the loop until ``predicate()`` holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)
    assert predicate(), what


def gate(pool: Any, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make every piece ``pool`` synthesises wait until the returned event is set: the
    fault injected is a busy CPU, a piece that takes as long as the test says."""
    hold, real = threading.Event(), pool._make
    monkeypatch.setattr(pool, "_make", lambda job: (hold.wait(60), real(job))[1])
    return hold


@dataclass
class LoopStep:
    """The longest step the event loop took: its thread's CPU seconds, and what ran."""

    cpu_s: float = 0.0
    what: str = ""


@contextlib.contextmanager
def longest_loop_step() -> Iterator[LoopStep]:
    """Measure every callback the event loop runs meanwhile in the loop thread's CPU
    time, which another process on the machine does not stretch as it does wall time."""
    longest = LoopStep()
    run = asyncio.Handle._run

    def timed(handle: asyncio.Handle) -> None:
        start = time.thread_time()
        run(handle)
        took = time.thread_time() - start
        if took > longest.cpu_s:
            longest.cpu_s, longest.what = took, repr(handle)[:200]

    asyncio.Handle._run = timed  # type: ignore[method-assign]
    try:
        yield longest
    finally:
        asyncio.Handle._run = run  # type: ignore[method-assign]


def stage_tasks() -> list[asyncio.Task[Any]]:
    """Reply stage tasks still alive in this loop."""
    return [
        t
        for t in asyncio.all_tasks()
        if t.get_name().startswith(("thinker:", "talker:", "vocoder:", "writer:", "sink:")) and not t.done()
    ]


def need(ok: bool, reason: str, *, extra: str | None = None) -> None:
    """Skip (saying why) when an optional part is missing; fail instead where CI
    sets DUPLEX_REQUIRE_ALL=1, so CI never passes by skipping, unless the part is an
    optional extra CI installs later and names in DUPLEX_OPTIONAL (e.g. ``vllm``)."""
    if ok:
        return
    optional = os.environ.get("DUPLEX_OPTIONAL", "").split(",")
    if os.environ.get("DUPLEX_REQUIRE_ALL") == "1" and (extra is None or extra not in optional):
        pytest.fail(f"required for this run: {reason}")
    pytest.skip(reason)


LONG_ANSWER_TOKENS = 1500
"""A thinker's long answer: seconds of writing even where the tiny model is fast (at 300
tokens CI's endpoint finished in 1.1 s, and its first audio came 2 ms after the last
token once)."""


async def ask_for_a_long_answer(port: int) -> tuple[RealtimeClient, dict[str, Any]]:
    """Ask a thinker-backed server a question (pacing off) and wait for the whole reply:
    the open client (its events kept) and the ``response.done`` response."""
    c = await RealtimeClient.connect(port)
    await c.update(pacing={"enabled": False}, instructions="Answer in gibberish.")
    await c.say("what is the weather like")
    await c.send("response.create")
    return c, (await c.until("response.done"))["response"]


def assert_spoken_while_thinking(srv: Any, done: dict[str, Any]) -> None:
    """The reply's first audio went out before its thinker had finished (the failure
    says every timing, what the session waited for its loop share, and what was said)."""
    timings, said = done["timings"], done["output"][0]["content"][0]["transcript"]
    why = f"{timings}; the session waited {srv.loop_share.waited:.3f} s for its share; said {said[:80]!r}"
    assert timings["first_audio"] < timings["thinker_done"], why


async def asked_while_listening(port: int, text: str) -> SimulatedClient:
    """A microphone client (no automatic reply to its turns) that typed ``text`` and
    asked for the answer: for barge-in tests that then talk over the reply."""
    sim = await SimulatedClient.open(port)
    await sim.send("session.update", session={"turn_detection": {"type": "server_vad", "create_response": False}})
    await sim.silence(0.5)
    await sim.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )
    await sim.send("response.create")
    await sim.sync()
    return sim


# A tool whose one argument the schema enumerates: under structured output even a random
# model writes a valid call (the vLLM tool tests).
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


class Child:
    """A child process whose merged output is read as it comes (so it never blocks on
    a full pipe) and kept, for readiness and for failure messages."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._marks: dict[str, asyncio.Event] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, args: Sequence[str], env: dict[str, str] | None = None) -> Child:
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode(errors="replace").rstrip())
            for mark, seen in self._marks.items():
                if mark in self.lines[-1]:
                    seen.set()

    @property
    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    async def printed(self, mark: str, timeout: float) -> None:
        """Wait until a line with ``mark`` is printed; fail if the process ends first."""
        seen = self._marks.setdefault(mark, asyncio.Event())
        if any(mark in line for line in self.lines):
            return
        waiting, ended = asyncio.ensure_future(seen.wait()), asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({waiting, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            ended.cancel()
        if not seen.is_set():
            await asyncio.wait({self._reader}, timeout=5)  # the last words of a process that ended
            pytest.fail(f"{mark!r} not printed in {timeout:g} s (exit status {self.proc.returncode}):\n{self.output}")

    async def printed_times(self, mark: str, n: int, timeout: float) -> None:
        """Wait until lines with ``mark`` have been printed ``n`` times."""
        async with asyncio.timeout(timeout):
            while sum(mark in line for line in self.lines) < n:
                seen = self._marks.setdefault(mark, asyncio.Event())
                seen.clear()
                if sum(mark in line for line in self.lines) >= n or self.proc.returncode is not None:
                    break
                await seen.wait()
        assert sum(mark in line for line in self.lines) >= n, f"{mark!r} not printed {n} times:\n{self.output}"

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await asyncio.wait({self._reader}, timeout=5)
        self._reader.cancel()
        assert self.proc.returncode is not None
        return self.proc.returncode
