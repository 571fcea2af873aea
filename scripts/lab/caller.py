"""A WebRTC caller for tests and benchmarks: aiortc on the caller's side, a microphone
that plays a script at real time, a speaker that records the server's track, and the
``oai-events`` data channel."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from duplex.app.edge.call_media import FRAME, RATE, PacedTrack

__all__ = ["FRAME", "RATE", "Caller", "Script", "loud"]


class Script(PacedTrack):
    """A microphone playing PCM (48 kHz) at real time; silence when it has nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[np.ndarray] = []
        self.sent = 0

    def say(self, pcm: np.ndarray) -> int:
        """Queue ``pcm``; returns the sample at which it will begin."""
        at = self.sent + sum(p.size for p in self.queue)
        self.queue.append(pcm)
        return at

    def _next(self) -> np.ndarray:
        out = np.zeros(FRAME, np.int16)
        filled = 0
        while filled < FRAME and self.queue:
            take = min(FRAME - filled, self.queue[0].size)
            out[filled : filled + take] = self.queue[0][:take]
            self.queue[0] = self.queue[0][take:]
            if not self.queue[0].size:
                self.queue.pop(0)
            filled += take
        self.sent += FRAME
        return out


class Caller:
    """A WebRTC caller: microphone, speaker, and the events channel."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = Script()
        self.pc.addTrack(self.mic)
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: list[dict[str, Any]] = []
        self.heard: list[np.ndarray] = []
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self.channel.on("message", lambda m: self.events.append(json.loads(m)))
        self._tasks: list[asyncio.Task[None]] = []

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            self._tasks.append(asyncio.ensure_future(self._listen(track)))

    async def _listen(self, track: Any) -> None:
        try:
            while True:
                frame = await track.recv()
                x = frame.to_ndarray().reshape(-1, len(frame.layout.channels)).mean(axis=1)
                self.heard.append(x.astype(np.int16))
        except MediaStreamError:
            pass

    async def call(self, port: int, **post: Any) -> httpx.Response:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with httpx.AsyncClient() as http:
            if post:
                r = await http.post(f"http://127.0.0.1:{port}/v1/realtime/calls", **post)
            else:
                r = await http.post(
                    f"http://127.0.0.1:{port}/v1/realtime/calls",
                    content=self.pc.localDescription.sdp,
                    headers={"Content-Type": "application/sdp"},
                )
        if r.status_code == 201:
            await self.pc.setRemoteDescription(RTCSessionDescription(r.text, "answer"))
        return r

    def of_type(self, etype: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == etype]

    def send(self, etype: str, **fields: Any) -> None:
        self.channel.send(json.dumps({"type": etype, **fields}))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await self.pc.close()


def loud(frames: list[np.ndarray]) -> int:
    """Samples of the recording in 10 ms hops above a whisper."""
    x = np.concatenate(frames) if frames else np.zeros(0, np.int16)
    hops = x[: x.size // 480 * 480].reshape(-1, 480).astype(np.float64)
    return int((np.sqrt((hops**2).mean(axis=1)) > 300).sum()) * 480
