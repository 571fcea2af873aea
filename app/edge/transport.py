"""The WebSocket connection the server creates: it never buffers without bound.

The WebSocket library answers every ping with a pong written straight to the
transport, with no flow control, and a keepalive ping waits for the write buffer
to drain, so its timeout never starts for a client that stops reading. A client
that sends pings and reads nothing could grow the server's memory without end
(measured: 96 to 716 MiB in 50 s). Here every batch of received data is followed
by a look at the bytes the client has not taken: over the bound, the client is a
stalled reader and is dropped: a close frame (1008) is queued, and the transport
is aborted a second later whether or not the close could be written.

A client that stops reading is only seen once the kernel stops taking data: Linux
grows a socket's send buffer to 4 MiB, which at the voice's pace (64 KB/s of base64)
took a minute to fill before the stall timeout even started, with the reply's slot held
meanwhile. Output here is real-time audio and small events, so a connection's send
buffer is fixed at :data:`SEND_BUFFER`: it fills in seconds once the client stops.

The library answers pings inside its data callback, outside any session's share of
the event loop: a client flooding pings and reading the pongs slowed every other
session's round trip from ~4 ms to 136-297 ms. A client may ping in bursts (a
keepalive every few seconds, a latency probe), not without end: past
:data:`PING_BURST` beyond :data:`PINGS_PER_S`, it is dropped the same way (1008).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State

from duplex.app.edge.audio_api import API_PATHS, MAX_BODY

DROP_AFTER_S = 1.0
"""How long a dropped client's close frame gets to leave before the transport is aborted."""
SEND_BUFFER = 128 * 1024
"""SO_SNDBUF of each connection (Linux doubles it for its own bookkeeping): two seconds
of audio, ample for a voice stream at any round trip a conversation survives."""
PINGS_PER_S = 5.0
PING_BURST = 50.0
"""Pings a client may send at once, refilled at :data:`PINGS_PER_S`."""
CALLS_PATH = "/v1/realtime/calls"
"""Where a POST's body is read (a WebRTC call's offer); any other POST is refused unread."""
MAX_POST_BYTES = 256 * 1024
"""The largest request body taken (a WebRTC call's SDP offer and session: ~10 KB)."""
POST_HEADER = "X-Duplex-Post"
"""Set on a POST handed to the handshake's parser as a GET (its body kept aside)."""
OPEN_TIMEOUT_S = 10.0
"""How long a connection may take to become a WebSocket (or to be answered): the WebSocket
layer's own bound, kept here so that a streamed answer of the audio endpoints is not cut by it."""
BODY_TIMEOUT_S = 120.0
"""...and how long an audio endpoint's request body may take to arrive (16 MiB, slowly)."""


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """A POST to one of the audio endpoints, read whole: answered by the server on this
    connection's transport, never seen by the WebSocket layer."""

    request: Request
    body: bytes


def _head(lines: list[bytes]) -> Request:
    headers = Headers()
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.decode("latin-1").strip()] = value.decode("latin-1").strip()
    return Request(lines[0].split(b" ")[1].decode("latin-1"), headers)


