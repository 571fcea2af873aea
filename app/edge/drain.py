"""A graceful drain: stop taking sessions, let the replies being spoken finish, then go.

On SIGTERM (a deploy, a scale-down, a process manager's stop) or a ``POST /admin/drain``
the server stops admitting at once: a new session, a new WebRTC call and ``/readyz`` are
answered 503 with ``Retry-After`` from the moment the drain begins, so a balancer sends
the next conversations elsewhere. Each open session is closed as soon as it has no reply
in progress (an idle one at once, one mid-sentence after its ``response.done``), with an
``error`` event (code :data:`ERROR_CODE`) and the close code 1001 and a reason a client
can act on: reconnect. Whatever is still open at the deadline (``--drain-timeout``) is
closed the same way, its reply cut there; a second signal makes the deadline now.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import TYPE_CHECKING

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from duplex.app.core.events import Error
from duplex.app.core.protocol import ProtocolError
from duplex.app.edge import access
from duplex.app.edge.http import raw_response

if TYPE_CHECKING:
    from duplex.app.edge.connection import Connection

DRAIN_PATH = "/admin/drain"
"""``POST`` here drains the server (the API key if one is set, else from loopback only)."""
RETRY_AFTER_S = 5
"""What a refused client is told to wait: a restarted process, or a balancer's next
backend, takes sessions again within seconds."""
CLOSE_CODE = 1001
"""Going away: the WebSocket close code of a server that shuts down."""
CLOSE_REASON = "server draining: reconnect"
CUT_REASON = "server shut down at its drain deadline: reconnect"
ERROR_CODE = "server_shutting_down"
"""The ``error`` event's code just before the close frame (its type: ``server_error``)."""


@dataclass(frozen=True, slots=True)
class Draining:
    """A drain under way: what started it and when it must be over (loop time)."""

    why: str
    since: float
    deadline: float


class Drain:
    """A server's drain, as data: whether one is under way, and its deadline's scope."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.state: Draining | None = None
        self.begun = asyncio.Event()
        """Set when the drain begins: the command then runs :meth:`run` and exits."""
        self._scope: asyncio.Timeout | None = None

    @property
    def active(self) -> bool:
        return self.state is not None

    def begin(self, why: str, now: float) -> bool:
        """Begin draining (whether this call began it); called again, the deadline is now."""
        if self.state is not None:
            self.state = replace(self.state, deadline=min(now, self.state.deadline))
            if self._scope is not None:
                with contextlib.suppress(RuntimeError):  # its scope has ended: nothing is left to hurry
                    self._scope.reschedule(now)
            return False
        self.state = Draining(why, now, now + self.timeout_s)
        self.begun.set()
        return True

    async def run(
        self, open_now: Callable[[], Collection[Connection]], calls_ended: Callable[[], Awaitable[None]]
    ) -> int:
        """Close the sessions ``open_now()`` gives as each has no reply in progress, and
        those left at the deadline with theirs cut; returns how many were cut. WebRTC calls
        (``calls_ended``) play what they were sent before they end, by the same deadline."""
        assert self.state is not None
        try:
            async with asyncio.timeout_at(self.state.deadline) as self._scope:
                async with asyncio.TaskGroup() as tg:
                    for conn in open_now():
                        tg.create_task(leave_when_done(conn), name="drain")
                await calls_ended()
        except TimeoutError:
            left = list(open_now())
            async with asyncio.TaskGroup() as tg:
                for conn in left:
                    tg.create_task(leave(conn, CUT_REASON, "The server shut down; open a new session to go on."))
            return len(left)
        return 0


def unavailable(what: str) -> Response:
    """503 with ``Retry-After``: what every new session, call or readiness probe gets."""
    body = f"{what}: the server is draining (shutting down); retry in {RETRY_AFTER_S} s elsewhere or later\n"
    return raw_response(
        HTTPStatus.SERVICE_UNAVAILABLE, body.encode(), "text/plain; charset=utf-8", {"Retry-After": str(RETRY_AFTER_S)}
    )


def admin_refusal(request: Request, peer_host: str, *, api_key: str | None) -> access.Refusal | None:
    """Why a ``POST /admin/drain`` may not drain (None: it may). With an API key, the key
    decides; without one, only this machine may (anyone who reaches the port could
    otherwise shut the server down). A web page never may."""
    if request.headers.get("Origin") is not None:
        return access.Refusal(HTTPStatus.FORBIDDEN, "the admin endpoint takes no browser requests")
    if api_key:
        return access.check(request, api_key=api_key, origins=set())
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(peer_host.strip("[]")).is_loopback:
            return None
    return access.Refusal(HTTPStatus.FORBIDDEN, "with no API key set, the admin endpoint answers only this machine")


def drain_error(message: str) -> Error:
    """The ``error`` event a session gets before its close frame."""
    return Error(ProtocolError(ERROR_CODE, message, error_type="server_error"))


async def leave_when_done(conn: Connection) -> None:
    """Close ``conn`` once no reply of it is in progress (a reply the user talks over is
    cancelled as usual; a new one started meanwhile is waited for too)."""
    while (run := conn.replies.current) is not None and run.task is not None and not run.task.done():
        await asyncio.wait({run.task})
    await leave(conn, CLOSE_REASON, "The server is shutting down; open a new session to go on.")


async def leave(conn: Connection, reason: str, message: str) -> None:
    """Tell ``conn``'s client why (an ``error`` event) and close it with 1001."""
    with contextlib.suppress(ConnectionClosed):
        await conn.send([drain_error(message)])
    await conn.ws.close(CLOSE_CODE, reason)
