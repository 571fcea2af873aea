"""The conformance suite's machinery: a recording WebSocket proxy, the client drivers'
processes, and the speech they send.

Each client talks to the real server through :class:`WireProxy`, a transparent relay
on loopback that records every event both ways (audio payloads reduced to their
length). The wire shows what a client sent (its session settings, its own
``conversation.item.truncate``, its ``function_call_output``) and everything the
server answered, for every client alike, including Pipecat, which exposes no raw
events. What the application saw comes from the driver (:class:`Driver`), a child
process that runs one client through its public API and reports as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import soxr
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from lab.voices import read_wav

MARK = "@@conformance "
# Request headers a client's handshake carries that the server may act on.
FORWARDED = {"authorization", "openai-beta", "user-agent", "origin", "api-key"}


@dataclass
class WireEvent:
    t: float
    sender: str
    """``client`` or ``server``."""
    event: dict[str, Any]


@dataclass
class Connection:
    """One client connection as the proxy relayed it."""

    tag: str
    path: str
    headers: dict[str, str]
    events: list[WireEvent] = field(default_factory=list)
    closed: str | None = None

    def sent(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Events the client sent (of type ``kind``)."""
        return [e.event for e in self.events if e.sender == "client" and kind in (None, e.event.get("type"))]

    def received(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Events the server sent (of type ``kind``)."""
        return [e.event for e in self.events if e.sender == "server" and kind in (None, e.event.get("type"))]


def _b64_len(text: str) -> int:
    return len(text) * 3 // 4 - text[-2:].count("=") if text else 0


def _summary(raw: str | bytes) -> dict[str, Any]:
    """The event, with base64 audio replaced by its decoded length (kept small)."""
    if isinstance(raw, bytes):
        return {"type": "<binary>", "bytes": len(raw)}
    try:
        event = json.loads(raw)
    except ValueError:
        return {"type": "<not json>", "text": raw[:200]}
    if not isinstance(event, dict):
        return {"type": "<not an object>"}
    kind = event.get("type")
    if kind in ("response.output_audio.delta", "response.audio.delta") and isinstance(event.get("delta"), str):
        event["delta_bytes"] = _b64_len(event.pop("delta"))
    elif kind == "input_audio_buffer.append" and isinstance(event.get("audio"), str):
        event["audio_bytes"] = _b64_len(event.pop("audio"))
    return event


class WireProxy:
    """Relays WebSocket connections to the server on ``upstream_port`` and records them.

    Runs its own event loop in a thread, so it relays while a test waits on a driver.
    Each connection is tagged with :attr:`tag` as it was when the connection opened
    (the tests run one check at a time and set the tag first).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.tag = ""
        self.connections: list[Connection] = []
        self.failures: list[str] = []
        self.port = 0
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wire-proxy", daemon=True)
        self._server: Server | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    async def _start(self) -> None:
        self._server = await serve(
            self._relay, "127.0.0.1", 0, max_size=None, compression=None, ping_interval=None, server_header=None
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def tagged(self, tag: str) -> list[Connection]:
        with self._cond:
            return [c for c in self.connections if c.tag == tag]

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds, re-checked at each relayed event."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def _record(self, conn: Connection, sender: str, raw: str | bytes) -> None:
        with self._cond:
            conn.events.append(WireEvent(time.monotonic(), sender, _summary(raw)))
            self._cond.notify_all()

    async def _relay(self, client: ServerConnection) -> None:
        request = client.request
        assert request is not None
        headers = {k: v for k, v in request.headers.raw_items() if k.lower() in FORWARDED}
        conn = Connection(self.tag, request.path, headers)
        with self._cond:
            self.connections.append(conn)
        try:
            async with connect(
                f"ws://127.0.0.1:{self.upstream_port}{request.path}",
                additional_headers=list(headers.items()),
                user_agent_header=None,
                max_size=None,
                compression=None,
                ping_interval=None,
            ) as server:
                await self._pump_both(conn, client, server)
        except Exception as exc:  # a refused handshake is a finding, not a proxy crash
            conn.closed = f"upstream: {type(exc).__name__}: {exc}"
            self.failures.append(f"{conn.tag}: {conn.closed}")
            await client.close(1011, "upstream failed")
        with self._cond:
            self._cond.notify_all()

    async def _pump_both(self, conn: Connection, client: ServerConnection, server: Any) -> None:
        async def pump(src: Any, dst: Any, sender: str) -> str:
            try:
                async for message in src:
                    self._record(conn, sender, message)
                    await dst.send(message)
            except ConnectionClosed:
                pass
            return f"{sender} closed ({src.close_code})"

        up = asyncio.create_task(pump(client, server, "client"))
        down = asyncio.create_task(pump(server, client, "server"))
        done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        conn.closed = next(iter(done)).result()
        code = client.close_code if up in done else server.close_code
        # Pass the close on with its code, as a direct connection would have seen it.
        await asyncio.gather(client.close(code or 1000), server.close(code or 1000), return_exceptions=True)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


class DriverDied(Exception):
    pass


class Driver:
    """A client driver process (``drivers/*_driver.py`` or ``node/driver.mjs``)."""

    def __init__(self, name: str, argv: list[str], cwd: Path, log: Path) -> None:
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.log = log
        self.hello: dict[str, Any] = {}
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._proc: subprocess.Popen[str] | None = None
        self._next_id = 0

    def start(self, timeout: float = 120.0) -> dict[str, Any]:
        log: IO[str] = open(self.log, "w")  # noqa: SIM115 (the process keeps it)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            self.argv, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env
        )
        threading.Thread(target=self._read, name=f"driver-{self.name}", daemon=True).start()
        self.hello = self._next(time.monotonic() + timeout, "its hello")["hello"]
        return self.hello

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(MARK):
                self._lines.put(json.loads(line[len(MARK) :]))
        self._lines.put(None)

    def _next(self, deadline: float, what: str) -> dict[str, Any]:
        try:
            msg = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"{self.name} driver: no answer ({what}) in time\n{self.stderr_tail()}") from None
        if msg is None:
            code = self._proc.wait(10) if self._proc else None
            raise DriverDied(f"{self.name} driver exited ({code}) while waiting for {what}\n{self.stderr_tail()}")
        return msg

    def call(
        self, request: dict[str, Any], timeout: float, on_event: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """Send a check request; pass its interim events to ``on_event``; return its report."""
        self._next_id += 1
        rid = self._next_id
        self.send({**request, "id": rid})
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline, f"the report of {request['check']}")
            if msg.get("id") != rid:
                continue
            if "event" in msg and on_event is not None:
                on_event(msg["event"])
            if "report" in msg:
                report: dict[str, Any] = msg["report"]
                return report

    def send(self, obj: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(obj) + "\n")
        self._proc.stdin.flush()

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "--- driver stderr (tail) ---\n" + "\n".join(text[-lines:])

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        assert self._proc.stdin is not None
        self._proc.stdin.close()  # the drivers exit when their input ends
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def pcm24k(wav: Path, out: Path) -> Path:
    """The WAV (16 kHz PCM16) as raw PCM16 at 24 kHz, what every client here sends."""
    samples, rate = read_wav(wav)
    resampled = soxr.resample(samples.astype(np.float32) / 32768.0, rate, 24000)
    out.write_bytes((np.clip(resampled, -1.0, 1.0) * 32767.0).astype("<i2").tobytes())
    return out
