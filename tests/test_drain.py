"""A graceful drain (issue 45): from its first moment new sessions are refused (503 with
Retry-After) and readiness fails; a reply in flight is spoken to its end, then its session
is told why and closed (1001); the deadline, or a second signal, cuts what is left."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
import websockets
from websockets.frames import Close

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.edge.drain import CLOSE_REASON, CUT_REASON, DRAIN_PATH, ERROR_CODE, RETRY_AFTER_S
from lab.net import free_port
from tests.util import Child, text_item, until

# eSpeak speaks this in ~9 s: paced at real time, the reply is in flight for seconds.
LONG = " ".join(f"Here is sentence number {i} of a reply that takes a while." for i in range(4))


async def reply_in_flight(port: int) -> RealtimeClient:
    """A session whose reply has begun to sound (its first audio is in)."""
    c = await RealtimeClient.connect(port)
    await c.update(turn_detection=None)
    await c.say(LONG)
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    return c


async def to_the_close(c: RealtimeClient, order: list[str], name: str) -> tuple[list[dict[str, Any]], Close]:
    """Every event until the server closes the session, and its close frame."""
    events: list[dict[str, Any]] = []
    try:
        while True:
            events.append(ev := await c.recv())
            if ev["type"] == "response.done":
                order.append(f"{name} done")
    except websockets.ConnectionClosed as closed:
        order.append(f"{name} closed")
        assert closed.rcvd is not None, "closed without a close frame"
        return events, closed.rcvd


def get(port: int, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def post(port: int, path: str, **headers: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def assert_refused(port: int) -> None:
    """A new session gets 503 and Retry-After; readiness fails; liveness says draining."""
    with pytest.raises(websockets.InvalidStatus) as info:
        await RealtimeClient.connect(port)
    assert info.value.response.status_code == 503
    assert info.value.response.headers["Retry-After"] == str(RETRY_AFTER_S)
    status, headers, _ = await asyncio.to_thread(get, port, "/readyz")
    assert (status, headers["Retry-After"]) == (503, str(RETRY_AFTER_S))
    status, _, body = await asyncio.to_thread(get, port, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "draining"


def told(events: list[dict[str, Any]]) -> bool:
    """The last event before the close is the drain's error (a server error, not the client's)."""
    last = events[-1]
    return last["type"] == "error" and last["error"]["code"] == ERROR_CODE and last["error"]["type"] == "server_error"


async def test_a_drain_refuses_at_once_and_lets_the_reply_in_flight_finish(make_server):
    server = await make_server(drain_timeout_s=120)
    assert (await asyncio.to_thread(get, server.port, "/readyz"))[0] == 200
    busy = await reply_in_flight(server.port)
    idle = await RealtimeClient.connect(server.port)
    server.begin_drain("test")
    await assert_refused(server.port)  # before drain() has run at all
    order: list[str] = []
    draining = asyncio.create_task(server.drain())
    (busy_events, busy_close), (idle_events, idle_close) = await asyncio.gather(
        to_the_close(busy, order, "busy"), to_the_close(idle, order, "idle")
    )
    await asyncio.wait_for(draining, 30)
    # The idle session went first, without waiting on the other's reply.
    assert order == ["idle closed", "busy done", "busy closed"], order
    assert (idle_close.code, idle_close.reason) == (1001, CLOSE_REASON) and told(idle_events)
    done = next(e for e in busy_events if e["type"] == "response.done")
    assert done["response"]["status"] == "completed"  # spoken to its end, not cut
    assert (busy_close.code, busy_close.reason) == (1001, CLOSE_REASON) and told(busy_events)
    assert not server.connections
    assert 'duplex_refusals_total{kind="draining"} 1.0' in server.metrics_text()


@pytest.mark.parametrize("how", ["deadline", "second signal"])
async def test_the_deadline_or_a_second_signal_cuts_the_reply_and_says_why(make_server, how):
    server = await make_server(drain_timeout_s=0.5 if how == "deadline" else 120)
    busy = await reply_in_flight(server.port)
    server.begin_drain("signal")
    draining = asyncio.create_task(server.drain())
    if how == "second signal":
        await until(lambda: server.draining._scope is not None, 10, what="the drain waiting on the reply")
        server.begin_drain("again")
    events, close = await to_the_close(busy, [], "busy")
    await asyncio.wait_for(draining, 30)
    assert not any(e["type"] == "response.done" for e in events)  # it was cut mid-reply
    assert (close.code, close.reason) == (1001, CUT_REASON) and told(events)


async def test_a_signal_after_the_drain_has_ended_changes_nothing(make_server):
    # A process manager's second SIGTERM often lands after an idle server's drain is over:
    # it raised in the signal handler ("Cannot change state of finished Timeout").
    server = await make_server()
    server.begin_drain("signal")
    await asyncio.wait_for(server.drain(), 30)
    server.begin_drain("again")
    assert server.draining.active


async def test_the_drain_endpoint_takes_the_key_or_this_machine_never_a_page(make_server):
    open_server = await make_server()
    status, _ = await asyncio.to_thread(post, open_server.port, DRAIN_PATH, Origin="http://evil.example")
    assert status == 403 and not open_server.draining.active
    status, body = await asyncio.to_thread(post, open_server.port, DRAIN_PATH)  # loopback, no key set
    assert status == 202 and json.loads(body)["status"] == "draining"
    await assert_refused(open_server.port)  # from the answer on

    keyed = await make_server(api_key="sesame")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, _ = await asyncio.to_thread(post, keyed.port, DRAIN_PATH, **headers)
        assert status == 401 and not keyed.draining.active
    status, _ = await asyncio.to_thread(post, keyed.port, DRAIN_PATH, Authorization="Bearer sesame")
    assert status == 202 and keyed.draining.active


async def test_sigterm_drains_a_real_server_with_a_reply_in_flight():
    port = free_port()
    child = await Child.spawn(
        [sys.executable, "-m", "duplex.app", "serve", "--port", str(port), "--thinker", "echo",
         "--turn-detection", "server_vad"]
    )  # fmt: skip
    try:
        await child.printed("listening", timeout=90)  # a bound, not a target: models load on a busy machine
        busy = await reply_in_flight(port)
        child.proc.send_signal(signal.SIGTERM)
        await child.printed("draining (SIGTERM)", timeout=30)
        await assert_refused(port)
        events, close = await to_the_close(busy, [], "busy")
        done = next(e for e in events if e["type"] == "response.done")
        assert done["response"]["status"] == "completed"
        assert (close.code, close.reason) == (1001, CLOSE_REASON) and told(events)
        assert await asyncio.wait_for(child.proc.wait(), 30) == 0
    finally:
        await child.stop()
    assert "Traceback" not in child.output and " ERROR " not in child.output, child.output


async def test_a_webrtc_call_plays_its_reply_to_the_end_before_the_drain_ends_it(make_server):
    from lab.caller import Caller

    server = await make_server(drain_timeout_s=120)
    caller = Caller()
    assert (await caller.call(server.port)).status_code == 201
    await asyncio.wait_for(caller.opened.wait(), 10)
    await until(lambda: bool(caller.of_type("session.created")), 10, what="session.created on oai-events")
    caller.send("session.update", session={"turn_detection": None})
    caller.send("conversation.item.create", item=text_item(LONG))
    caller.send("response.create")
    await until(lambda: bool(caller.of_type("output_audio_buffer.started")), 30, what="the reply on the track")
    rid = caller.of_type("output_audio_buffer.started")[0]["response_id"]
    await asyncio.wait_for(server.drain(), 60)
    # The session was closed after its response.done, and the call ended only once the
    # caller's speaker had played the reply to its last sample.
    done = [e for e in caller.of_type("response.done") if e["response"]["id"] == rid]
    assert done and done[0]["response"]["status"] == "completed"
    assert [e["response_id"] for e in caller.of_type("output_audio_buffer.stopped")] == [rid]
    assert [e["error"]["code"] for e in caller.of_type("error")] == [ERROR_CODE]
    assert not server.calls.calls
    await caller.close()
