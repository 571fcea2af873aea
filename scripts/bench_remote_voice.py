"""A remote voice (``--talker openai``) against the same voice in process, over loopback.

Three ``duplex serve --thinker echo`` processes: a model server (the default voice,
hibari, serving ``/v1/audio/speech``), a front end speaking with that voice in process,
and a front end speaking through the model server (``--talker openai --tts-url``). The
two front ends are driven alternately, one session at a time, with a typed message:

* first audio: ``response.create`` -> the first audio delta at the client;
* cancel: ``response.cancel`` once the first audio is in -> ``response.done``
  (for the remote voice, the HTTP stream is closed by then: the model server counts it).

    python scripts/bench_remote_voice.py [--trials 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from duplex.app.clients.realtime import RealtimeClient
from lab.servers import ServerProcess
from lab.stats import median
from lab.tables import header

TEXT = " ".join(f"This is sentence number {i} of a reply long enough to cancel." for i in range(6))


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


async def one(port: int) -> tuple[float, float]:
    """First audio and cancel latency (ms) of one reply on a fresh session."""
    c = await RealtimeClient.connect(port, keep=False, id_prefix="b")
    await c.update(turn_detection=None)
    await c.say(TEXT)
    t0 = time.perf_counter()
    await c.send("response.create")
    await c.until("response.output_audio.delta")
    first = (time.perf_counter() - t0) * 1000
    t1 = time.perf_counter()
    await c.send("response.cancel")
    while (ev := await c.recv())["type"] != "response.done":
        pass
    cancel = (time.perf_counter() - t1) * 1000
    assert ev["response"]["status"] == "cancelled", ev["response"]["status"]
    await c.close()
    return first, cancel


async def run(trials: int) -> None:
    models = ServerProcess("--thinker", "echo")
    models.start()
    try:
        local = ServerProcess("--thinker", "echo")
        remote = ServerProcess(
            "--thinker", "echo", "--talker", "openai", "--tts-url", f"http://127.0.0.1:{models.port}", "--tts-model",
            "hibari",
        )  # fmt: skip
        with local.running(), remote.running():
            got: dict[str, list[tuple[float, float]]] = {"in process": [], "remote (loopback)": []}
            for _ in range(2):  # warm both
                await one(local.port)
                await one(remote.port)
            for _ in range(trials):
                got["in process"].append(await one(local.port))
                got["remote (loopback)"].append(await one(remote.port))
        cancelled = [ln for ln in models.http("/metrics").decode().splitlines() if "speech_requests_total" in ln]
    finally:
        models.stop()
    print(f"\n{trials} replies each, alternating (ms)\n")
    print(header("voice", "first audio median", "p95", "cancel median", "p95"))
    for name, xs in got.items():
        firsts, cancels = [x[0] for x in xs], [x[1] for x in xs]
        cells = [median(firsts), p95(firsts), median(cancels), p95(cancels)]
        print("| " + " | ".join([name, *(f"{v:.1f}" for v in cells)]) + " |")
    a, b = ([x[0] for x in got[k]] for k in got)
    print(f"\nremote - in process, first audio: median {median(b) - median(a):+.1f} ms, p95 {p95(b) - p95(a):+.1f} ms")
    print("model server:", "; ".join(ln for ln in cancelled if not ln.startswith("#")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    asyncio.run(run(ap.parse_args().trials))


if __name__ == "__main__":
    main()
