"""The hearing budget: what listening to real-time microphones costs the event loop,
measured; new sessions refused beyond it, the newest streaming one closed well beyond it.
The measure is driven on a clock given by the test; the server's part over real WebSockets."""

from __future__ import annotations

import asyncio
import time

import pytest
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.sounds import noise
from duplex.app.core.session import Session
from duplex.app.edge.hearing import HearingLoad
from tests.util import until, ws_url


def test_the_load_is_loop_seconds_per_second_decaying_with_time():
    h = HearingLoad(admit_below=0.3, shed_above=0.45, settle_s=2.0)
    assert h.load(0.0) == 0.0 and h.admits(0.0)
    for i in range(200):  # 40 % of the loop for 10 s: 20 ms of hearing every 50 ms
        h.add(0.02, i * 0.05)
    assert h.load(10.0) == pytest.approx(0.4, rel=0.05)
    assert not h.admits(10.0) and not h.sheds(10.0)  # over the budget, under the shedding line
    assert h.load(20.0) < 0.01 and h.admits(20.0)  # quiet again: it decays


def test_shedding_goes_one_session_at_a_time():
    h = HearingLoad(admit_below=0.1, shed_above=0.2, settle_s=2.0)
    h.add(1.0, 0.0)  # half a core
    assert h.sheds(0.0)
    assert not h.sheds(1.0), "the next only once the first one's going has been measured"
    h.add(1.0, 2.5)
    assert h.sheds(2.5)


async def stream(c: RealtimeClient, seconds: float) -> None:
    """Quiet noise (-40 dBFS) as a microphone sends it, within real time (the server's slack)."""
    await c.append(noise(seconds, 24000, level=328))


async def test_beyond_the_budget_new_sessions_are_refused_and_open_ones_kept(make_server):
    server = await make_server(hearing_budget=1e-9)  # any hearing at all is over it
    server.hearing.shed_above = float("inf")  # (this test is about admission alone)
    c = await RealtimeClient.connect(server.port)
    await stream(c, 0.3)
    await until(lambda: server.hearing.load(asyncio.get_running_loop().time()) > 0, what="hearing measured")
    with pytest.raises(websockets.InvalidStatus) as info:
        await websockets.connect(ws_url(server.port))
    assert info.value.response.status_code == 503
    assert b"microphones" in info.value.response.body
    assert 'duplex_refusals_total{kind="hearing"}' in server.metrics_text()
    await c.say("still here")  # the open session goes on being served
    await c.close()


async def test_far_beyond_it_the_newest_streaming_session_is_closed(make_server):
    server = await make_server(hearing_budget=1e-9)
    older = await RealtimeClient.connect(server.port)
    newer = await RealtimeClient.connect(server.port)
    await stream(older, 0.3)  # alone, it is kept however much it costs
    await until(lambda: server.hearing.load(asyncio.get_running_loop().time()) > 0, what="hearing measured")
    await stream(newer, 0.3)
    with pytest.raises(websockets.ConnectionClosed) as info:
        async with asyncio.timeout(30):
            while True:
                await newer.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1013
    assert "microphones" in info.value.rcvd.reason
    # The oldest one streaming stays, and is served.
    await older.say("still here")
    await older.close()


async def test_waiting_for_a_core_is_not_charged_as_hearing(make_server, monkeypatch):
    """On cores the server's own models keep busy, hearing a slice takes longer in wall
    time than it costs: four conversations' microphones read as 53% of the loop and one
    was shed. Only the loop thread's CPU counts. The wait is injected (a real busy core
    cannot be had on demand): each 100 ms slice waits 40 ms, 40% of the loop a session."""
    heard = Session.hear

    def slow(self: Session, raw: bytes, now: float):  # type: ignore[no-untyped-def]
        time.sleep(0.04)  # waiting, not computing
        return heard(self, raw, now)

    monkeypatch.setattr(Session, "hear", slow)
    server = await make_server(hearing_budget=0.1)  # sheds beyond 0.15; the waits would read 0.8
    older = await RealtimeClient.connect(server.port)
    newer = await RealtimeClient.connect(server.port)
    await asyncio.gather(stream(older, 2.0), stream(newer, 2.0))
    loop = asyncio.get_running_loop()
    await until(lambda: server.hearing.load(loop.time()) > 0, what="hearing measured")
    assert server.hearing.load(loop.time()) < 0.1, "only what hearing computed is charged"
    assert 'refusal="hearing"' not in server.metrics_text() and 'kind="hearing"' not in server.metrics_text()
    third = await RealtimeClient.connect(server.port)  # still admitted
    for c in (older, newer, third):
        await c.say("still here")
        await c.close()
