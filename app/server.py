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
from app.http import REALTIME_PATH, is_upgrade, json_response, static_file, text_response
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
            limits=SessionLimits(max_input_buffer_bytes=cfg.max_input_buffer_bytes),
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
                async for message in self.ws:
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
        for event in events:
            audio = event.pop("audio_bytes", None) if "audio_bytes" in event else None
            text = encode(event, dialect)
            if text is not None:
                frames.append(text)
                if audio is not None:
                    frames.append(audio)  # binary audio mode: the PCM follows its header
        if not frames:
            return
        async with self._send_lock:
            for frame in frames:
                await self.ws.send(frame)
                self.server.bytes_out += len(frame)

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
        text = ""
        recognizer = self.server.recognizer
        started = self.loop.time()
        if recognizer is not None:
            try:
                text = await recognizer.transcribe(action.audio, action.rate)
            except Exception:  # a failed recognition is heard as nothing, not a dead session
                log.exception("recognition failed for %s", action.item_id)
        took = (self.loop.time() - started) * 1000
        try:
            await self.execute(self.session.on_transcript(action.item_id, text, self.loop.time(), took))
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
        except* ConnectionClosed:
            pass  # the reader sees the close and cleans up
        except* Exception as group:
            error = group.exceptions[0]
            log.warning("reply %s failed: %r", response_id, error)
            events = self.session.on_reply_failed(response_id, str(error) or type(error).__name__, self.loop.time())
        else:
            events = self.session.on_reply_finished(response_id, self.loop.time(), reply.stats.timings_ms())
        finally:
            self.server.stale_dropped += reply.stats.dropped_stale
            queued = reply.stats.talker_high_water_bytes + reply.stats.output_high_water_bytes
            self.server.max_queued_bytes = max(self.server.max_queued_bytes, queued)
            if self.reply is reply:
                self.reply = None
        try:
            await self.send(events)
        except ConnectionClosed:
            pass

    async def _sink(self, event: ChunkEvent) -> None:
        """Release one chunk when pacing allows, as audio and transcript deltas."""
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

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in (REALTIME_PATH, REALTIME_PATH + "/"):
            if not is_upgrade(request):
                return text_response(HTTPStatus.UPGRADE_REQUIRED, "this endpoint speaks WebSocket")
            if len(self.connections) >= self.config.max_sessions:
                return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "too many sessions")
            return None
        if path == "/healthz":
            return json_response(HTTPStatus.OK, {"status": "ok", "sessions": len(self.connections)})
        if is_upgrade(request):
            return text_response(HTTPStatus.NOT_FOUND, f"WebSocket endpoint is {REALTIME_PATH}")
        return static_file(self.config.web_dir, path)

    async def _handle(self, ws: ServerConnection) -> None:
        beta = "realtime=v1" in (ws.request.headers.get("OpenAI-Beta") or "") if ws.request else False
        conn = Connection(self, ws, BETA if beta else GA)
        self.connections.add(conn)
        try:
            await conn.run()
        except Exception:
            log.exception("session %s crashed", conn.session.id)
        finally:
            self.connections.discard(conn)
