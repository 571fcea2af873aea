"""A raw Realtime client: a real WebSocket, explicit events, nothing hidden.

The one protocol client the project's tools share: tests, benchmarks, the load
test, the simulated client and the mic demo all send and read events through it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")


@dataclass
class RealtimeClient:
    """One connection; ``events`` keeps what was read, when ``keep`` is set."""

    ws: ClientConnection
    events: list[dict[str, Any]] = field(default_factory=list)
    keep: bool = True
    id_prefix: str = "c"
    _n: int = 0

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        beta: bool = False,
        keep: bool = True,
        id_prefix: str = "c",
        expect_created: bool = True,
        extensions: bool = True,
        **kwargs: Any,
    ) -> RealtimeClient:
        """Connect to ``url`` and (unless told otherwise) read ``session.created``.
        ``extensions``: ask for Duplex's own events (``?duplex=1``: ducked, paused, resumed)."""
        if extensions and "duplex=" not in url:
            url += ("&" if "?" in url else "?") + "duplex=1"
        headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
        kwargs.setdefault("max_size", None)
        kwargs.setdefault("compression", None)
        ws = await websockets.connect(url, additional_headers=headers, **kwargs)
        client = cls(ws, keep=keep, id_prefix=id_prefix)
        if expect_created:
            created = await client.recv()
            if created["type"] != "session.created":
                raise RuntimeError(f"the first event was {created['type']!r}, not session.created")
        return client

    @classmethod
    async def connect(cls, port: int, **kwargs: Any) -> RealtimeClient:
        """Connect to a server on this machine's ``port``."""
        return await cls.open(f"ws://127.0.0.1:{port}/v1/realtime", **kwargs)

    async def send(self, etype: str, **fields: Any) -> str:
        """Send one event; returns its ``event_id`` (given, or made up)."""
        self._n += 1
        event_id = fields.pop("event_id", f"{self.id_prefix}{self._n}")
        await self.ws.send(json.dumps({"type": etype, "event_id": event_id, **fields}))
        return str(event_id)

    async def send_raw(self, message: str | bytes) -> None:
        await self.ws.send(message)

    async def recv(self) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(await self.ws.recv())
        if self.keep:
            self.events.append(event)
        return event

    async def until(self, etype: str, **match: Any) -> dict[str, Any]:
        """Read events until one of ``etype`` (whose fields match) arrives; an ``error``
        or a failed reply on the way fails at once instead of waiting forever."""
        while True:
            event = await self.recv()
            if event["type"] == etype and all(event.get(k) == v for k, v in match.items()):
                return event
            if event["type"] == "error" and etype != "error":
                raise AssertionError(f"server error while waiting for {etype}: {event['error']}")
            if event["type"] == "response.done" and event["response"]["status"] == "failed":
                raise AssertionError(f"reply failed while waiting for {etype}: {event['response']}")

    async def say(self, text: str) -> str:
        """Add a user text message; return its item id."""
        await self.send(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        )
        return str((await self.until("conversation.item.added"))["item"]["id"])

    async def update(self, **session: Any) -> dict[str, Any]:
        """``session.update``; returns the ``session.updated`` event."""
        await self.send("session.update", session=session)
        return await self.until("session.updated")

    async def append(self, pcm: np.ndarray) -> None:
        """Send microphone audio (PCM16)."""
        await self.send("input_audio_buffer.append", audio=pcm_b64(pcm))

    async def close(self) -> None:
        await self.ws.close()


def audio_of(events: list[dict[str, Any]], response_id: str | None = None) -> np.ndarray:
    """The PCM16 samples of the audio deltas among ``events`` (of one response)."""
    parts = [
        np.frombuffer(base64.b64decode(e["delta"]), "<i2")
        for e in events
        if e["type"] in AUDIO_DELTAS and (response_id is None or e["response_id"] == response_id)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def pcm_b64(samples: np.ndarray) -> str:
    """PCM16 samples as the base64 an ``append`` carries."""
    return base64.b64encode(samples.astype("<i2").tobytes()).decode()
