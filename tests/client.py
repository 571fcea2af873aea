"""A small raw Realtime client for tests: real WebSocket, explicit event handling."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

from app.simclient import SimulatedClient


@dataclass
class RealtimeClient:
    ws: ClientConnection
    events: list[dict[str, Any]] = field(default_factory=list)
    _n: int = 0

    @classmethod
    async def connect(cls, port: int, *, beta: bool = False, **kwargs: Any) -> RealtimeClient:
        headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", additional_headers=headers,
                                      max_size=None, **kwargs)
        client = cls(ws)
        created = await client.recv()
        assert created["type"] == "session.created"
        return client

    async def send(self, etype: str, **fields: Any) -> str:
        self._n += 1
        event_id = fields.pop("event_id", f"c{self._n}")
        await self.ws.send(json.dumps({"type": etype, "event_id": event_id, **fields}))
        return event_id

    async def send_raw(self, message: str | bytes) -> None:
        await self.ws.send(message)

    async def recv(self) -> dict[str, Any]:
        event = json.loads(await self.ws.recv())
        self.events.append(event)
        return event

    async def until(self, etype: str, **match: Any) -> dict[str, Any]:
        """Read events until one of ``etype`` (whose fields match) arrives; an ``error``
        or a failed reply on the way fails the test at once instead of waiting forever."""
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
        await self.send("conversation.item.create",
                        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        return (await self.until("conversation.item.added"))["item"]["id"]

    async def update(self, **session: Any) -> dict[str, Any]:
        await self.send("session.update", session=session)
        return await self.until("session.updated")

    async def close(self) -> None:
        await self.ws.close()


def audio_of(events: list[dict[str, Any]], response_id: str | None = None) -> np.ndarray:
    """The PCM16 samples of the audio deltas among ``events`` (of one response)."""
    parts = [
        np.frombuffer(base64.b64decode(e["delta"]), "<i2")
        for e in events
        if e["type"] in ("response.output_audio.delta", "response.audio.delta")
        and (response_id is None or e["response_id"] == response_id)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def pcm_b64(samples: np.ndarray) -> str:
    return base64.b64encode(samples.astype("<i2").tobytes()).decode()


async def ask_for_a_long_answer(port: int) -> tuple[RealtimeClient, dict[str, Any]]:
    """Ask a thinker-backed server a question (pacing off) and wait for the whole reply:
    the open client (its events kept) and the ``response.done`` response."""
    c = await RealtimeClient.connect(port)
    await c.update(pacing={"enabled": False}, instructions="Answer in gibberish.")
    await c.say("what is the weather like")
    await c.send("response.create")
    return c, (await c.until("response.done"))["response"]



async def asked_while_listening(port: int, text: str) -> SimulatedClient:
    """A microphone client (no automatic reply to its turns) that typed ``text`` and
    asked for the answer: for barge-in tests that then talk over the reply."""
    ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None)
    assert json.loads(await ws.recv())["type"] == "session.created"
    sim = SimulatedClient(ws)
    await sim.send("session.update", session={"turn_detection": {"type": "server_vad", "create_response": False}})
    await sim.silence(0.5)
    await sim.send("conversation.item.create", item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": text}]})
    await sim.send("response.create")
    await sim.sync()
    return sim
