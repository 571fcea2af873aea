"""How many real-time microphones the server hears at once, and what they cost the others.

``duplex serve`` runs in its own process; so do the microphones (one client process
opening N sessions, each streaming quiet noise, -40 dBFS, at real time in 100 ms
chunks, the way the reliability review attacked). A victim session, opened first,
asks for a round trip (``conversation.item.retrieve``) every 100 ms, and ``/healthz`` is
fetched every 250 ms. For each N: the victim's round trip and ``/healthz`` (median, p99,
max), the server's measured hearing load (``duplex_hearing_load``), and how many of the
N were refused at the handshake (503) or closed (1013).

    python scripts/bench_microphones.py [--sessions 0,40,80,120] [--seconds 15] [--serve "--hearing-budget 100"]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
import urllib.request

import websockets

from duplex.app.clients.realtime import RealtimeClient
from duplex.app.clients.sounds import noise
from lab.servers import ServerProcess
from lab.tables import spread

RATE = 24000


async def microphones(port: int, n: int, seconds: float) -> None:
    """The attacking client: ``n`` sessions of quiet noise at real time; prints what became of them."""
    chunk = noise(0.1, RATE, level=328)
    fate = {"refused": 0, "closed": 0, "kept": 0}

    async def one(k: int) -> None:
        await asyncio.sleep(k * 0.01)  # opened over a second or so, not in one burst
        try:
            c = await RealtimeClient.connect(port, keep=False)
        except websockets.InvalidStatus:
            fate["refused"] += 1
            return
        start, i = time.monotonic(), 0
        try:
            while time.monotonic() - start < seconds:
                await asyncio.sleep(max(0.0, start + i * 0.1 - time.monotonic()))
                await c.append(chunk)
                i += 1
            fate["kept"] += 1
        except websockets.ConnectionClosed:
            fate["closed"] += 1
        with contextlib.suppress(websockets.ConnectionClosed):
            await c.close()

    await asyncio.gather(*(one(k) for k in range(n)))
    print(json.dumps(fate), flush=True)


def _healthz(port: int) -> float:
    start = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as r:
        r.read()
    return time.monotonic() - start


def _hearing_load(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("duplex_hearing_load "):
                return float(line.split()[1])
    return float("nan")


async def measure(port: int, n: int, seconds: float) -> dict[str, object]:
    victim = await RealtimeClient.connect(port, keep=False)
    kept = await victim.say("keep me")
    attack = None
    if n:
        attack = subprocess.Popen(
            [sys.executable, __file__, "--attack", str(n), "--port", str(port), "--seconds", str(seconds + 3)],
            stdout=subprocess.PIPE,
            text=True,
        )
        await asyncio.sleep(3.0)  # all of them open and streaming (a warm-up, not a synchronisation)
    rtt: list[float] = []
    health: list[float] = []
    loads: list[float] = []
    end = time.monotonic() + seconds

    async def pings() -> None:
        while time.monotonic() < end:
            start = time.monotonic()
            await victim.send("conversation.item.retrieve", item_id=kept)
            await victim.until("conversation.item.retrieved")
            rtt.append(time.monotonic() - start)
            await asyncio.sleep(max(0.0, start + 0.1 - time.monotonic()))

    async def probes() -> None:
        while time.monotonic() < end:
            start = time.monotonic()
            health.append(await asyncio.to_thread(_healthz, port))
            loads.append(await asyncio.to_thread(_hearing_load, port))
            await asyncio.sleep(max(0.0, start + 0.25 - time.monotonic()))

    await asyncio.gather(pings(), probes())
    fate = {"refused": 0, "closed": 0, "kept": 0}
    if attack is not None:
        out, _ = await asyncio.to_thread(attack.communicate)
        fate = json.loads(out.strip().splitlines()[-1])
    await victim.close()
    return {"n": n, "rtt": rtt, "health": health, "load": sorted(loads)[len(loads) // 2], **fate}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", default="0,40,80,120", help="microphones at once, comma-separated")
    ap.add_argument("--seconds", type=float, default=15.0, help="each step's length")
    ap.add_argument("--serve", default="--thinker echo", help="`duplex serve` flags")
    ap.add_argument("--attack", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.attack is not None:
        await microphones(args.port, args.attack, args.seconds)
        return
    rows = []
    with ServerProcess(*args.serve.split()).running() as server:
        for n in (int(x) for x in args.sessions.split(",")):
            rows.append(await measure(server.port, n, args.seconds))
            print(f"{n} microphones: done", flush=True)
            await asyncio.sleep(3.0)  # the server lets go of them
    idle = sorted(rows[0]["rtt"])[len(rows[0]["rtt"]) // 2]  # type: ignore[arg-type, index]
    print(f"\nReal-time microphones (quiet noise) and a victim; `duplex serve {args.serve}`; this 2-core CPU\n")
    print("| microphones | refused / closed | hearing load | victim round trip median / p99 (max) | x idle "
          "| /healthz median / p99 (max) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in rows:
        rtt, health = r["rtt"], r["health"]
        med = sorted(rtt)[len(rtt) // 2]  # type: ignore[arg-type, index]
        print(
            f"| {r['n']} | {r['refused']} / {r['closed']} | {r['load']:.2f} "
            f"| {spread(rtt, scale=1000, digits=1, q=0.99, unit='ms')} ({max(rtt) * 1000:.0f}) "  # type: ignore[arg-type, type-var]
            f"| {med / idle:.1f} | {spread(health, scale=1000, digits=1, q=0.99, unit='ms')} "  # type: ignore[arg-type]
            f"({max(health) * 1000:.0f}) |"  # type: ignore[arg-type, type-var]
        )


if __name__ == "__main__":
    asyncio.run(main())
