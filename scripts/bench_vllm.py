"""Benchmark the real-model path on this CPU: vLLM talker, SNAC vocoder, both together.

Builds the tiny random Llama and a random-weight SNAC of the real 24 kHz
architecture locally (nothing downloaded), starts a real in-process vLLM engine
and prints median and p95 of: talker tokens/s and codec frames/s (1 and 4
streams), talker + vocoder real-time factor, first-audio latency, abort latency,
the SNAC decoder's real-time factor at its real size, and the CPU the engine
burns while idle. Baselines in the same run: the talker alone and the vocoder
alone, against which the pipeline's speed is a ratio.

    python scripts/bench_vllm.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

from lab.procs import cpu_seconds, descendants
from lab.stats import median
from lab.tables import header, row

TEXT = "This is a sentence for the benchmark, long enough to make a few seconds of speech."


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of these processes (those gone count 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, IndexError):
            total += cpu_seconds(pid)
    return total


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs = 4 if args.quick else 10
    from duplex.pipeline.stages import ReplyStages
    from duplex.pipeline.talker import SpeechRequest
    from duplex.pipeline.talkers.codec import CodecLayout
    from duplex.pipeline.talkers.vllm import CodecTalker, LocalEngine
    from duplex.pipeline.vocoders.snac import SnacVocoder
    from lab.models import build_snac, build_tiny_llama

    tmp = Path(tempfile.mkdtemp(prefix="duplex-bench-"))
    model, snac = build_tiny_llama(tmp / "tiny"), build_snac(tmp / "snac")
    layout = CodecLayout.load(model / "codec_layout.json")
    t0 = time.perf_counter()
    engine = LocalEngine(model, max_model_len=2048)
    await engine.start()
    start_s = time.perf_counter() - t0
    talker = CodecTalker(engine, layout)
    vocoder = SnacVocoder(snac)
    rows: list[str] = []

    # Talker alone: tokens and frames per second, 1 and 4 streams.
    async def talk(i: int) -> tuple[int, float]:
        t = time.perf_counter()
        frames = 0
        async for _ in talker.speak(SpeechRequest(f"t{i}", TEXT * 2)):
            frames += 1
        return frames, time.perf_counter() - t

    single = [await talk(i) for i in range(runs)]
    tok_s = [f * 7 / dt for f, dt in single]
    quad: list[float] = []
    for r in range(max(1, runs // 2)):
        t = time.perf_counter()
        results = await asyncio.gather(*(talk(100 + 4 * r + k) for k in range(4)))
        quad.append(sum(f for f, _ in results) * 7 / (time.perf_counter() - t))

    # Vocoder alone, at its real size: a 16-frame window, as the pipeline batches.
    import numpy as np

    rng = np.random.default_rng(0)
    window = [rng.integers(0, 4096, 7) for _ in range(16)]
    vocoder.decode(window)
    voc_rtf = []
    for _ in range(runs):
        t = time.perf_counter()
        vocoder.decode(window)
        voc_rtf.append((time.perf_counter() - t) / (16 * 2048 / 24000))

    # Talker + vocoder through the engine: real-time factor and first audio.
    rtf, first = [], []
    for i in range(runs):
        got = {"first": None, "samples": 0}
        t = time.perf_counter()

        async def sink(ev, got=got, t=t) -> None:
            if got["first"] is None:
                got["first"] = time.perf_counter() - t
            got["samples"] += ev.payload.audio.length

        await ReplyStages(talker, vocoder, SpeechRequest(f"p{i}", TEXT), epoch=i, output_rate=24000).run(sink)
        wall = time.perf_counter() - t
        rtf.append(wall / (got["samples"] / 24000))
        first.append(got["first"])

    # Abort: cancel a reply mid-way; how long until the engine runs nothing.
    aborts = []
    for i in range(runs):
        started = asyncio.Event()

        async def stall(ev, started=started) -> None:
            started.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(
            ReplyStages(talker, vocoder, SpeechRequest(f"a{i}", TEXT * 3), epoch=i, output_rate=24000).run(stall)
        )
        await started.wait()
        t = time.perf_counter()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        while await engine.running():
            await asyncio.sleep(0.0005)
        aborts.append(time.perf_counter() - t)

    # What the engine burns doing nothing.
    pids = descendants(os.getpid())
    c0, w0 = cpu_of(pids), time.perf_counter()
    await asyncio.sleep(5 if args.quick else 10)
    idle = (cpu_of(pids) - c0) / (time.perf_counter() - w0)
    await talker.aclose()

    talk_rtf = [dt / (f * 2048 / 24000) for f, dt in single]
    print(
        f"\nvLLM talker + SNAC vocoder on this CPU ({os.cpu_count()} cores); tiny random Llama "
        f"(2 layers, width 64), SNAC 24 kHz with random weights (real size); engine start {start_s:.1f} s\n"
    )
    print(header("metric", "median", "p95", "note"))
    rows += [
        row("talker tokens/s, 1 stream (baseline)", tok_s, "tok/s"),
        row("talker codec frames/s, 1 stream", [x / 7 for x in tok_s], "frames/s", note="11.7 frames/s is real time"),
        row(
            "talker tokens/s, 4 streams together",
            quad,
            "tok/s",
            note=f"{median(quad) / median(tok_s):.1f}x one stream",
        ),
        row("talker alone, real-time factor", talk_rtf, note="wall / audio"),
        row("SNAC decoder alone, real-time factor (16-frame window)", voc_rtf, note="wall / audio"),
        row(
            "talker + vocoder, real-time factor",
            rtf,
            note=f"{median(rtf) / median(voc_rtf):.1f}x the vocoder alone",
        ),
        row("first audio (request -> first PCM chunk)", first, "ms", scale=1000),
        row("abort (cancel -> engine runs nothing)", aborts, "ms", scale=1000),
    ]
    print("\n".join(rows))
    print(f"| vLLM engine processes while idle | {idle:.2f} CPU-s per s | | nothing to generate |")


if __name__ == "__main__":
    asyncio.run(main())
