"""``duplex serve --workers N`` (issue 45): real processes on one port, over loopback.
They share the port, one session limit and one ``/metrics``; a killed worker is replaced
while the other's sessions go on untouched; SIGTERM drains every worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.request

import pytest
import websockets

from duplex.app.clients.realtime import RealtimeClient
from lab.net import free_port
from tests.util import Child

# Light workers: the tests are about the processes, not the models.
LIGHT = ("--thinker", "echo", "--talker", "espeak", "--asr", "none", "--turn-model", "none",
         "--turn-detection", "server_vad")  # fmt: skip


async def supervisor(*flags: str) -> tuple[Child, int]:
    port = free_port()
    child = await Child.spawn([sys.executable, "-m", "duplex.app", "serve", "--port", str(port), *LIGHT, *flags])
    await child.printed("2 workers on", timeout=30)
    await child.printed_times("Duplex listening", 2, timeout=120)  # both workers
    return child, port


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return str(r.read().decode())


async def sessions_on_both(port: int, most: int = 40) -> tuple[dict[str, RealtimeClient], int]:
    """One session on each of the two workers (the kernel's hash decides where each
    lands: one on a worker that has one already is closed again), and how many were opened."""
    by: dict[str, RealtimeClient] = {}
    for opened in range(1, most + 1):
        c = await RealtimeClient.connect(port)
        worker = c.ws.response.headers["X-Duplex-Worker"]
        if worker in by:
            await c.close()
            continue
        by[worker] = c
        if len(by) == 2:
            return by, opened
    pytest.fail(f"{most} sessions all landed on {list(by)}")


def opened_total(port: int) -> float:
    line = next(ln for ln in get(port, "/metrics").splitlines() if ln.startswith("duplex_sessions_opened_total "))
    return float(line.split()[1])


async def test_two_workers_share_the_port_the_session_limit_and_the_metrics():
    child, port = await supervisor("--workers", "2", "--max-sessions", "4")
    try:
        both, opened = await sessions_on_both(port)
        # /metrics is every worker's: the sessions each worker counted, summed.
        assert opened_total(port) == opened
        await until_sessions(port, 2)
        assert json.loads(get(port, "/healthz"))["workers"] == 2
        more = [await RealtimeClient.connect(port) for _ in range(2)]  # the limit, wherever they land
        # One limit for the server: every further handshake is refused, whichever worker takes it.
        for _ in range(12):
            with pytest.raises(websockets.InvalidStatus) as refused:
                await RealtimeClient.connect(port)
            assert refused.value.response.status_code == 503
        await more.pop().close()
        await until_sessions(port, 3)
        again = await RealtimeClient.connect(port)  # a place is free again
        for c in [again, *more, *both.values()]:
            await c.close()
    finally:
        code = await child.stop()
    assert code == 0 and "Traceback" not in child.output, child.output


async def until_sessions(port: int, n: int) -> None:
    async with asyncio.timeout(10):
        while json.loads(await asyncio.to_thread(get, port, "/healthz"))["sessions"] != n:
            await asyncio.sleep(0.01)


async def test_a_killed_worker_is_replaced_and_the_others_sessions_go_on():
    child, port = await supervisor("--workers", "2")
    try:
        by, _ = await sessions_on_both(port)
        victim, survivor = sorted(by)
        os.kill(int(victim), signal.SIGKILL)
        with pytest.raises(websockets.ConnectionClosed) as closed:  # its session ends (no close frame: 1006)
            async with asyncio.timeout(10):
                while True:
                    await by[victim].recv()
        assert closed.value.rcvd is None and by[victim].ws.protocol.close_code == 1006
        await by[survivor].say("still here")  # the other worker's is untouched
        await child.printed("exited with status -9: replaced", timeout=10)
        await child.printed_times("Duplex listening", 3, timeout=120)
        landed: set[str] = set()
        for _ in range(40):  # new sessions reach the replacement too
            c = await RealtimeClient.connect(port)
            landed.add(c.ws.response.headers["X-Duplex-Worker"])
            await c.close()
            if len(landed - {victim, survivor}):
                break
        assert landed - {victim, survivor}, landed
        await by[survivor].close()
    finally:
        code = await child.stop()
    assert code == 0, child.output


async def test_sigterm_drains_every_worker_and_a_bad_configuration_stops_them_all():
    child, port = await supervisor("--workers", "2")
    by, _ = await sessions_on_both(port)
    child.proc.send_signal(signal.SIGTERM)
    for c in by.values():
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(30):
                while True:
                    await c.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert await child.stop() == 0
    shared = next(ln for ln in child.lines if "their metrics in" in ln).rsplit(" ", 1)[1].rstrip(")")
    assert shared.startswith("/") and not os.path.exists(shared)  # the workers' metrics files are gone
    bad = await Child.spawn(
        [sys.executable, "-m", "duplex.app", "serve", "--port", str(free_port()), "--workers", "2",
         "--talker", "openai"]
    )  # fmt: skip
    assert await asyncio.wait_for(bad.proc.wait(), 120) == 2  # it stops by itself, not restarting for ever
    await bad.stop()
    assert "--talker openai needs --tts-url" in bad.output
    assert sum("started (pid" in line for line in bad.lines) == 2, bad.output
