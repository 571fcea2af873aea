"""``duplex serve`` as a user runs it: a real process, a real port, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import urllib.request

import websockets


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_starts_answers_and_closes_sessions_on_sigterm():
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", "serve", "--port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        async with asyncio.timeout(30):
            while b"listening" not in (line := await proc.stdout.readline()):
                assert line, "server exited before listening"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        assert json.loads(body)["status"] == "ok"
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime") as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(10):
                    await ws.recv()
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 1001  # going away
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_bad_port_is_a_clear_error(capsys):
    from app.__main__ import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["serve", "--port", str(s.getsockname()[1])]) == 1
    assert "cannot serve" in capsys.readouterr().err
