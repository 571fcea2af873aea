"""Fairness under attack: a real-time session's latency while other sessions flood.

``duplex serve`` runs in its own process. One well-behaved session streams its
microphone at real time (20 ms frames), asks for a round trip
(``conversation.item.retrieve``) every 100 ms, and every few seconds talks over a
reply (the barge-in pause latency: from the frame that starts the speech to the
``response.output_audio.ducked`` event). It is measured idle (the baseline), then
while other sessions flood the server each way the reliability review attacked:

* input: 4 sessions streaming noise at 60x real time;
* pings: 2 clients sending pings and never reading;
* text: 2 sessions sending the longest text item allowed and asking for its reply;
* recognition: 2 sessions committing one-second turns as fast as input may go;
* conversation: 2 sessions creating items as fast as they can;
* stalled readers: 2 sessions asking for long unpaced replies and never reading;
* pause storms: 2 semantic_vad sessions sending speech with a 350 ms pause every
  0.4 s at 60x real time;
* monologues: 4 sessions speaking at real time without a pause;
* tools: 2 sessions offering 128 tools and sending 32 KiB of braces that name one;
* pings read: 2 clients pinging as fast as the pongs come back.

The victim also speaks a turn each cycle (server_vad): speech end -> first audio.

    python scripts/bench_fairness.py [--seconds 12]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Awaitable, Callable

import numpy as np
import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.sounds import mix, noise, silence, speech, trim
from duplex.pipeline.talkers.espeak import EspeakTalker
from lab.procs import rss_kib
from lab.servers import ServerProcess
from lab.stats import median
from lab.tables import spread
from lab.voices import load_corpus, resample

RATE = 24000
FRAME = RATE // 50
REPLY = " ".join(f"This is sentence number {i} of a long reply that keeps going." for i in range(40))


class Live:
    """The well-behaved session: real-time microphone, round trips, barge-ins."""

    def __init__(self, port: int, words: object) -> None:
        self.port = port
        self.words = words
        self.rtt: list[float] = []
        self.pause: list[float] = []
        self.turn: list[float] = []
        """End of the words -> the reply's first audio (server_vad: 500 ms of it is the silence)."""

    async def run(self, seconds: float) -> None:
        c = await RealtimeClient.connect(self.port, keep=False)
        await c.update(turn_detection={"type": "server_vad", "create_response": False})
        kept = await c.say("keep me")
        events: asyncio.Queue[tuple[float, dict[str, object]]] = asyncio.Queue()
        rtt_wait: dict[str, float] = {}

        async def reader() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    event = await c.recv()
                    now = time.monotonic()
                    if event["type"] == "conversation.item.retrieved" and "r" in rtt_wait:
                        self.rtt.append(now - rtt_wait.pop("r"))
                    await events.put((now, event))

        async def mic(audio: object, marks: dict[int, str]) -> dict[str, float]:
            """Stream ``audio`` at real time; wall times of the marked frames."""
            sent: dict[str, float] = {}
            start = time.monotonic()
            for n, i in enumerate(range(0, audio.size, FRAME)):  # type: ignore[attr-defined]
                await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
                await c.append(audio[i : i + FRAME])  # type: ignore[index]
                if i in marks:
                    sent[marks[i]] = time.monotonic()
                if n % 5 == 0 and "r" not in rtt_wait:
                    rtt_wait["r"] = time.monotonic()
                    await c.send("conversation.item.retrieve", item_id=kept)
            return sent

        task = asyncio.create_task(reader())
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                await c.send(
                    "conversation.item.create",
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": REPLY}]},
                )
                await c.send("response.create")
                await mic(silence(1.0), {})
                while not events.empty():
                    events.get_nowait()
                onset = int(0.3 * RATE) // FRAME * FRAME
                sent = await mic(mix(silence(0.3), self.words, silence(1.0)), {onset: "onset"})  # type: ignore[arg-type]
                while not events.empty():
                    at, event = events.get_nowait()
                    if event["type"] == "response.output_audio.ducked":
                        self.pause.append(at - sent["onset"])
                        break
                await c.send("response.cancel")
                await mic(silence(1.0), {})
                # A spoken turn: from the end of the words to the reply's first audio.
                while not events.empty():
                    events.get_nowait()
                last = (int(0.3 * RATE) + self.words.size) // FRAME * FRAME  # type: ignore[attr-defined]
                words = mix(silence(0.3), self.words, silence(2.5))  # type: ignore[arg-type]
                speaking = asyncio.ensure_future(mic(words, {last: "end"}))
                asked = False
                while not speaking.done():
                    getting = asyncio.ensure_future(events.get())
                    await asyncio.wait({getting, speaking}, return_when=asyncio.FIRST_COMPLETED)
                    if not getting.done():
                        getting.cancel()
                        break
                    at, event = getting.result()
                    if event["type"] == "input_audio_buffer.speech_stopped" and not asked:
                        await c.send("response.create")
                        asked = True
                    elif event["type"] == "response.output_audio.delta":
                        first = at
                        sent = await speaking
                        self.turn.append(first - sent["end"])
                        break
                await speaking
                await c.send("response.cancel")
                await mic(silence(0.5), {})
        finally:
            task.cancel()
            await c.close()


