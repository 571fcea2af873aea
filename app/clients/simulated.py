"""A simulated duplex client on the input sample clock: the core of replays and tests.

It streams microphone audio in frames and, after each frame, asks the server to
``session.sync``: the server answers once everything that frame caused has been
sent. So the client knows exactly which audio arrived by which input sample, and
can run faster than real time while behaving like a real-time client. Its
speaker is a playout buffer draining at real time on the same clock; it pauses,
resumes and drops audio on the server's events, and reports what it played with
``playback.ack`` as a real client does.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from duplex.app.clients.realtime import AUDIO_DELTAS, RealtimeClient, pcm_b64
from duplex.app.clients.room import Echo, Room


@dataclass(slots=True)
class Received:
    """A server event and the input sample the client had sent when it arrived."""

    at: int
    event: dict[str, Any]
    wall: float = 0.0
    """When it arrived (monotonic seconds), for latency reports."""


@dataclass(slots=True)
class Heard:
    """What the simulated speaker did with one reply."""

    response_id: str
    received: int = 0
    played: int = 0
    dropped: int = 0
    first_audio_at: int | None = None
    """Input sample at which the first audio of the reply arrived."""
    first_played_at: int | None = None
    stopped_at: int | None = None
    """Input sample at which output stopped for good (cancel, truncation, pause or duck)."""
    done: bool = False
    stale_bytes: int = 0
    """Audio bytes that cannot belong to this reply: after its response.done, or out
    of its own sequence (another epoch's chunk under its id). Must stay 0."""
    next_seq: int = 0
    epoch: int | None = None
    pcm: list[np.ndarray] = field(default_factory=list)
    history: list[tuple[int, int]] = field(default_factory=list)
    """(input sample, samples played) at each frame boundary."""


class SimulatedClient:
    """Drive a Realtime connection on a simulated input clock."""

    def __init__(
        self,
        client: RealtimeClient,
        *,
        input_rate: int = 24000,
        output_rate: int = 24000,
        frame_ms: int = 20,
        ack_every_ms: int | None = 100,
        keep_audio: bool = False,
        record: bool = False,
        realtime: bool = False,
        room: Room | None = None,
    ) -> None:
        self.client = client
        self.ws = client.ws
        self.input_rate = input_rate
        self.output_rate = output_rate
        self.frame = input_rate * frame_ms // 1000
        self.ack_every = None if ack_every_ms is None else input_rate * ack_every_ms // 1000
        self.keep_audio = keep_audio
        self.record = record
        self.mic: list[np.ndarray] = []
        """What the microphone sent (with ``record``)."""
        self.speaker: list[np.ndarray] = []
        """What the speaker played, frame by frame, silence included (with ``record``)."""
        self.realtime = realtime
        if room is not None and input_rate != output_rate:
            raise ValueError("a room needs the speaker and the microphone at one rate")
        self._echo = Echo(room, input_rate) if room is not None else None
        """The speaker heard by the microphone (a speakerphone), if any."""
        self._reader: asyncio.Task[None] | None = None
        self._clock_start: float | None = None  # wall time of input sample 0, in real-time mode
        self.input_samples = 0
        self.sent_wall: dict[int, float] = {}
        """Input sample count after each frame -> when that frame was sent."""
        self.events: list[Received] = []
        self.heard: dict[str, Heard] = {}
        self._buffer: deque[tuple[str, np.ndarray]] = deque()  # playout queue: (response_id, pcm)
        self._paused = False
        self._gain = 1.0  # the speaker's gain: below 1 while a reply is ducked
        self._current: str | None = None  # response whose audio is at the head of the buffer
        self._last_ack = 0
        self._played_out = 0.0  # fractional output samples owed to the speaker

    @classmethod
    async def open(cls, url: str | int, *, extensions: bool = True, **kwargs: Any) -> SimulatedClient:
        """Connect to ``url`` (or a port on this machine), read ``session.created``;
        ``extensions``: ask for Duplex's own events, as the project's clients do."""
        if isinstance(url, int):
            url = f"ws://127.0.0.1:{url}/v1/realtime"
        client = await RealtimeClient.open(url, keep=False, id_prefix="sim", extensions=extensions)
        return cls(client, **kwargs)

    # -- sending -------------------------------------------------------------
    async def send(self, etype: str, **fields: Any) -> None:
        await self.client.send(etype, **fields)

    async def start(self) -> None:
        """In real-time mode, read events in the background as they come."""
        if self.realtime and self._reader is None:
            self._reader = asyncio.create_task(self._read_forever())

    async def _read_forever(self) -> None:
        try:
            async for message in self.ws:
                event = json.loads(message)
                self.events.append(Received(self.input_samples, event, time.monotonic()))
                self._on_event(event)
        except websockets.ConnectionClosed:
            pass

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None

    async def sync(self) -> list[Received]:
        """Wait until the server has sent everything earlier events caused.

        In real-time mode there is no barrier: the background reader keeps up."""
        if self.realtime:
            await asyncio.sleep(0)
            return []
        await self.send("session.sync")
        new: list[Received] = []
        while True:
            event = json.loads(await self.ws.recv())
            if event["type"] == "session.synced":
                return new
            rec = Received(self.input_samples, event, time.monotonic())
            self.events.append(rec)
            new.append(rec)
            self._on_event(event)

    async def stream(self, pcm: np.ndarray) -> list[Received]:
        """Send microphone audio frame by frame, playing what arrives in between."""
        new: list[Received] = []
        for i in range(0, pcm.size, self.frame):
            frame = pcm[i : i + self.frame]
            if self.realtime:  # hold the capture's pace: this is the microphone's clock
                if self._clock_start is None:
                    self._clock_start = time.monotonic() - self.input_samples / self.input_rate
                due = self._clock_start + self.input_samples / self.input_rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            # The speaker plays this frame's time from what had arrived by its start;
            # what the frame's audio makes the server send arrives at its end.
            played = self._play(frame.size)
            if self._echo is not None:  # ... and the microphone hears it through the room
                mixed = frame.astype(np.float32) + self._echo(played)
                frame = np.clip(np.round(mixed), -32768, 32767).astype(np.int16)
            if self.record:
                self.mic.append(frame.copy())
            await self.send("input_audio_buffer.append", audio=pcm_b64(frame))
            self.input_samples += frame.size
            self.sent_wall[self.input_samples] = time.monotonic()
            new += await self.sync()
            if self.ack_every is not None and self.input_samples - self._last_ack >= self.ack_every:
                await self._ack()
        return new

    async def stall(self, seconds: float) -> list[Received]:
        """Keep sending the microphone for ``seconds`` of input but read nothing (a
        frozen UI thread, say); then read again. The speaker starves meanwhile."""
        sock = self.ws.transport.get_extra_info("socket")
        if sock is not None:  # a small window, so the server's side fills up, not our kernel's
            import socket

            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        self.ws.transport.pause_reading()
        frame = np.zeros(self.frame, np.int16)
        payload = pcm_b64(frame)
        try:
            for _ in range(int(seconds * self.input_rate) // self.frame):
                await self.send("input_audio_buffer.append", audio=payload)
                self.input_samples += frame.size
        finally:
            self.ws.transport.resume_reading()
        return await self.sync()

    async def silence(self, seconds: float) -> list[Received]:
        return await self.stream(np.zeros(int(seconds * self.input_rate), np.int16))

    async def _ack(self) -> None:
        self._last_ack = self.input_samples
        rid = self._current or (self._buffer[0][0] if self._buffer else None)
        if rid is None:
            return
        await self.send(
            "playback.ack", response_id=rid, played_samples=self.heard[rid].played, input_samples=self.input_samples
        )

    # -- the speaker ---------------------------------------------------------
    def _on_event(self, event: dict[str, Any]) -> None:
        etype = event["type"]
        if etype in AUDIO_DELTAS:
            rid = event["response_id"]
            h = self.heard.setdefault(rid, Heard(rid))
            pcm = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
            if h.done:
                h.stale_bytes += pcm.size * 2
                return
            # Duplex's extension fields: seq is gap-free per reply, the epoch fixed.
            seq, epoch = event.get("seq"), event.get("epoch")
            if seq is not None:
                if seq != h.next_seq or (h.epoch is not None and epoch != h.epoch):
                    h.stale_bytes += pcm.size * 2
                h.next_seq = seq + 1
                h.epoch = epoch if h.epoch is None else h.epoch
            if h.first_audio_at is None:
                h.first_audio_at = self.input_samples
            h.received += pcm.size
            self._buffer.append((rid, pcm))
            if self.keep_audio:
                h.pcm.append(pcm)
        elif etype == "response.output_audio.paused":
            self._paused = True
            self._stop(event["response_id"])
        elif etype == "response.output_audio.ducked":
            self._gain = 10 ** (float(event["gain_db"]) / 20)
            self._stop(event["response_id"])  # as the user hears it: it fell away
        elif etype == "response.output_audio.resumed":
            self._paused, self._gain = False, 1.0
            resumed = self.heard.get(event["response_id"])
            if resumed is not None:
                resumed.stopped_at = None
        elif etype == "response.done":
            rid = event["response"]["id"]
            h = self.heard.setdefault(rid, Heard(rid))
            h.done = True
            if event["response"]["status"] != "completed":
                self._drop(rid)
        elif etype == "conversation.item.truncated":
            rid = self._response_of_item(event["item_id"])
            if rid is not None:
                self._drop(rid)
            self._paused, self._gain = False, 1.0

    def _response_of_item(self, item_id: str) -> str | None:
        for rec in reversed(self.events):
            e = rec.event
            if e["type"] in AUDIO_DELTAS and e.get("item_id") == item_id:
                return str(e["response_id"])
        return None

    def _stop(self, rid: str) -> None:
        h = self.heard.get(rid)
        if h is not None and h.stopped_at is None:
            h.stopped_at = self.input_samples

    def _drop(self, rid: str) -> None:
        kept: deque[tuple[str, np.ndarray]] = deque()
        for r, pcm in self._buffer:
            if r == rid:
                self.heard[r].dropped += pcm.size
            else:
                kept.append((r, pcm))
        self._buffer = kept
        self._gain = 1.0
        self._stop(rid)
        if self._current == rid:
            self._current = None

    def _play(self, input_samples: int) -> np.ndarray:
        """The speaker drains ``input_samples`` worth of real time; returns what it
        played then (silence included, at the output rate)."""
        start, end = self.input_samples, self.input_samples + input_samples
        touched: set[str] = {self._current} if self._current else set()
        out: list[np.ndarray] = []
        if not self._paused:
            self._played_out += input_samples * self.output_rate / self.input_rate
            budget = int(self._played_out)
            self._played_out -= budget
            while budget > 0 and self._buffer:
                rid, pcm = self._buffer[0]
                self._current = rid
                touched.add(rid)
                h = self.heard[rid]
                if h.first_played_at is None:
                    h.first_played_at = start
                    h.history.append((start, 0))
                take = min(budget, pcm.size)
                h.played += take
                budget -= take
                part = pcm[:take]
                out.append(part if self._gain == 1.0 else (part * self._gain).astype(np.int16))
                if take == pcm.size:
                    self._buffer.popleft()
                else:
                    self._buffer[0] = (rid, pcm[take:])
        for rid in touched:
            h = self.heard[rid]
            h.history.append((end, h.played))
        want = input_samples * self.output_rate // self.input_rate
        played = np.concatenate(out) if out else np.zeros(0, np.int16)
        played = np.pad(played, (0, max(0, want - played.size)))[: max(want, played.size)]
        if self.record:
            self.speaker.append(played)
        return played

    # -- reading results -----------------------------------------------------
    @property
    def playing(self) -> bool:
        """Whether the speaker still has audio to play."""
        return bool(self._buffer)

    def of_type(self, etype: str) -> list[Received]:
        return [r for r in self.events if r.event["type"] == etype]

    def played_at(self, rid: str, input_sample: int) -> int:
        """How much of ``rid`` the speaker had played at ``input_sample`` (interpolated
        between frame boundaries)."""
        h = self.heard.get(rid)
        if h is None or not h.history:
            return 0
        prev = (0, 0)
        for at, played in h.history:
            if at >= input_sample:
                if at == prev[0]:
                    return played
                frac = (input_sample - prev[0]) / (at - prev[0])
                return int(prev[1] + frac * (played - prev[1]))
            prev = (at, played)
        return prev[1]
