"""The WebSocket/HTTP server: the port, the handshake checks, and every connection.

Plain HTTP on the same port serves the browser client's files, ``/healthz``,
``/readyz`` and ``/metrics``; ``/v1/realtime`` upgrades to a WebSocket after the access
checks and the session cap, and each WebSocket becomes a
:class:`~duplex.app.edge.connection.Connection`. :meth:`DuplexServer.drain` shuts it
down gracefully (:mod:`~duplex.app.edge.drain`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Coroutine, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import websockets
from websockets.asyncio.server import Server, ServerConnection
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from duplex.app.core.events import ServerEvent
from duplex.app.core.protocol import REALTIME_PATH
from duplex.app.core.wire import BETA, GA
from duplex.app.edge import access
from duplex.app.edge.audio_api import MODELS_PATH, models
from duplex.app.edge.audio_serving import AudioEndpoints
from duplex.app.edge.calls import Calls
from duplex.app.edge.capacity import Capacity
from duplex.app.edge.config import ServerConfig
from duplex.app.edge.connection import Connection
from duplex.app.edge.drain import DRAIN_PATH, Drain, admin_refusal, unavailable
from duplex.app.edge.fairness import FairQueue, LoopShare
from duplex.app.edge.hearing import HearingLoad
from duplex.app.edge.http import (
    duplicated_header,
    head_only,
    is_upgrade,
    json_response,
    metrics_response,
    raw_response,
    static_file,
    text_response,
)
from duplex.app.edge.memory import IdleMemory
from duplex.app.edge.metrics import Metrics
from duplex.app.edge.transport import CALLS_PATH, GuardedConnection, guarded
from duplex.pipeline.backends import Backends

log = logging.getLogger("duplex.server")

CLOSE_TIMEOUT_S = 1.0
"""How long a closing handshake may take before the connection is cut."""
SHED_OVER_BUDGET = 1.5
"""Hearing load, as a multiple of the budget, beyond which the newest streaming session
is closed: between the budget and this, sessions already open are kept and new ones refused."""


class DuplexServer:
    """The WebSocket/HTTP server: one set of backends shared by every session."""

    def __init__(
        self, backends: Backends, config: ServerConfig | None = None, *, capacity: Capacity | None = None
    ) -> None:
        self.backends = backends
        self.config = config or ServerConfig()
        self.metrics = Metrics()
        self.capacity = capacity or Capacity(self.config.max_sessions)
        """Sessions open against ``--max-sessions``: this process's, or every worker's."""
        self.connections: set[Connection] = set()
        self.loop_share = LoopShare(self.config.loop_share)
        budget = self.config.hearing_budget
        self.hearing = HearingLoad(admit_below=budget, shed_above=SHED_OVER_BUDGET * budget)
        recognizer = backends.recognizer
        self.recognitions = FairQueue(recognizer.concurrency if recognizer is not None else 1)
        model = backends.turn_model
        self.turn_questions = FairQueue(model.concurrency if model is not None else 1)
        """End-of-turn questions, round-robin across sessions on the model's workers."""
        self._server: Server | None = None
        self.memory = IdleMemory(self.connections, backends.shrink)  # the baseline: now, the models loaded
        self.calls = Calls()
        """WebRTC calls, each bridged to a session of this server."""
        self._hanging_up: asyncio.Task[None] | None = None
        self._gauging: asyncio.Task[None] | None = None
        self.draining = Drain(self.config.drain_timeout_s)
        self.audio = AudioEndpoints(self)
        """``/v1/audio/speech`` and ``/v1/audio/transcriptions`` (``--audio-api``)."""

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        cfg = self.config
        self._server = await websockets.serve(
            self._handle,
            cfg.host,
            cfg.port,
            process_request=self._process_request,
            process_response=self._process_response if self.capacity.workers > 1 else None,
            reuse_port=self.capacity.workers > 1,  # the workers listen on one port: Linux spreads connections
            select_subprotocol=_select_subprotocol,
            create_connection=guarded(cfg.max_unsent_bytes, self._dropped, self.audio.start if cfg.audio_api else None),
            open_timeout=None,  # the connections' own (transport.OPEN_TIMEOUT_S): a streamed answer runs on
            max_size=cfg.max_message_bytes,  # no larger frame is ever buffered
            max_queue=cfg.max_queued_messages,
            write_limit=cfg.write_limit,
            compression=None,  # PCM does not compress; deflate would only cost CPU
            ping_interval=20,
            ping_timeout=20,
            # A client that does not answer a close (one that stopped reading, say) is
            # cut off after a second: shutdown and forced closes never wait on it.
            close_timeout=CLOSE_TIMEOUT_S,
        )
        if self.metrics.shared_dir is not None:
            self._gauging = asyncio.get_running_loop().create_task(self._keep_gauges(), name="gauges")
        b = self.backends
        log.info(
            "Duplex listening on http://%s:%d/ (realtime at ws://%s:%d%s); voice %s, ears %s",
            cfg.host,
            self.port,
            cfg.host,
            self.port,
            REALTIME_PATH,
            b.talker.artifact_id,
            getattr(b.recognizer, "name", "none"),
        )

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    def close(self) -> None:
        """Stop accepting; close every session with a close frame (and every call)."""
        if self.calls.calls:
            self._hanging_up = asyncio.get_running_loop().create_task(self.calls.aclose(), name="hang-up")
        if self._server is not None:
            self._server.close()
        self.memory.cancel()
        if self._gauging is not None:
            self._gauging.cancel()
        for task in self.audio.tasks:
            task.cancel()

    def begin_drain(self, why: str) -> None:
        """From now on refuse new sessions and calls (503, ``Retry-After``); :meth:`drain`
        closes the open ones. A second call (a second signal) ends the drain now."""
        if self.draining.begin(why, asyncio.get_running_loop().time()):
            self.metrics.set("duplex_draining", 1)
            log.warning("draining (%s): %d sessions open", why, len(self.connections))

    async def drain(self) -> None:
        """Close each session once its reply in progress is done, the rest at the deadline."""
        if not self.draining.active:
            self.begin_drain("drain")
        cut = await self.draining.run(lambda: list(self.connections), self.calls.ended)
        if cut:
            log.warning("drained: %d sessions closed at the deadline, their replies cut", cut)

    async def wait_closed(self) -> None:
        await self.audio.aclose()
        if self._hanging_up is not None:
            await self._hanging_up
        if self._server is not None:
            await self._server.wait_closed()

    def refuse(self, who: Connection | str, kind: str, reason: str) -> None:
        """One log line and one counter for every refusal and forced close."""
        where = who.session.id if isinstance(who, Connection) else who
        log.warning("refused %s: %s (%s)", where, reason, kind, extra={"session": where, "refusal": kind})
        self.metrics.inc("duplex_refusals_total", kind=kind)

    def heard(self, conn: Connection, seconds: float, now: float) -> None:
        """``conn`` took ``seconds`` of the loop hearing real-time audio. Far over the
        budget, the newest sessions that stream go (``conn`` may be one): as many as
        bring the load back under the budget at what each costs on average, never the
        oldest (a lone microphone on a busy machine is heard as well as it can be)."""
        self.hearing.add(seconds, now)
        if self.hearing.load(now) <= self.hearing.shed_above:
            return
        streaming = sorted(
            (c for c in self.connections if c.heard_at is not None and now - c.heard_at < 1.0),
            key=lambda c: c.opened_at,
        )
        if len(streaming) < 2 or not self.hearing.sheds(now):
            return
        load = self.hearing.load(now)
        each = load / len(streaming)
        shed = min(len(streaming) - 1, max(1, math.ceil((load - self.hearing.admit_below) / each)))
        for c in streaming[-shed:]:
            self.refuse(c, "hearing", f"hearing microphones took {load:.0%} of the loop: the newest go")
            c.close_soon(1013, "the server cannot hear this many microphones in real time; try again later")

    def _dropped(self, ws: GuardedConnection, kind: str, reason: str) -> None:
        conn = next((c for c in self.connections if c.ws is ws), None)
        self.refuse(conn or _peer(ws), kind, reason)

    def observe(self, event: ServerEvent) -> None:
        """Count what the server tells clients."""
        self.metrics.count_event(event)

    def metrics_text(self) -> str:
        self._gauges()
        return self.metrics.render()

    def _gauges(self) -> None:
        """What the gauges say now (at a scrape; every second too, with workers: a scrape
        asks one worker, and shows every worker's)."""
        m = self.metrics
        m.set("duplex_sessions", len(self.connections))
        m.set("duplex_tasks", len(asyncio.all_tasks()))
        now = asyncio.get_running_loop().time()
        m.set("duplex_loop_share_sessions", self.loop_share.counted(now))
        m.set("duplex_hearing_load", round(self.hearing.load(now), 4))
        m.set("duplex_idle_trims", self.memory.trims)
        m.set("duplex_idle_trimmed", int(self.memory.trimmed))
        turns = getattr(self.backends.recognizer, "turns", None)  # a recogniser with models to choose from
        for model, n in (turns or {}).items():
            m.count_to("duplex_turn_transcripts_total", n, model=model)

    async def _keep_gauges(self) -> None:
        while True:
            self._gauges()
            await asyncio.sleep(1.0)

    def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None | Coroutine[Any, Any, Response]:
        peer = _peer(connection)
        duplicated = duplicated_header(request)
        if duplicated is not None:
            self.refuse(peer, "bad_request", f"the {duplicated} header is repeated")
            return text_response(HTTPStatus.BAD_REQUEST, f"the {duplicated} header may appear only once")
        body = getattr(connection, "post_body", None)
        if body is not None:
            return self._post(peer, request, body)
        if request.method not in ("GET", "HEAD"):
            return text_response(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD are served here")
        response = self._route(peer, request)
        if request.method == "HEAD":  # a WebSocket handshake is a GET
            return (
                head_only(response)
                if response is not None
                else text_response(HTTPStatus.METHOD_NOT_ALLOWED, "a WebSocket handshake is a GET")
            )
        return response

    async def _post(self, peer: str, request: Request, body: bytes) -> Response:
        """A POST: a WebRTC call (``/v1/realtime/calls``), a drain, or nothing else."""
        path = request.path.split("?", 1)[0]
        cfg = self.config
        origins = access.allowed_origins(cfg.allowed_origins, cfg.host, self.port)
        if path == DRAIN_PATH:
            refused = admin_refusal(request, peer.rsplit(":", 1)[0], api_key=cfg.api_key)
            if refused is not None:
                return self._refused(peer, refused)
            self.begin_drain(f"POST {DRAIN_PATH} from {peer}")
            return json_response(HTTPStatus.ACCEPTED, {"status": "draining", "sessions": len(self.connections)})
        if not path.startswith(CALLS_PATH):
            return text_response(HTTPStatus.METHOD_NOT_ALLOWED, f"POST is served only at {CALLS_PATH}")
        if self.draining.active:
            self.refuse(peer, "draining", "a call while draining")
            return unavailable("a new call")
        refusal = access.check(request, api_key=cfg.api_key, origins=origins)
        if refusal is not None:
            return self._refused(peer, refusal)
        host = self._server.sockets[0].getsockname()[0] if self._server is not None else "127.0.0.1"
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        url = f"ws://{'[' + host + ']' if ':' in host else host}:{self.port}{REALTIME_PATH}?duplex=1"
        headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        status, ctype, answer, extra = await self.calls.post(
            path, body, request.headers.get("Content-Type", ""), headers, url
        )
        return raw_response(status, answer, ctype, extra)

    def _refused(self, peer: str, refusal: access.Refusal) -> Response:
        self.refuse(peer, "forbidden" if refusal.status == HTTPStatus.FORBIDDEN else "unauthorized", refusal.reason)
        return text_response(refusal.status, refusal.reason)

    def _route(self, peer: str, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in (REALTIME_PATH, REALTIME_PATH + "/"):
            if not is_upgrade(request):
                return text_response(HTTPStatus.UPGRADE_REQUIRED, "this endpoint speaks WebSocket")
            cfg = self.config
            refusal = access.check(
                request, api_key=cfg.api_key, origins=access.allowed_origins(cfg.allowed_origins, cfg.host, self.port)
            )
            if refusal is not None:
                return self._refused(peer, refusal)
            if self.draining.active:
                self.refuse(peer, "draining", "a session while draining")
                return unavailable("a new session")
            if self.capacity.full:
                self.refuse(peer, "capacity", f"{cfg.max_sessions} sessions already")
                return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "too many sessions")
            now = asyncio.get_running_loop().time()
            if not self.hearing.admits(now):
                load = self.hearing.load(now)
                self.refuse(
                    peer,
                    "hearing",
                    f"hearing microphones takes {load:.0%} of the loop (budget {cfg.hearing_budget:.0%})",
                )
                return text_response(
                    HTTPStatus.SERVICE_UNAVAILABLE, "the server is hearing as many microphones as it can in real time"
                )
            added = self.memory.added_mb
            if added >= cfg.memory_budget_mb:
                self.refuse(peer, "memory", f"sessions hold {added} MiB (budget {cfg.memory_budget_mb} MiB)")
                return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "the server's memory budget is spent")
            return None
        if path == "/healthz":  # alive (a draining server is, till it exits)
            status = "ok" if not self.draining.active else "draining"
            sessions, workers = self.capacity.total(), self.capacity.workers
            return json_response(HTTPStatus.OK, {"status": status, "sessions": sessions, "workers": workers})
        if path == "/readyz":  # takes sessions: what a balancer asks
            if self.draining.active:
                return unavailable("ready")
            return json_response(HTTPStatus.OK, {"status": "ready", "sessions": len(self.connections)})
        if path == "/metrics":
            return metrics_response(self.metrics_text())
        if path == MODELS_PATH and self.config.audio_api:
            recognizer = self.backends.recognizer
            body = models(self.backends.talker.name, recognizer.name if recognizer is not None else None)
            return raw_response(HTTPStatus.OK, body, "application/json", {})
        if is_upgrade(request):
            return text_response(HTTPStatus.NOT_FOUND, f"WebSocket endpoint is {REALTIME_PATH}")
        return static_file(self.config.web_dir, path)

    def _process_response(self, connection: ServerConnection, request: Request, response: Response) -> None:
        response.headers["X-Duplex-Worker"] = str(os.getpid())  # which worker took the session

    async def _handle(self, ws: ServerConnection) -> None:
        assert isinstance(ws, GuardedConnection)  # the class start() asked for
        if not self.capacity.take():  # another worker filled the last place since the handshake's check
            self.refuse(_peer(ws), "capacity", f"{self.config.max_sessions} sessions already")
            await ws.close(1013, "too many sessions; try again later")
            return
        try:
            await self._session(ws)
        finally:
            self.capacity.give()

    async def _session(self, ws: GuardedConnection) -> None:
        beta = "realtime=v1" in (ws.request.headers.get("OpenAI-Beta") or "") if ws.request else False
        query = parse_qs(urlsplit(ws.request.path).query) if ws.request else {}
        extensions = query.get("duplex", ["0"])[-1] not in ("", "0", "false")  # the client asks: ?duplex=1
        conn = Connection(self, ws, BETA if beta else GA, extensions=extensions)
        self.connections.add(conn)
        self.metrics.set("duplex_sessions", len(self.connections))  # now: with workers, a scrape may ask another
        self.memory.opened()
        self.metrics.inc("duplex_sessions_opened_total")
        log.info("session opened", extra={"session": conn.session.id})
        try:
            await conn.run()
        except Exception:
            log.exception("session crashed", extra={"session": conn.session.id})
        finally:
            self.connections.discard(conn)
            self.metrics.set("duplex_sessions", len(self.connections))
            log.info("session closed", extra={"session": conn.session.id})
            self.memory.left()


def _peer(connection: ServerConnection) -> str:
    address = connection.remote_address
    return f"{address[0]}:{address[1]}" if address else "?:?"


def _select_subprotocol(connection: ServerConnection, subprotocols: Sequence[Subprotocol]) -> Subprotocol | None:
    """Answer ``realtime`` when offered; never echo the API-key subprotocol back."""
    if "realtime" in subprotocols:
        return Subprotocol("realtime")
    return next((p for p in subprotocols if not p.startswith(access.KEY_PROTOCOL)), None)
