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
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from websockets.exceptions import ConnectionClosed

from duplex.app.core.actions import CancelReply, Prefill, PrepareReply, ReplyPlan, StartReply
from duplex.app.core.events import ServerEvent
from duplex.app.edge.fairness import OwnerGate
from duplex.app.edge.metrics import Metrics
from duplex.pipeline.backends import Backends
from duplex.pipeline.stages import ReplyStages, StageQueues
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.thinker import ThinkRequest

log = logging.getLogger("duplex.server")


class ReplyEnded(Exception):
    """The session ended the reply from the sink's side (a limit): stop its stages."""


class ReplyPort(Protocol):
    """What a reply may do to the world, and what it runs on: the port a connection
    opens for its replies (a second transport's connection would open the same).
    A reply reads the input clock (:meth:`watermark`), runs as the connection's tasks
    (:meth:`spawn`), hands its chunks to the paced :meth:`sink`, sends the session's
    events (:meth:`send`) and asks the session for those of its end (:meth:`finished`,
    :meth:`failed`); nothing else of the connection is in its reach."""

    @property
    def session_id(self) -> str: ...

    @property
    def backends(self) -> Backends: ...

    @property
    def queues(self) -> StageQueues: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def gate(self) -> OwnerGate:
        """The connection's share of the event loop (the stages' unpaced output is charged to it)."""
        ...

    def watermark(self) -> int:
        """Input samples heard so far (stamped on every chunk)."""
        ...

    def spawn(self, job: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run a task in the connection's TaskGroup."""
        ...

    async def sink(self, event: ChunkEvent) -> None:
        """Send one chunk when pacing allows (raises :class:`ReplyEnded` when the reply is over)."""
        ...

    async def send(self, events: Iterable[ServerEvent]) -> None:
        """Send a batch of the session's events, back to back."""
        ...

    def nudge(self) -> None:
        """Wake the paced sink (a cancel moves it)."""
        ...

    def finished(self, response_id: str, timings: dict[str, float]) -> list[ServerEvent]:
        """The session's events for a reply the pipeline delivered whole."""
        ...

    def failed(self, response_id: str, message: str) -> list[ServerEvent]:
        """...and for one that failed."""
        ...


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
        self.stages.stats.response_start_s = self.stages.stats.since()
        self.adopted.set()

    def serves(self, start: StartReply) -> bool:
        """Whether this prepared reply is what ``start`` asks for: the same plan."""
        return self.prepared is not None and self.prepared.plan == start.plan


class Replying:
    """One connection's running reply, and the one prepared ahead of its turn."""

    def __init__(self, port: ReplyPort) -> None:
        self.c = port
        self.current: Run | None = None
        self._prepared: Run | None = None
        self._prefills = 0

    def _stages(self, plan: ReplyPlan, request_id: str, epoch: int) -> ReplyStages:
        backends = self.c.backends
        return ReplyStages(
            backends.talker if plan.audio else None,
            backends.vocoder if plan.audio else None,
            plan.speech(request_id),
            epoch=epoch,
            output_rate=plan.output_rate,
            queues=self.c.queues,
            watermark=self.c.watermark,
            thinker=None if plan.said is not None else backends.thinker,
            think=None if plan.said is not None else replace(plan.think(request_id), conversation=self.c.session_id),
            gate=self.c.gate,
        )

    def start(self, action: StartReply) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.serves(action) and prepared.task is not None and not prepared.task.done():
            self.c.metrics.inc("duplex_prepared_replies_total", outcome="adopted")
            prepared.adopt(action.response_id, action.epoch)
            self.current = prepared
            return
        if prepared is not None:
            self._discard(prepared)
        run = Run(self._stages(action.plan, action.response_id, action.epoch))
        run.adopt(action.response_id, action.epoch)
        self.current = run
        run.task = self.c.spawn(self._run(run), action.response_id)

    def prepare(self, action: PrepareReply) -> None:
        """Start a reply the turn may need, unheard (see :class:`Run`)."""
        self.drop_prepared()
        # Its own request id: a talker keeps a reply's voice and progress by request id.
        rid = f"prepared-{self.c.session_id}-{action.epoch}"
        stages = self._stages(action.plan, rid, action.epoch)
        run = Run(stages, prepared=action)
        run.task = self.c.spawn(self._run(run), "prepared")
        self._prepared = run

    def prefill(self, action: Prefill) -> None:
        """Let the thinker read ahead (see :class:`Prefill`); a reply under way is left alone."""
        if self.current is not None or self._prepared is not None:
            return
        self._prefills += 1
        rid = f"prefill-{self.c.session_id}-{self._prefills}"
        request = replace(action.plan.think(rid), conversation=self.c.session_id)
        self.c.spawn(self._prefill(request), "prefill")

    async def _prefill(self, request: ThinkRequest) -> None:
        try:
            await self.c.backends.thinker.prefill(request)
        except Exception as exc:  # reading ahead is only ever a saving: the reply will say what is wrong
            log.debug("prefill failed: %r", exc, extra={"session": self.c.session_id})

    def drop_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._discard(prepared)

    def _discard(self, run: Run) -> None:
        self.c.metrics.inc("duplex_prepared_replies_total", outcome="dropped")
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
            log.warning("reply failed: %r", error, extra={"session": self.c.session_id, "response": run.response_id})
            if run.response_id is not None:
                events = self.c.failed(run.response_id, str(error) or type(error).__name__)
        else:
            assert run.response_id is not None
            events = self.c.finished(run.response_id, reply.stats.timings_ms())
        finally:
            reply.retire()
            m = self.c.metrics
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
        self.c.metrics.inc("duplex_cancels_total", reason=action.reason)
        run = self.current
        if run is None or run.task is None or run.epoch != action.epoch:
            return
        run.stages.retire()
        self.c.nudge()
        if run.task is not asyncio.current_task() and not run.task.done():
            run.task.cancel()
            await asyncio.wait({run.task})
