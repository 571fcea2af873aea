"""One client's connection: its session, its running reply and its ordered sends.

The connection owns a sans-I/O :class:`~duplex.app.core.session.Session` and
carries out what it returns: server events are rendered by the connection's
:class:`~duplex.app.core.wire.Wire` and sent; :class:`StartReply` runs a reply's
stages in the connection's TaskGroup with a paced sink; :class:`CancelReply`
retires the reply's epoch and waits for its tasks to end before anything after it
is sent, so no audio of a cancelled reply can follow its ``response.done``.

Why this module is long: every action the session returns is carried out here, in one
TaskGroup and one send order (a cancel before what follows it, a sync after what came
before it); split, that order would be kept by several files at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol

from websockets.exceptions import ConnectionClosed

from duplex.app.core.actions import (
    Action,
    CancelReply,
    DropPrepared,
    PredictTurn,
    Prefill,
    PrepareReply,
    StartReply,
    Sync,
    Transcribe,
)
from duplex.app.core.events import Error, ServerEvent
from duplex.app.core.listening import Ears
from duplex.app.core.protocol import ClientEvent, ProtocolError, decode_event
from duplex.app.core.session import Output, Session
from duplex.app.core.settings import SessionSettings, TurnDetection
from duplex.app.core.wire import Wire
from duplex.app.edge.config import ServerConfig
from duplex.app.edge.fairness import FairQueue, LoopShare, Moot, RealTime, WaitingJobs
from duplex.app.edge.metrics import Metrics
from duplex.app.edge.replying import ReplyEnded, Replying
from duplex.app.edge.transport import GuardedConnection
from duplex.pipeline.backends import Backends
from duplex.pipeline.stream import ChunkEvent

log = logging.getLogger("duplex.server")


class Host(Protocol):
    """What a connection needs of its server: settings, backends, counters."""

    config: ServerConfig
    backends: Backends
    metrics: Metrics
    loop_share: LoopShare
    recognitions: FairQueue
    turn_questions: FairQueue

    def refuse(self, who: Connection | str, kind: str, reason: str) -> None:
        """Log and count a refusal or forced close."""
        ...

    def observe(self, event: ServerEvent) -> None:
        """Count an event sent to a client."""
        ...

    def heard(self, conn: Connection, seconds: float, now: float) -> None:
        """Count loop time spent hearing a session's real-time audio (it may shed one)."""
        ...


HEAR_SLICE_S = 0.1
"""Largest slice of audio heard at once (~3 VAD windows: a few ms of the event loop)."""


def ears_of(backends: Backends) -> Ears:
    """What the server's listening backends can do, for the realtime core."""
    r = backends.recognizer
    return Ears(r is not None, bool(r is not None and r.partials), backends.turn_model is not None)


