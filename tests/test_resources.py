"""Every bound holds its resource: after each attack the server's memory and tasks
return to where they were.

``duplex serve`` runs in its own process (so its memory is its own); each test
attacks one bound, lets the attacker go, and reads the server's RSS and asyncio
task count (``/metrics``) until they are back within 10 MiB and at the baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.sounds import noise
from duplex.app.harness.procs import rss_kib
from duplex.app.harness.servers import ServerProcess

SLACK_KIB = 10 * 1024


def _tasks(server: ServerProcess) -> int:
    found = re.search(r"^duplex_tasks (\S+)", server.http("/metrics").decode(), re.M)
    assert found is not None
    return int(float(found.group(1)))


def _sessions(server: ServerProcess) -> int:
    found = re.search(r"^duplex_sessions (\S+)", server.http("/metrics").decode(), re.M)
    assert found is not None
    return int(float(found.group(1)))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served() -> AsyncIterator[tuple[ServerProcess, int, int]]:
    """The server, warmed up by one ordinary conversation, and its baseline RSS and tasks."""
    server = ServerProcess()
    await asyncio.to_thread(server.start)
    try:
        c = await RealtimeClient.connect(server.port)
        await c.update(pacing={"enabled": False})
        await c.say("warm up")
        await c.send("response.create")
        await c.until("response.done")
        await c.close()
        await _hear(server)  # the recogniser's working memory is allocated on first use
        await _settled(server)
        yield server, rss_kib(server.pid), _tasks(server)
    finally:
        server.stop()


async def _hear(server: ServerProcess) -> None:
    """Recognise a few committed turns from three sessions at once (as the attacks do), to their results."""
    clients = [await RealtimeClient.connect(server.port) for _ in range(3)]
    for c in clients:
        await c.update(turn_detection=None)
        for _ in range(3):
            await c.append(noise(1.0, level=2000))
            await c.send("input_audio_buffer.commit")
    done = (
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.input_audio_transcription.failed",
    )
    for c in clients:
        heard = 0
        while heard < 3:
            heard += (await c.recv())["type"] in done
        await c.close()


async def _settled(server: ServerProcess) -> None:
    """Until the server has let every session go (and trimmed its heap after them)."""
    async with asyncio.timeout(30):
        while await asyncio.to_thread(_sessions, server):
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # the heap is trimmed half a second after the last session


async def _back(server: ServerProcess, rss0: int, tasks0: int) -> None:
    await _settled(server)
    rss, tasks = rss_kib(server.pid), await asyncio.to_thread(_tasks, server)
    assert tasks <= tasks0, f"tasks {tasks0} -> {tasks}"
    assert rss - rss0 < SLACK_KIB, f"RSS {rss0 // 1024} -> {rss // 1024} MiB"


pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_unsent_bytes(served):
    server, rss0, tasks0 = served
    for _ in range(2):  # pingers that never read, until the server drops each
        ws = await websockets.connect(server.url)
        ws.transport.pause_reading()
        with contextlib.suppress(OSError, websockets.ConnectionClosed):
            for n in range(400_000):
                ws.protocol.send_ping(struct.pack("!Q", n) * 15)
                ws.send_data()
                if n % 200 == 0:
                    await asyncio.sleep(0.001)
                    if ws.transport.is_closing():
                        break
        ws.transport.abort()
    await _back(server, rss0, tasks0)


async def test_inbound_messages(served):
    server, rss0, tasks0 = served
    big = (
        '{"type":"conversation.item.create","item":{"type":"message","role":"user","content":'
        '[{"type":"input_text","text":"' + "x" * (1900 * 1024) + '"}]}}'
    )
    clients = [await RealtimeClient.connect(server.port) for _ in range(3)]
    for c in clients:
        c.ws.transport.pause_reading()  # the errors pile up unread while they send
        for _ in range(12):
            await c.send_raw(big)
    for c in clients:
        c.ws.transport.abort()
    await _back(server, rss0, tasks0)


async def test_queued_recognitions(served):
    server, rss0, tasks0 = served
    babble = noise(1.0, level=2000)
    clients = [await RealtimeClient.connect(server.port) for _ in range(3)]
    for c in clients:
        await c.update(turn_detection=None)
        for _ in range(8):
            await c.append(babble)
            await c.send("input_audio_buffer.commit")
    await clients[-1].until("input_audio_buffer.committed")
    for c in clients:
        c.ws.transport.abort()
    await _back(server, rss0, tasks0)


async def test_the_conversation(served):
    server, rss0, tasks0 = served
    c = await RealtimeClient.connect(server.port)
    text = "y" * 30_000
    while True:
        await c.send(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        )
        event = await c.recv()
        while event["type"] not in ("conversation.item.added", "error"):
            event = await c.recv()
        if event["type"] == "error":
            assert event["error"]["code"] == "conversation_full"
            break
    await c.close()
    await _back(server, rss0, tasks0)
