"""Benchmark the server over loopback: first audio, cancel, throughput, memory.

Runs ``duplex serve`` in its own process (clients here must not share its GIL),
drives it with 1, 10 and 50 concurrent WebSocket sessions, and prints a table of
median and p95 with ratios against baselines measured in the same run:
the in-process reply stages (no server, no network) for first audio and throughput,
and a protocol round trip (``conversation.item.retrieve``) for cancel.

    python scripts/bench_server.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import socket
import time

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.edge.config import ServerConfig
from duplex.pipeline.stages import ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder
from lab.procs import rss_kib
from lab.servers import ServerProcess
from lab.stats import median
from lab.tables import header, row

SHORT = "Hello, this is a short reply."
LONG = " ".join(f"This is sentence number {i} of a fairly long reply." for i in range(8))


async def open_client(port: int) -> RealtimeClient:
    return await RealtimeClient.connect(port, keep=False, id_prefix="b")


async def setup(c: RealtimeClient, text: str, pacing: bool) -> None:
    await c.send("session.update", session={"pacing": {"enabled": pacing}, "turn_detection": None})
    await c.until("session.updated")
    await c.say(text)


async def first_audio(c: RealtimeClient) -> tuple[float, float, float]:
    """(seconds to first delta, audio seconds, wall seconds) for one reply."""
    t0 = time.perf_counter()
    await c.send("response.create")
    first, samples = None, 0
    while True:
        ev = await c.recv()
        if ev["type"] == "response.output_audio.delta":
            if first is None:
                first = time.perf_counter() - t0
            samples += len(base64.b64decode(ev["delta"])) // 2
        elif ev["type"] == "response.done":
            return first or 0.0, samples / 24000, time.perf_counter() - t0


async def turn(c: RealtimeClient) -> tuple[float, float]:
    """A paced reply, cancelled after its first audio: (first audio s, cancel s)."""
    t0 = time.perf_counter()
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    await c.send("response.cancel")
    done = await c.until("response.done")
    assert done["response"]["status"] == "cancelled"
    return first, time.perf_counter() - t1


async def round_trip(c: RealtimeClient, item_id: str) -> float:
    t0 = time.perf_counter()
    await c.send("conversation.item.retrieve", item_id=item_id)
    await c.until("conversation.item.retrieved")
    return time.perf_counter() - t0


async def baseline_pipeline(turns: int) -> tuple[list[float], float]:
    """In-process reply stages, no server: first chunk latency and audio/wall throughput."""
    talker = EspeakTalker()
    firsts: list[float] = []
    for i in range(turns):
        t0 = time.perf_counter()
        first: list[float] = []

        async def sink(ev: ChunkEvent, first: list[float] = first, t0: float = t0) -> None:
            if not first:
                first.append(time.perf_counter() - t0)

        await ReplyStages(talker, PcmVocoder(), SpeechRequest(f"b{i}", SHORT), epoch=i, output_rate=24000).run(sink)
        firsts.append(first[0])
    t0 = time.perf_counter()
    n = 0

    async def count(ev: ChunkEvent) -> None:
        nonlocal n
        n += ev.payload.audio.length

    await ReplyStages(talker, PcmVocoder(), SpeechRequest("t", LONG), epoch=0, output_rate=24000).run(count)
    rtf = (n / 24000) / (time.perf_counter() - t0)
    await talker.aclose()
    return firsts, rtf


async def run_level(port: int, sessions: int, turns: int, rng: random.Random) -> dict[str, list[float]]:
    """Each session takes turns at random moments (0-1 s apart), as people do; then
    every session asks for a long reply unpaced, all at once."""
    clients = await asyncio.gather(*(open_client(port) for _ in range(sessions)))
    out: dict[str, list[float]] = {"first": [], "cancel": [], "speed": [], "rtt": []}

    async def one(c: RealtimeClient, think: list[float]) -> None:
        await setup(c, SHORT, pacing=True)
        await c.send(
            "conversation.item.create",
            item={
                "id": f"x{id(c)}",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": SHORT}],
            },
        )
        await c.until("conversation.item.added")
        for pause in think:
            await asyncio.sleep(pause)
            first, cancel = await turn(c)
            out["first"].append(first)
            out["cancel"].append(cancel)
            out["rtt"].append(await round_trip(c, f"x{id(c)}"))

    await asyncio.gather(*(one(c, [rng.uniform(0, 1) for _ in range(turns)]) for c in clients))

    async def unpaced(c: RealtimeClient) -> None:
        await setup(c, LONG, pacing=False)
        _, audio_s, wall_s = await first_audio(c)
        out["speed"].append(audio_s / wall_s)

    await asyncio.gather(*(unpaced(c) for c in clients))
    await asyncio.gather(*(c.ws.close() for c in clients))
    return out


async def idle_rss(port: int, pid: int, n: int) -> float:
    base = rss_kib(pid)
    clients = await asyncio.gather(*(open_client(port) for _ in range(n)))
    await asyncio.sleep(1.0)
    per = (rss_kib(pid) - base) / n
    await asyncio.gather(*(c.ws.close() for c in clients))
    return per


async def stalled_reader(port: int, pid: int, seconds: float) -> tuple[int, int]:
    """A client that asks for a long unpaced reply and then stops reading."""
    base = rss_kib(pid)
    c = await open_client(port)
    # Small receive buffer so the kernel does not soak up the reply for us.
    sock = c.ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await setup(c, LONG * 4, pacing=False)
    await c.send("response.create")
    c.ws.transport.pause_reading()
    peak = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        await asyncio.sleep(0.5)
        peak = max(peak, rss_kib(pid) - base)
    c.ws.transport.abort()  # it never read; it will not answer a close handshake either
    await asyncio.sleep(1.0)
    return peak, rss_kib(pid) - base


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer turns, 5 s stalled reader")
    ap.add_argument(
        "--serve",
        default="--thinker echo",
        help="`duplex serve` flags, e.g. '--thinker echo --loop-share 0.8' (default: the echo, not a model)",
    )
    args = ap.parse_args()
    turns = 4 if args.quick else 12
    base_first, base_rtf = await baseline_pipeline(turns * 3)
    rng = random.Random(7)
    with ServerProcess(*args.serve.split()).running() as server:
        port, pid = server.port, server.pid
        per_idle = await idle_rss(port, pid, 100)
        results = {n: await run_level(port, n, turns, rng) for n in (1, 10, 50)}
        peak, after = await stalled_reader(port, pid, 5 if args.quick else 30)
    cfg = ServerConfig()
    bound_kib = (cfg.queues.talker_queue.max_bytes + cfg.queues.output_queue.max_bytes + cfg.write_limit) / 1024
    rtt_1 = median(results[1]["rtt"])
    print(f"\nDuplex server benchmark: loopback, {os.cpu_count()} CPUs, built-in voice, 24 kHz out\n")
    print(header("metric", "median", "p95", "ratio to baseline"))
    print(row("baseline: in-process pipeline, first chunk", base_first, "ms", scale=1000))
    print(row("baseline: protocol round trip (1 session)", results[1]["rtt"], "ms", scale=1000))
    for n, r in results.items():
        name = f"first audio after response.create, {n} sessions (paced)"
        print(row(name, r["first"], "ms", scale=1000, base=median(base_first) * 1000))
    for n, r in results.items():
        print(row(f"response.cancel -> response.done, {n} sessions", r["cancel"], "ms", scale=1000, base=rtt_1 * 1000))
    print(f"| baseline: in-process pipeline speed | {base_rtf:.0f}x real time | | |")
    for n, r in results.items():
        print(
            f"| audio s per wall s per session, pacing off, {n} sessions | {median(r['speed']):.1f}x "
            f"| min {min(r['speed']):.1f}x | {median(r['speed']) / base_rtf:.3f} |"
        )
    print(f"| server RSS per idle session | {per_idle:.0f} KiB | | |")
    print(
        f"| RSS growth, one client not reading for {5 if args.quick else 30} s | peak {peak} KiB "
        f"| after close {after} KiB "
        f"| bound {bound_kib:.0f} KiB |"
    )


if __name__ == "__main__":
    asyncio.run(main())