async def flood_input(port: int, stop: asyncio.Event) -> None:
    c = await RealtimeClient.connect(port, keep=False)
    chunk = noise(0.2, RATE, level=3000)
    with contextlib.suppress(websockets.ConnectionClosed):
        while not stop.is_set():
            t = time.monotonic()
            await c.append(chunk)
            await asyncio.sleep(max(0.0, t + 0.2 / 60 - time.monotonic()))  # 60x real time
    await c.close()


async def flood_pings(port: int, stop: asyncio.Event) -> None:
    """Pings without ever reading; when the server drops it, it comes back."""
    n = 0
    while not stop.is_set():
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime")
        ws.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ws.transport.pause_reading()
        with contextlib.suppress(OSError, websockets.ConnectionClosed):
            while not stop.is_set() and not ws.transport.is_closing():
                ws.protocol.send_ping(struct.pack("!Q", n) * 15)
                ws.send_data()
                n += 1
                if n % 100 == 0:
                    await asyncio.sleep(0.001)
        ws.transport.abort()


async def flood_text(port: int, stop: asyncio.Event) -> None:
    c = await RealtimeClient.connect(port, keep=False)
    await c.update(pacing={"enabled": False})
    text = ("All work and no play. " * 2000)[: 32 * 1024]
    with contextlib.suppress(websockets.ConnectionClosed, AssertionError):
        while not stop.is_set():
            await c.send(
                "conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            )
            await c.send("response.create")
            await c.until("response.done")
    await c.close()


async def flood_recognition(port: int, stop: asyncio.Event) -> None:
    c = await RealtimeClient.connect(port, keep=False)
    await c.update(turn_detection=None)
    second = noise(1.0, RATE, level=2000)
    with contextlib.suppress(websockets.ConnectionClosed):
        while not stop.is_set():
            await c.append(second)
            await c.send("input_audio_buffer.commit")
            await asyncio.sleep(1.0 / 60)  # as fast as 60x real time input allows
    await c.close()


async def flood_items(port: int, stop: asyncio.Event) -> None:
    c = await RealtimeClient.connect(port, keep=False)
    with contextlib.suppress(websockets.ConnectionClosed):
        while not stop.is_set():
            await c.send(
                "conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
            )
            await asyncio.sleep(0)
    await c.close()


async def flood_stalled(port: int, stop: asyncio.Event) -> None:
    ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime")
    ws.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c = RealtimeClient(ws, keep=False)
    await c.update(pacing={"enabled": False})
    await c.say(REPLY * 4)
    await c.send("response.create")
    ws.transport.pause_reading()
    await stop.wait()
    ws.transport.abort()


def _human_speech() -> np.ndarray:
    clip = next(c for c in load_corpus().turns if c.family == "human" and c.seconds > 2)
    return resample(clip.pcm[clip.speech_start : clip.speech_end], clip.rate, RATE)


async def flood_pauses(port: int, stop: asyncio.Event) -> None:
    """semantic_vad, human speech with a 350 ms pause every 0.4 s, at the input bound."""
    c = await RealtimeClient.connect(port, keep=False)
    await c.update(turn_detection={"type": "semantic_vad"})
    speech, pause = _human_speech(), np.zeros(int(0.35 * RATE), np.int16)
    pieces = [speech[i : i + RATE * 2 // 5] for i in range(0, speech.size - RATE // 2, RATE * 2 // 5)]
    with contextlib.suppress(websockets.ConnectionClosed):
        k = 0
        while not stop.is_set():
            t = time.monotonic()
            await c.append(np.concatenate([pieces[k % len(pieces)], pause]))
            k += 1
            await asyncio.sleep(max(0.0, t + 0.75 / 60 - time.monotonic()))  # 60x real time
    await c.close()


async def flood_monologue(port: int, stop: asyncio.Event) -> None:
    """Speech at real time without a pause (partial transcripts all along)."""
    c = await RealtimeClient.connect(port, keep=False)
    await c.update(turn_detection={"type": "semantic_vad"})
    speech = np.tile(_human_speech(), 20)
    with contextlib.suppress(websockets.ConnectionClosed):
        start = time.monotonic()
        for n, i in enumerate(range(0, speech.size, FRAME * 5)):
            if stop.is_set():
                break
            await asyncio.sleep(max(0.0, start + n * 0.1 - time.monotonic()))
            await c.append(speech[i : i + FRAME * 5])
    await c.close()


async def flood_tools(port: int, stop: asyncio.Event) -> None:
    """The most tools allowed, and the longest text of braces naming one, reply after reply."""
    c = await RealtimeClient.connect(port, keep=False)
    tools = [{"type": "function", "name": f"tool_{i}", "parameters": {"type": "object"}} for i in range(128)]
    await c.update(tools=tools, pacing={"enabled": False})
    text = ("tool_127 " + "{" * 32 * 1024)[: 32 * 1024]
    with contextlib.suppress(websockets.ConnectionClosed, AssertionError):
        while not stop.is_set():
            await c.say(text)
            await c.send("response.create")
            await c.until("response.done")
    await c.close()


async def flood_pings_read(port: int, stop: asyncio.Event) -> None:
    """Pings as fast as the pongs come back; when the server drops it, it comes back."""
    while not stop.is_set():
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime")
        with contextlib.suppress(websockets.ConnectionClosed):
            while not stop.is_set():
                await (await ws.ping())
        ws.transport.abort()


MICS = {"refused": 0, "closed": 0}
"""Microphone sessions the server refused at the handshake (503) or closed (1013)."""


async def flood_mics(port: int, stop: asyncio.Event) -> None:
    """One real-time microphone of quiet noise (-40 dBFS), 100 ms at a time."""
    try:
        c = await RealtimeClient.connect(port, keep=False)
    except websockets.InvalidStatus:
        MICS["refused"] += 1
        return
    chunk = noise(0.1, RATE, level=328)
    try:
        start, n = time.monotonic(), 0
        while not stop.is_set():
            await asyncio.sleep(max(0.0, start + n * 0.1 - time.monotonic()))
            await c.append(chunk)
            n += 1
    except websockets.ConnectionClosed:
        MICS["closed"] += 1
    await c.close()


FLOODS: dict[str, tuple[int, Callable[[int, asyncio.Event], Awaitable[None]]]] = {
    "input at 60x real time (4 sessions)": (4, flood_input),
    "pings, never reading (2 clients)": (2, flood_pings),
    "longest text turns (2 sessions)": (2, flood_text),
    "recognition: 1 s turns at full speed (2 sessions)": (2, flood_recognition),
    "conversation items as fast as possible (2 sessions)": (2, flood_items),
    "stalled readers of unpaced replies (2 sessions)": (2, flood_stalled),
    "pause storms through semantic_vad at 60x (2 sessions)": (2, flood_pauses),
    "monologues at real time (4 sessions)": (4, flood_monologue),
    "128 tools and 32 KiB of braces, reply after reply (2 sessions)": (2, flood_tools),
    "pings, reading every pong (2 clients)": (2, flood_pings_read),
    "real-time microphones of quiet noise (120 sessions)": (120, flood_mics),
}


async def phase(port: int, words: object, seconds: float, flood: Callable[..., Awaitable[None]] | None, n: int) -> Live:
    stop = asyncio.Event()
    attackers = [asyncio.create_task(flood(port, stop)) for _ in range(n)] if flood else []
    live = Live(port, words)
    try:
        await live.run(seconds)
    finally:
        stop.set()
        await asyncio.gather(*attackers, return_exceptions=True)
    return live


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=12.0, help="each phase's length")
    ap.add_argument(
        "--serve",
        default="--thinker echo",
        help="`duplex serve` flags, e.g. '--thinker echo --loop-share 0.8' (default: the echo, not a model)",
    )
    ap.add_argument("--only", action="append", help="run only the floods whose name contains this")
    args = ap.parse_args()
    words = trim(await speech(EspeakTalker(), "wait, please stop talking now"), RATE)
    rows = []
    with ServerProcess(*args.serve.split()).running() as server:
        base = await phase(server.port, words, args.seconds, None, 0)
        rss0 = rss_kib(server.pid)
        rows.append(("none (baseline)", base, rss0))
        for name, (n, flood) in FLOODS.items():
            if args.only and not any(o in name for o in args.only):
                continue
            live = await phase(server.port, words, args.seconds, flood, n)
            await asyncio.sleep(2)  # let the server let go of the attackers
            if flood is flood_mics:
                name += f": {MICS['refused']} refused, {MICS['closed']} closed"
            rows.append((name, live, rss_kib(server.pid)))
            print(f"{name}: done", flush=True)
    b_rtt, b_pause, b_turn = median(base.rtt), median(base.pause), median(base.turn or [float("nan")])
    print(
        f"\nFairness: a real-time session while others flood ({args.seconds:.0f} s a phase, server in its own "
        "process, loopback, this 2-core CPU). Round trip: conversation.item.retrieve; pause: frame that starts "
        "speech over a reply -> response.output_audio.ducked (wall)\n"
    )
    print("| flood | round trip median / p99 | x idle | barge-in pause median / p99 | x idle "
          "| spoken turn: speech end -> first audio | x idle | server RSS after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, live, rss in rows:
        rtt, pause = live.rtt or [float("nan")], live.pause or [float("nan")]
        turn = live.turn or [float("nan")]
        print(
            f"| {name} | {spread(rtt, scale=1000, digits=1, q=0.99, unit='ms')} | {median(rtt) / b_rtt:.2f} "
            f"| {spread(pause, scale=1000, q=0.99, unit='ms')} | {median(pause) / b_pause:.2f} "
            f"| {spread(turn, digits=2, q=1.0, unit='s')} | {median(turn) / b_turn:.2f} | {rss // 1024} MiB |"
        )


if __name__ == "__main__":
    asyncio.run(main())
