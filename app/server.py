"""The edge: WebSocket and HTTP I/O. Everything that awaits a socket lives here.

Each connection owns a sans-I/O :class:`~app.session.Session` and carries out
what it returns: server events are sent, :class:`StartReply` runs a reply as
engine stages in the connection's TaskGroup with a paced sink, and
:class:`CancelReply` retires the reply's epoch and waits for its tasks to end
before anything after it is sent, so no audio of a cancelled reply can follow
its ``response.done``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import websockets
from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from app.config import ServerConfig
from app import access
from app.http import REALTIME_PATH, is_upgrade, json_response, metrics_response, static_file, text_response
from app.memory import release_idle_memory
from app.metrics import Metrics
from app.protocol import BETA, GA, ProtocolError, decode, encode
from app.session import Action, CancelReply, Session, SessionLimits, StartReply, Sync, Transcribe
from app.settings import SessionSettings
from pipeline.asr import Recognizer
from pipeline.engine import Reply
from pipeline.stream import ChunkEvent
from pipeline.talker import Talker
from pipeline.thinker import EchoThinker, Thinker
from pipeline.vad import SileroModel
from pipeline.vocoder import Vocoder

log = logging.getLogger("duplex.server")


class _ReplyEnded(Exception):
    """The session ended the reply from the sink's side (a limit): stop its stages."""