class Connection:
    """One client: its session, its running reply and its ordered sends."""

    def __init__(self, server: Host, ws: GuardedConnection, dialect: str, *, extensions: bool = True) -> None:
        self.server = server
        self.ws = ws
        self.loop = asyncio.get_running_loop()
        cfg = server.config
        backends = server.backends
        self.session = Session(
            "sess_" + uuid.uuid4().hex[:20],
            self.loop.time(),
            settings=SessionSettings(
                voice=cfg.voice,
                turn_detection=TurnDetection(type=cfg.turn_detection),
                echo_cancellation=cfg.echo_cancellation,
            ),
            check_voice=backends.talker.check_voice,
            limits=cfg.limits,
            voice_activity=backends.voice_activity,
            backend=(backends.talker.name, backends.talker.artifact_id),
            ears=ears_of(backends),
            tools=getattr(backends.thinker, "tools", False),
            can_duck=extensions,  # a client that cannot be told to duck has the reply stop instead
            input_idle_s=cfg.input_idle_s,
            cleaning=backends.cleaning,
        )
        self.wire = Wire(self.session.id, dialect, extensions=extensions)
        self._send_lock = asyncio.Lock()
        self._real_time = RealTime(self.loop.time())  # input at the pace of speech is never held back
        self._progress = asyncio.Event()  # input, acks and cancels wake a paced sink
        self._parked = asyncio.Event()  # set while the sink waits on playback
        self._hearing: set[asyncio.Task[None]] = set()  # recognitions and end-of-turn questions
        self._waiting: WaitingJobs[Transcribe | PredictTurn] = WaitingJobs(self.session.still_wanted)
        self._tg: asyncio.TaskGroup | None = None
        self._syncing: asyncio.Task[None] | None = None  # the last session.sync's answer
        self.opened_at = self.loop.time()
        self.heard_at: float | None = None
        """When real-time microphone audio was last heard (what the hearing budget counts)."""
        # What its replies run on (the ReplyPort it opens for them).
        self.backends, self.queues, self.metrics = backends, cfg.queues, server.metrics
        self.gate = server.loop_share.gate(self)
        self.replies = Replying(self)

    # -- the port its replies use (replying.ReplyPort) ------------------------
    @property
    def session_id(self) -> str:
        return self.session.id

    def watermark(self) -> int:
        return self.session.input_samples

    def spawn(self, job: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return self.tg.create_task(job, name=name)

    def finished(self, response_id: str, timings: dict[str, float]) -> list[ServerEvent]:
        return self.session.on_reply_finished(response_id, self.loop.time(), timings)

    def failed(self, response_id: str, message: str) -> list[ServerEvent]:
        return self.session.on_reply_failed(response_id, message, self.loop.time())

    async def run(self) -> None:
        """Serve the client until it disconnects; leave no task behind."""
        try:
            await self._serve()
        finally:
            # Only now, with every task of the session done: a reply's last frames were
            # charged to it after an earlier forget, and the account outlived the session.
            self.server.loop_share.forget(self)

    async def _serve(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                await self.send(self.session.start())
                idle = self.server.config.idle_timeout_s
                active_at = self.loop.time()
                while True:
                    try:
                        async with asyncio.timeout_at(active_at + idle):
                            message = await self.ws.recv()
                    except TimeoutError:
                        self.server.refuse(self, "idle", f"nothing but keepalives for {idle:g} s")
                        await self.ws.close(1008, "idle timeout")
                        break
                    self.server.metrics.inc("duplex_bytes_in_total", len(message))
                    if await self.handle(message):
                        active_at = self.loop.time()
                    await asyncio.sleep(0)  # one message at a time, then the other sessions' turn
            except ConnectionClosed:
                pass
            finally:
                for task in self._hearing:  # a session that is gone needs no transcripts
                    task.cancel()
                self.replies.drop_prepared()
                await self.execute(self.session.on_disconnect(), sending=False)

    async def handle(self, message: str | bytes) -> bool:
        """One client message: decoded, fed to the session, its outcome carried out.
        Returns whether it was activity (not only a keepalive) for the idle timeout.

        Its handling is charged to this session's share of the event loop, and the
        next waits until the share allows, so a session that floods the server slows
        only itself."""
        share = self.server.loop_share
        await share.wait(self)
        with share.charge(self):
            audio, outputs, activity = self._decode(message, self.loop.time())
        if audio is not None:
            await self._hear(audio)
            return True
        self.nudge()  # acks, pause and resume all move a paced sink
        await self.execute(outputs)
        return activity

    def _decode(self, message: str | bytes, now: float) -> tuple[bytes | None, Output, bool]:
        """Audio to hear (admitted), or the session's outputs for any other message."""
        try:
            if isinstance(message, bytes):  # the WebSocket layer already refused larger frames
                return self._admit(message, None, now), [], True
            event = decode_event(message, max_bytes=self.server.config.max_message_bytes)
            if event.type == "input_audio_buffer.append":
                return self._admit(event, event.event_id, now), [], True
        except ProtocolError as err:
            return None, [Error(err)], True
        activity = self.session.is_activity(event, now)
        return None, self.session.feed(event, now), activity

    def _admit(self, message: ClientEvent | bytes, event_id: str | None, now: float) -> bytes:
        """Microphone audio admitted under the session's limits (raises ProtocolError)."""
        try:
            raw = self.session.audio_of(message)
            self.session.accept_audio(raw, now)
            return raw
        except ProtocolError as err:
            raise err.with_event_id(event_id) from None

    async def _hear(self, raw: bytes) -> None:
        """Admitted microphone audio, heard in slices: at up to real time at once (and not
        charged), faster only as the session's share of the loop allows (each such slice
        charged to it)."""
        session, share = self.session, self.server.loop_share
        step = max(2, int(session.settings.input_rate * HEAR_SLICE_S) * 2)
        for i in range(0, len(raw), step):
            piece = raw[i : i + step]
            if self._real_time.take(session.seconds_of(piece), self.loop.time()):
                # The thread's CPU time, not wall time: what one more microphone costs. On
                # cores the server's own models keep busy, waiting for a core had made four
                # microphones read as 53% of the loop (11 ms a second each) and shed one.
                began = time.thread_time()
                outputs = session.hear(piece, self.loop.time())
                self.heard_at = self.loop.time()
                self.server.heard(self, time.thread_time() - began, self.heard_at)
            else:
                await share.wait(self)
                with share.charge(self):
                    outputs = session.hear(piece, self.loop.time())
            self.nudge()  # input moves a paced sink
            await self.execute(outputs)

    def nudge(self) -> None:
        """Wake a paced sink; until it has looked again it is not settled."""
        self._progress.set()
        self._parked.clear()

    async def execute(self, outputs: Iterable[ServerEvent | Action], *, sending: bool = True) -> None:
        """Carry out a session's outputs, in order."""
        for out in outputs:
            if isinstance(out, StartReply):
                self.replies.start(out)
            elif isinstance(out, CancelReply):
                await self.replies.cancel(out)
            elif isinstance(out, Transcribe):
                self._queue(out, self._transcribe(out), f"asr:{out.kind}:{out.item_id}")
            elif isinstance(out, PredictTurn):
                self._queue(out, self._predict(out), "end-of-turn")
            elif isinstance(out, PrepareReply):
                self.replies.prepare(out)
            elif isinstance(out, Prefill):
                self.replies.prefill(out)
            elif isinstance(out, DropPrepared):
                self.replies.drop_prepared()
            elif isinstance(out, Sync):
                if sending:
                    self._answer_sync(out)
            elif sending:
                await self.send([out])

    def _queue(self, action: Transcribe | PredictTurn, job: Coroutine[Any, Any, None], name: str) -> None:
        """Run a recognition or end-of-turn question (once this session's moot ones are dropped)."""
        self._waiting.add(self._spawn(job, name), action)

    def _spawn(self, job: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        assert self._tg is not None
        task = self._tg.create_task(job, name=name)
        self._hearing.add(task)
        task.add_done_callback(self._hearing.discard)
        return task

    async def send(self, events: Iterable[ServerEvent]) -> None:
        """Send a batch of events back to back: nothing else interleaves with it. Rendering
        is the session's loop time too (a session.updated with many tools is not free)."""
        with self.server.loop_share.charge(self):
            frames = self._render(events)
        await self._write(frames)

    def _render(self, events: Iterable[ServerEvent]) -> list[str | bytes]:
        """The frames of a batch of events (and the metrics they feed)."""
        settings = self.session.settings
        frames: list[str | bytes] = []
        for event in events:
            frames += self.wire.render(event, binary_audio=settings.binary_audio, audio_format=settings.output_format)
            self.server.observe(event)
        return frames

    async def _write(self, frames: list[str | bytes]) -> None:
        if not frames:
            return
        async with self._send_lock:
            for frame in frames:
                try:
                    async with asyncio.timeout(self.server.config.stall_timeout_s):
                        await self.ws.send(frame)
                except TimeoutError:
                    # The client stopped reading: its queues are full; let it go now,
                    # not at the next keepalive tick (that ping would wait on the same drain).
                    self.ws.drop(f"a send waited {self.server.config.stall_timeout_s:g} s")
                    raise ConnectionClosed(None, None) from None
                self.server.metrics.inc("duplex_bytes_out_total", len(frame))

    def close_soon(self, code: int, reason: str) -> None:
        """Close the session (its reader then ends it), without waiting here."""
        self.tg.create_task(self.ws.close(code, reason), name="close")

    def _answer_sync(self, sync: Sync) -> None:
        """Answer ``session.sync`` once settled, in order, without holding up the reader:
        while a long reply is made the client can still talk over it (and be heard), and
        its pings are still answered."""
        before = self._syncing

        async def answer() -> None:
            if before is not None:
                await asyncio.wait({before})
            await self._settle()
            with contextlib.suppress(ConnectionClosed):
                await self.send(self.session.synced(sync.event_id))

        self._syncing = self.tg.create_task(answer(), name="sync")

    async def _settle(self) -> None:
        """Wait until nothing more follows from what has been received: recognitions
        done, and the reply (if any) finished or waiting on the client's playback."""
        while True:
            if self._hearing:
                await asyncio.wait(set(self._hearing))
                continue
            run = self.replies.current
            task = run.task if run is not None else None
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
        recognizer = self.server.backends.recognizer
        started = self.loop.time()
        partial = action.kind == "partial"
        if recognizer is not None:
            queue = self.server.recognitions

            def go_on() -> None:
                self._waiting.check(action)

            async def job() -> str:
                go_on()
                return await recognizer.transcribe(action.audio, action.rate, partial=partial, go_on=go_on)

            try:
                # Fair across sessions: a session that floods waits its turn, not everyone else;
                # a partial only on what turns and candidates leave, the latest one a session has.
                text = await (queue.spare(self, job, behind=action.urgent) if partial else queue.run(self, job))
            except Moot:
                return  # the user went on past that pause, or a newer partial came: nobody needs it
            except Exception as exc:  # a failed recognition is heard as nothing, not a dead session
                if not partial:
                    log.warning(
                        "recognition failed for %s: %r", action.item_id, exc, extra={"session": self.session.id}
                    )
                failure = f"speech recognition failed: {exc}"
        took = (self.loop.time() - started) * 1000
        outputs = self.session.on_transcript(action.heard(text, took, failure), self.loop.time())
        with contextlib.suppress(ConnectionClosed):
            await self.execute(outputs)

    async def _predict(self, action: PredictTurn) -> None:
        model = self.server.backends.turn_model
        if model is None:
            return

        async def job() -> float:
            self._waiting.check(action)
            return await model.complete(action.audio, action.rate)

        try:
            # One fair queue across sessions (a pause storm waits behind itself), and a
            # question about a pause the user has since spoken past is not asked.
            probability = await self.server.turn_questions.run(self, job)
        except Moot:
            return
        except Exception as exc:  # no answer: the turn detector falls back on silence
            log.warning("end-of-turn model failed: %r", exc, extra={"session": self.session.id})
            return
        with contextlib.suppress(ConnectionClosed):
            await self.execute(self.session.on_turn_probability(action.speech_end, probability, self.loop.time()))

    # -- replies -------------------------------------------------------------
    @property
    def tg(self) -> asyncio.TaskGroup:
        assert self._tg is not None
        return self._tg

    async def sink(self, event: ChunkEvent) -> None:
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
        share = self.server.loop_share  # an unpaced reply is work for the loop too: the session's share
        await share.wait(self)
        with share.charge(self):
            delivery = self.session.on_output(event, self.loop.time())
            frames = self._render(delivery.events)
        if delivery.stale:
            self.server.metrics.inc("duplex_stale_events_dropped_total")
            raise ReplyEnded
        await self._write(frames)
        if not delivery.goes_on:
            raise ReplyEnded
