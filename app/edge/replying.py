"""A connection's replies as running stages: started, prepared ahead, adopted, cancelled.

Each reply runs its :class:`~duplex.pipeline.stages.ReplyStages` in the
connection's TaskGroup and hands every chunk to the connection's paced sink. A
reply *prepared* before its turn is confirmed runs the same way, except that its
first chunk waits at the sink until a :class:`StartReply` asking for exactly that
reply adopts it (then its chunks are re-stamped with the reply's id and epoch);
until then nothing of it reaches the wire, and discarding it leaves no trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Protocol

from websockets.exceptions import ConnectionClosed

from duplex.app.core.actions import CancelReply, PrepareReply, StartReply
from duplex.app.core.events import ServerEvent
from duplex.app.core.session import Session
from duplex.app.edge.config import ServerConfig
from duplex.app.edge.fairness import LoopShare
from duplex.app.edge.metrics import Metrics
from duplex.pipeline.backends import Backends
from duplex.pipeline.stages import ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.thinker import ThinkRequest

log = logging.getLogger("duplex.server")

PREPARED_EPOCHS = 1 << 40
"""Prepared replies' stages run in epochs from here (a session's count from 1)."""


class ReplyEnded(Exception):
    """The session ended the reply from the sink's side (a limit): stop its stages."""


class _Server(Protocol):
    config: ServerConfig
    backends: Backends
    metrics: Metrics
    loop_share: LoopShare


class Owner(Protocol):
    """What the replies need of their connection."""

    session: Session
    loop: asyncio.AbstractEventLoop

    @property
    def server(self) -> _Server: ...

    @property
    def tg(self) -> asyncio.TaskGroup: ...

    async def sink(self, event: ChunkEvent) -> None:
        """Send one chunk when pacing allows (raises :class:`ReplyEnded` when the reply is over)."""
        ...

    async def send(self, events: list[ServerEvent]) -> None: ...

    def nudge(self) -> None: ...

    def __hash__(self) -> int: ...


@dataclass(slots=True)
class Run:
    """A reply's stages as the connection runs them. A prepared reply runs before it
    has a response (its output waits at the sink, then the queues hold the talker
    back); a :class:`StartReply` that asks for the same adopts it."""

    stages: ReplyStages
    response_id: str | None = None
    epoch: int = 0
    adopted: asyncio.Event = field(default_factory=asyncio.Event)
    prepared: PrepareReply | None = None
    task: asyncio.Task[None] | None = None

    def adopt(self, response_id: str, epoch: int) -> None:
        self.response_id, self.epoch = response_id, epoch
        self.adopted.set()

    def serves(self, start: StartReply) -> bool:
        """Whether this prepared reply is what ``start`` asks for."""
        p = self.prepared
        return (
            p is not None
            and replace(p.think, request_id=start.think.request_id) == start.think
            and replace(p.request, request_id=start.request.request_id) == start.request
            and (p.output_rate, p.audio) == (start.output_rate, start.audio)
        )


class Replying:
    """One connection's running reply, and the one prepared ahead of its turn."""

    def __init__(self, owner: Owner) -> None:
        self.c = owner
        self.current: Run | None = None
        self._prepared: Run | None = None
        self._prepared_n = 0

    def _stages(
        self, request: SpeechRequest, epoch: int, output_rate: int, think: ThinkRequest, audio: bool
    ) -> ReplyStages:
        backends = self.c.server.backends
        return ReplyStages(
            backends.talker if audio else None,
            backends.vocoder if audio else None,
            request,
            epoch=epoch,
            output_rate=output_rate,
            queues=self.c.server.config.queues,
            watermark=lambda: self.c.session.input_samples,
            thinker=backends.thinker,
            think=think,
            gate=self.c.server.loop_share.gate(self.c),
        )

    def start(self, action: StartReply) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.serves(action) and prepared.task is not None and not prepared.task.done():
            self.c.server.metrics.inc("duplex_prepared_replies_total", outcome="adopted")
            prepared.adopt(action.response_id, action.epoch)
            self.current = prepared
            return
        if prepared is not None:
            self._discard(prepared)
        run = Run(self._stages(action.request, action.epoch, action.output_rate, action.think, action.audio))
        run.adopt(action.response_id, action.epoch)
        self.current = run
        run.task = self.c.tg.create_task(self._run(run), name=action.response_id)

    def prepare(self, action: PrepareReply) -> None:
        """Start a reply the turn may need, unheard (see :class:`Run`)."""
        self.drop_prepared()
        self._prepared_n += 1
        # Its own epochs, far above the session's (streams refuse epochs below their lowest live one).
        # Its own request id too: a talker keeps a reply's voice and progress by request id.
        rid = f"{action.request.request_id}-{self.c.session.id}-{self._prepared_n}"
        request, think = replace(action.request, request_id=rid), replace(action.think, request_id=rid)
        stages = self._stages(request, PREPARED_EPOCHS + self._prepared_n, action.output_rate, think, action.audio)
        run = Run(stages, prepared=action)
        run.task = self.c.tg.create_task(self._run(run), name="prepared")
        self._prepared = run

    def drop_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._discard(prepared)

    def _discard(self, run: Run) -> None:
        self.c.server.metrics.inc("duplex_prepared_replies_total", outcome="dropped")
        run.stages.retire()
        if run.task is not None:
            run.task.cancel()  # it has sent nothing: it ends without a trace

    async def _run(self, run: Run) -> None:
        reply = run.stages
        events: list[ServerEvent] = []

        async def sink(event: ChunkEvent) -> None:
            await run.adopted.wait()  # a prepared reply holds its first chunk until adopted
            assert run.response_id is not None
            await self.c.sink(replace(event, request_id=run.response_id, epoch=run.epoch))

        try:
            await reply.run(sink)
            await run.adopted.wait()
        except* ReplyEnded:
            pass  # the session already said so (response.done): its stages stop here
        except* ConnectionClosed:
            pass  # the reader sees the close and cleans up
        except* Exception as group:
            error = group.exceptions[0]
            log.warning("reply failed: %r", error, extra={"session": self.c.session.id, "response": run.response_id})
            if run.response_id is not None:
                message = str(error) or type(error).__name__
                events = self.c.session.on_reply_failed(run.response_id, message, self.c.loop.time())
        else:
            assert run.response_id is not None
            events = self.c.session.on_reply_finished(run.response_id, self.c.loop.time(), reply.stats.timings_ms())
        finally:
            reply.retire()
            m = self.c.server.metrics
            m.inc("duplex_stale_events_dropped_total", reply.stats.dropped_stale)
            m.high_water(
                "duplex_queue_high_water_bytes",
                reply.stats.talker_high_water_bytes + reply.stats.output_high_water_bytes,
            )
            m.high_water("duplex_output_queue_high_water_chunks", reply.output_queue.high_water_chunks)
            if self.current is run:
                self.current = None
        with contextlib.suppress(ConnectionClosed):
            await self.c.send(events)

    async def cancel(self, action: CancelReply) -> None:
        self.c.server.metrics.inc("duplex_cancels_total", reason=action.reason)
        run = self.current
        if run is None or run.task is None or run.epoch != action.epoch:
            return
        run.stages.retire()
        self.c.nudge()
        if run.task is not asyncio.current_task() and not run.task.done():
            run.task.cancel()
            await asyncio.wait({run.task})