class GuardedConnection(ServerConnection):
    """A server connection with a bound on the bytes waiting for its client."""

    max_unsent = 1024 * 1024
    on_drop: Callable[[GuardedConnection, str, str], None] = staticmethod(lambda conn, kind, reason: None)
    on_api: Callable[[GuardedConnection, ApiRequest], asyncio.Task[None]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped: str | None = None
        self._pings = PING_BURST
        self._pinged_at = 0.0
        self._head: bytearray | None = bytearray()  # the first bytes, until the request's kind is known
        self.post_body: bytes | None = None
        """A POST's body: the handshake's parser reads requests without one, so a POST
        is handed to it as a GET marked with :data:`POST_HEADER`, its body kept here."""
        self.api_task: asyncio.Task[None] | None = None
        """The audio endpoint answering this connection's request, if it made one."""
        self._awaiting_body = False
        self._opening: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not a TCP socket (a test's pipe): as is
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        super().connection_made(transport)
        self._opening = self.loop.call_later(OPEN_TIMEOUT_S, self._open_late)

    def _open_late(self) -> None:
        """Not a WebSocket (nor answered) in time: cut it, as the WebSocket layer would.
        An audio endpoint's answer runs as long as it needs; its body gets longer to come."""
        if self.api_task is not None or self.protocol.state is not State.CONNECTING:
            return
        if self._awaiting_body:
            self._awaiting_body = False
            self._opening = self.loop.call_later(BODY_TIMEOUT_S - OPEN_TIMEOUT_S, self._open_late)
            return
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._opening is not None:
            self._opening.cancel()  # and lets go of this connection now, not when it was due
        if self.api_task is not None:
            self.api_task.cancel()  # the client went away: stop speaking or hearing for it at once
        super().connection_lost(exc)

    @property
    def unsent(self) -> int:
        """Bytes written for the client that it has not taken yet."""
        transport = getattr(self, "transport", None)
        return int(transport.get_write_buffer_size()) if transport is not None else 0

    def data_received(self, data: bytes) -> None:
        if self.api_task is not None:
            return  # an audio endpoint answers this connection: nothing more is read from it
        if self._head is not None:
            data = self._post(data)
            if not data:
                return
        super().data_received(data)
        if self.dropped is None and self.unsent > self.max_unsent:
            self.drop(f"{self.unsent} bytes unsent (bound {self.max_unsent})")

    def _post(self, data: bytes) -> bytes:
        """The first bytes of the connection: a POST is read whole (headers and body)
        and given to the parser as a marked GET; anything else goes on as it came."""
        assert self._head is not None
        self._head += data
        if len(self._head) < 5 and b"POST "[: len(self._head)] == bytes(self._head):
            return b""  # not enough to tell yet
        if not self._head.startswith(b"POST "):
            head, self._head = bytes(self._head), None
            return head
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > 16 * 1024:
                self.transport.close()
            return b""
        lines = bytes(self._head[:end]).split(b"\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip()) if value.strip().isdigit() else -1
        target = lines[0].split(b" ")[1].decode("latin-1") if len(lines[0].split(b" ")) > 1 else ""
        api = target.split("?", 1)[0] if target.split("?", 1)[0] in API_PATHS and self.on_api else None
        if not 0 <= length <= (MAX_BODY[api] if api else MAX_POST_BYTES):
            self.transport.close()  # no length, or too long: not a request this server takes
            return b""
        if api is None and not target.startswith(CALLS_PATH):
            length = 0  # nothing else takes a body: answered at once (405), the body unread
        if len(self._head) < end + 4 + length:
            self._awaiting_body = api is not None
            return b""
        if api is not None and self.on_api is not None:
            body, self._head = bytes(self._head[end + 4 : end + 4 + length]), None
            self.api_task = self.on_api(self, ApiRequest(_head(lines), body))
            return b""
        self.post_body = bytes(self._head[end + 4 : end + 4 + length])
        kept = [ln for ln in lines[1:] if not ln.lower().startswith((b"content-length:", b"transfer-encoding:"))]
        request_line = b"GET " + lines[0][5:]
        self._head = None
        return b"\r\n".join([request_line, *kept, POST_HEADER.encode() + b": 1"]) + b"\r\n\r\n"

    def process_event(self, event: Any) -> None:
        if isinstance(event, Frame) and event.opcode is Opcode.PING and self.dropped is None:
            now = self.loop.time()
            self._pings = min(PING_BURST, self._pings + (now - self._pinged_at) * PINGS_PER_S) - 1
            self._pinged_at = now
            if self._pings < 0:
                self.drop(f"more than {PINGS_PER_S:g} pings a second", kind="ping_flood", tell="ping flood")
        super().process_event(event)

    def drop(self, reason: str, *, kind: str = "stalled", tell: str = "client not reading") -> None:
        """Close a client that does not read (or floods): 1008 with ``tell`` if it can
        still hear it, abort regardless."""
        if self.dropped is not None:
            return
        self.dropped = reason
        type(self).on_drop(self, kind, reason)
        try:
            self.protocol.fail(CloseCode.POLICY_VIOLATION, tell)
            self.send_data()
        except Exception:  # the transport may already be gone; the abort below still holds
            pass
        self.loop.call_later(DROP_AFTER_S, self.transport.abort)


def guarded(
    max_unsent: int,
    on_drop: Callable[[GuardedConnection, str, str], None],
    on_api: Callable[[GuardedConnection, ApiRequest], asyncio.Task[None]] | None = None,
) -> type[GuardedConnection]:
    """A connection class with these bounds, for ``websockets.serve(create_connection=...)``;
    ``on_api`` answers the audio endpoints (none: they are refused like any other POST)."""
    attrs: dict[str, Any] = {"max_unsent": max_unsent, "on_drop": staticmethod(on_drop)}
    if on_api is not None:
        attrs["on_api"] = staticmethod(on_api)
    return type("ServerGuardedConnection", (GuardedConnection,), attrs)