class Connection:
    """One client: its session, its running reply and its ordered sends."""

    def __init__(self, server: DuplexServer, ws: ServerConnection, dialect: str) -> None:
        self.server = server
        self.ws = ws
        self.loop = asyncio.get_running_loop()
        cfg = server.config
        self.session = Session(
            "sess_" + uuid.uuid4().hex[:20],
            self.loop.time(),
            dialect=dialect,
            settings=SessionSettings(voice=cfg.voice),
            check_voice=server.talker.check_voice,
            limits=SessionLimits(max_input_buffer_bytes=cfg.max_input_buffer_bytes,
                                 max_input_speed=cfg.max_input_speed, input_burst_s=cfg.input_burst_s,
                                 max_reply_s=cfg.max_reply_s),
            vad_model=server.vad_model,
            backend=(server.talker.name, server.talker.artifact_id),
        )
        self.session.clock.idle_s = cfg.input_idle_s
        self._send_lock = asyncio.Lock()
        self._progress = asyncio.Event()  # input, acks and cancels wake a paced sink
        self._parked = asyncio.Event()  # set while the sink waits on playback
        self._asr_tasks: set[asyncio.Task[None]] = set()
        self._tg: asyncio.TaskGroup | None = None
        self.reply: Reply | None = None
        self.reply_task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve the client until it disconnects; leave no task behind."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                await self.send(self.session.start())
                while True:
                    try:
                        async with asyncio.timeout(self.server.config.idle_timeout_s):
                            message = await self.ws.recv()
                    except TimeoutError:
                        self.server.refuse(self, "idle", f"no message for {self.server.config.idle_timeout_s:g} s")
                        await self.ws.close(1008, "idle timeout")
                        break
                    self.server.metrics.inc("duplex_bytes_in_total", len(message))
                    await self.handle(message)
            except ConnectionClosed:
                pass
            finally:
                await self.execute(self.session.on_disconnect(), sending=False)

    async def handle(self, message: str | bytes) -> None:
        """One client message: decoded, fed to the session, its outcome carried out."""
        now = self.loop.time()
        if isinstance(message, bytes):
            if len(message) > self.server.config.max_message_bytes:
                err = ProtocolError("message_too_large", f"binary frame of {len(message)} bytes exceeds the limit "
                                    f"of {self.server.config.max_message_bytes} bytes")
                await self.send(self.session.error(err))
                return
            outputs = self.session.feed_binary(message, now)
            self._nudge()
            await self.execute(outputs)
            return
        try:
            event = decode(message, max_bytes=self.server.config.max_message_bytes)
        except ProtocolError as err:
            await self.send(self.session.error(err))
            return
        outputs = self.session.feed(event, now)
        self._nudge()  # input, acks, pause and resume all move a paced sink
        await self.execute(outputs)

    def _nudge(self) -> None:
        """Wake a paced sink; until it has looked again it is not settled."""
        self._progress.set()
        self._parked.clear()

    async def execute(self, outputs: Iterable[dict[str, Any] | Action], *, sending: bool = True) -> None:
        """Carry out a session's outputs, in order."""
        for out in outputs:
            if isinstance(out, StartReply):
                self._start_reply(out)
            elif isinstance(out, CancelReply):
                await self._cancel_reply(out)
            elif isinstance(out, Transcribe):
                assert self._tg is not None
                task = self._tg.create_task(self._transcribe(out), name=f"asr:{out.item_id}")
                self._asr_tasks.add(task)
                task.add_done_callback(self._asr_tasks.discard)
            elif isinstance(out, Sync):
                await self._settle()
                if sending:
                    await self.send(self.session.synced(out.event_id))
            elif sending:
                await self.send([out])

    async def send(self, events: Iterable[dict[str, Any]]) -> None:
        """Send a batch of events back to back: nothing else interleaves with it."""
        dialect = self.session.dialect
        frames: list[str | bytes] = []
        events_seen = list(events)
        for event in events_seen:
            audio = event.pop("audio_bytes", None) if "audio_bytes" in event else None
            text = encode(event, dialect)
            if text is not None:
                frames.append(text)
                if audio is not None:
                    frames.append(audio)  # binary audio mode: the PCM follows its header
        if not frames:
            return
        for event in events_seen:
            self.server.observe(event)
        async with self._send_lock:
            for frame in frames:
                try:
                    async with asyncio.timeout(self.server.config.stall_timeout_s):
                        await self.ws.send(frame)
                except TimeoutError:
                    # The client stopped reading: its queues are full; let it go.
                    self.server.refuse(self, "stalled", f"a send waited {self.server.config.stall_timeout_s:g} s")
                    self.ws.close_timeout = 1.0
                    asyncio.get_running_loop().create_task(self.ws.close(1008, "client not reading"))
                    raise ConnectionClosed(None, None) from None
                self.server.bytes_out += len(frame)
                self.server.metrics.inc("duplex_bytes_out_total", len(frame))

    async def _settle(self) -> None:
        """Wait until nothing more follows from what has been received: recognitions
        done, and the reply (if any) finished or waiting on the client's playback."""
        while True:
            if self._asr_tasks:
                await asyncio.wait(set(self._asr_tasks))
                continue
            task = self.reply_task
            if task is not None and not task.done() and not self._parked.is_set():
                parked = asyncio.ensure_future(self._parked.wait())
                try:
                    await asyncio.wait({task, parked}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    parked.cancel()
                continue
            return

    async def _transcribe(self, action: Transcribe) -> None:
        text, failure = "", None
        recognizer = self.server.recognizer
        started = self.loop.time()
        if recognizer is not None:
            try:
                text = await recognizer.transcribe(action.audio, action.rate)
            except Exception as exc:  # a failed recognition is heard as nothing, not a dead session
                log.exception("recognition failed for %s", action.item_id, extra={"session": self.session.id})
                failure = f"speech recognition failed: {exc}"
        took = (self.loop.time() - started) * 1000
        try:
            await self.execute(self.session.on_transcript(action.item_id, text, self.loop.time(), took, failure))
        except ConnectionClosed:
            pass

    # -- replies -------------------------------------------------------------
    def _start_reply(self, action: StartReply) -> None:
        assert self._tg is not None
        reply = Reply(
            self.server.talker if action.audio else None,
            self.server.vocoder if action.audio else None,
            action.request,
            epoch=action.epoch,
            output_rate=action.output_rate,
            config=self.server.config.engine,
            watermark=lambda: self.session.input_samples,
            thinker=self.server.thinker,
            think=action.think,
        )
        self.reply = reply
        self.reply_task = self._tg.create_task(self._run_reply(reply, action.response_id), name=action.response_id)

    async def _run_reply(self, reply: Reply, response_id: str) -> None:
        self.server.replies_started += 1
        events: list[dict[str, Any]] = []
        try:
            await reply.run(self._sink)
        except* _ReplyEnded:
            pass  # the session already said so (response.done): its stages stop here
        except* ConnectionClosed:
            pass  # the reader sees the close and cleans up
        except* Exception as group:
            error = group.exceptions[0]
            log.warning("reply failed: %r", error, extra={"session": self.session.id, "response": response_id})
            events = self.session.on_reply_failed(response_id, str(error) or type(error).__name__, self.loop.time())
        else:
            events = self.session.on_reply_finished(response_id, self.loop.time(), reply.stats.timings_ms())
        finally:
            reply.retire()
            self.server.stale_dropped += reply.stats.dropped_stale
            queued = reply.stats.talker_high_water_bytes + reply.stats.output_high_water_bytes
            self.server.max_queued_bytes = max(self.server.max_queued_bytes, queued)
            m = self.server.metrics
            m.inc("duplex_stale_events_dropped_total", reply.stats.dropped_stale)
            m.high_water("duplex_queue_high_water_bytes", queued)
            m.high_water("duplex_output_queue_high_water_chunks", reply.output_queue.high_water_chunks)
            if self.reply is reply:
                self.reply = None
        try:
            await self.send(events)
        except ConnectionClosed:
            pass

    async def _sink(self, event: ChunkEvent) -> None:
        """Release one chunk when pacing allows, as audio and transcript deltas; stop the
        reply's stages when the session has ended it (a length limit)."""
        samples = event.payload.audio.length
        while (wait := self.session.output_wait(samples, self.loop.time())) > 0:
            self._progress.clear()
            self._parked.set()
            try:
                async with asyncio.timeout(None if math.isinf(wait) else wait):
                    await self._progress.wait()
            except TimeoutError:
                pass
            finally:
                self._parked.clear()
        await self.send(self.session.on_output(event, self.loop.time()))
        active = self.session.response
        if active is None or active.id != event.request_id:
            raise _ReplyEnded

    async def _cancel_reply(self, action: CancelReply) -> None:
        reply, task = self.reply, self.reply_task
        if reply is None or task is None or reply.epoch != action.epoch:
            return
        reply.retire()
        self.server.cancels[action.reason] = self.server.cancels.get(action.reason, 0) + 1
        self._nudge()
        if task is not asyncio.current_task() and not task.done():
            task.cancel()
            await asyncio.wait({task})


class DuplexServer:
    """The WebSocket/HTTP server: one talker and vocoder shared by every session."""

    def __init__(
        self,
        talker: Talker,
        vocoder: Vocoder,
        config: ServerConfig | None = None,
        *,
        vad_model: SileroModel | None = None,
        recognizer: Recognizer | None = None,
        thinker: Thinker | None = None,
    ) -> None:
        self.talker = talker
        self.vocoder = vocoder
        self.thinker = thinker or EchoThinker()
        self.metrics = Metrics()
        self.vad_model = vad_model
        self.recognizer = recognizer
        self.config = config or ServerConfig()
        self.connections: set[Connection] = set()
        self.replies_started = 0
        self.stale_dropped = 0
        self.max_queued_bytes = 0
        """Most bytes any reply held in its queues: bounded by the engine config."""
        self.bytes_out = 0
        self.cancels: dict[str, int] = {}
        self._server: Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        cfg = self.config
        self._server = await websockets.serve(
            self._handle,
            cfg.host,
            cfg.port,
            process_request=self._process_request,
            select_subprotocol=_select_subprotocol,
            max_size=cfg.max_frame_bytes,
            write_limit=cfg.write_limit,
            compression=None,  # PCM does not compress; deflate would only cost CPU
            ping_interval=20,
            ping_timeout=20,
        )
        log.info("Duplex listening on http://%s:%d/ (realtime at ws://%s:%d%s)",
                 cfg.host, self.port, cfg.host, self.port, REALTIME_PATH)

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    def close(self) -> None:
        """Stop accepting; close every session with a close frame."""
        if self._server is not None:
            self._server.close()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()

    def refuse(self, who: Connection | str, kind: str, reason: str) -> None:
        """One log line and one counter for every refusal and forced close."""
        where = who.session.id if isinstance(who, Connection) else who
        log.warning("refused %s: %s (%s)", where, reason, kind, extra={"session": where, "refusal": kind})
        self.metrics.inc("duplex_refusals_total", kind=kind)

    def observe(self, event: dict[str, Any]) -> None:
        """Count what the server tells clients."""
        m, etype = self.metrics, event["type"]
        if etype == "response.done":
            r = event["response"]
            m.inc("duplex_replies_total", status=r["status"])
            if r["status"] == "cancelled":
                m.inc("duplex_cancels_total", reason=(r.get("status_details") or {}).get("reason", "unknown"))
            first = (r.get("timings") or {}).get("first_audio")
            if first is not None:
                m.observe("duplex_first_audio_seconds", first / 1000)
        elif etype == "response.output_audio.paused":
            m.observe("duplex_barge_in_pause_seconds", event.get("detected_after_ms", 0) / 1000)
        elif etype == "conversation.item.input_audio_transcription.completed" and "recognition_ms" in event:
            m.observe("duplex_recognition_seconds", event["recognition_ms"] / 1000)  # queue + decode
        elif etype == "conversation.item.input_audio_transcription.failed":
            m.inc("duplex_recognition_failures_total")
        elif etype == "error":
            m.inc("duplex_errors_total", code=event["error"]["code"])

    def metrics_text(self) -> str:
        m = self.metrics
        m.set("duplex_sessions", len(self.connections))
        m.set("duplex_tasks", len(asyncio.all_tasks()))
        m.set("duplex_stale_chunks_dropped_by_sessions", sum(c.session.speaker.stale_dropped
                                                                for c in self.connections))
        return m.render()

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        peer = "%s:%s" % (connection.remote_address[:2] if connection.remote_address else ("?", "?"))
        if path in (REALTIME_PATH, REALTIME_PATH + "/"):
            if not is_upgrade(request):
                return text_response(HTTPStatus.UPGRADE_REQUIRED, "this endpoint speaks WebSocket")
            cfg = self.config
            refusal = access.check(request, api_key=cfg.api_key,
                                   origins=access.allowed_origins(cfg.allowed_origins, cfg.host, self.port))
            if refusal is not None:
                self.refuse(peer, "forbidden" if refusal.status == HTTPStatus.FORBIDDEN else "unauthorized",
                            refusal.reason)
                return text_response(refusal.status, refusal.reason)
            if len(self.connections) >= self.config.max_sessions:
                self.refuse(peer, "capacity", f"{self.config.max_sessions} sessions already")
                return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "too many sessions")
            return None
        if path == "/healthz":
            return json_response(HTTPStatus.OK, {"status": "ok", "sessions": len(self.connections)})
        if path == "/metrics":
            return metrics_response(self.metrics_text())
        if is_upgrade(request):
            return text_response(HTTPStatus.NOT_FOUND, f"WebSocket endpoint is {REALTIME_PATH}")
        return static_file(self.config.web_dir, path)

    async def _handle(self, ws: ServerConnection) -> None:
        beta = "realtime=v1" in (ws.request.headers.get("OpenAI-Beta") or "") if ws.request else False
        conn = Connection(self, ws, BETA if beta else GA)
        self.connections.add(conn)
        self.metrics.inc("duplex_sessions_total")
        log.info("session opened", extra={"session": conn.session.id})
        try:
            await conn.run()
        except Exception:
            log.exception("session crashed", extra={"session": conn.session.id})
        finally:
            self.connections.discard(conn)
            log.info("session closed", extra={"session": conn.session.id})
            if not self.connections:
                release_idle_memory()  # the last one out: what a burst of sessions held goes back


def _select_subprotocol(connection: ServerConnection, subprotocols: list[str]) -> str | None:
    """Answer ``realtime`` when offered; never echo the API-key subprotocol back."""
    if "realtime" in subprotocols:
        return "realtime"
    return next((p for p in subprotocols if not p.startswith(access.KEY_PROTOCOL)), None)
