"""The real-model path on a CUDA machine: SNAC decoder speed, and the vLLM talker where installed.

    python scripts/bench_gpu.py [--device cuda] [--snac PATH] [--model PATH --layout orpheus|FILE]

Without ``--snac`` it builds SNAC's real 24 kHz architecture with random weights
(same compute as the published checkpoint). It prints the decoder's real-time
factor for the window sizes the streaming vocoder uses, in float32 and float16,
and with ``--model`` (and vLLM installed) the talker's tokens/s and frames/s.
``--device cpu`` runs the same measurements on the CPU, as a smoke test.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from lab.stats import median
from lab.tables import header, row


def bench_snac(device: str, weights: str | None, runs: int) -> list[str]:
    import numpy as np
    import torch

    from duplex.pipeline.vocoders.snac import SnacVocoder
    from lab.models import build_snac

    path = weights or build_snac(Path(tempfile.mkdtemp()) / "snac")
    rows = []
    for dtype in (torch.float32, torch.float16) if device.startswith("cuda") else (torch.float32,):
        vocoder = SnacVocoder(path, device=device)
        vocoder.model.to(dtype)
        rng = np.random.default_rng(0)
        for window in (4, 16, 64):
            frames = [rng.integers(0, 4096, 7) for _ in range(window)]
            vocoder.decode(frames)
            times = []
            for _ in range(runs):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                t = time.perf_counter()
                vocoder.decode(frames)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            audio = window * vocoder.frame_samples / vocoder.sample_rate
            med = median(times)
            name = f"SNAC decode, {window}-frame window, {str(dtype).split('.')[-1]}"
            note = (f"{med / audio:.4f}", f"{audio / med:.0f}x")
            rows.append(row(name, times, "ms", scale=1000, digits=1, q=1.0, note=note))
    return rows


async def bench_talker(model: str, layout_spec: str, runs: int) -> list[str]:
    from duplex.pipeline.talker import SpeechRequest
    from duplex.pipeline.talkers.codec import CodecLayout
    from duplex.pipeline.talkers.vllm import CodecTalker, LocalEngine

    engine = LocalEngine(model, dtype="auto")
    await engine.start()
    talker = CodecTalker(engine, CodecLayout.load(layout_spec))
    rates = []
    for i in range(runs):
        t = time.perf_counter()
        frames = 0
        async for _ in talker.speak(SpeechRequest(f"g{i}", "This is a sentence for the benchmark. " * 3)):
            frames += 1
        rates.append(frames / (time.perf_counter() - t))
    await talker.aclose()
    med = median(rates)
    return [
        f"| talker frames/s (tokens/s = x7) | {med:.1f} | {min(rates):.1f} (min) | {11.71875 / med:.4f} "
        f"| {med / 11.71875:.0f}x |"
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--snac", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--layout", default="orpheus")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device visible; use --device cpu for a smoke run")
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"\nDuplex real-model path on {name} (torch {torch.__version__})\n")
    print(header("measurement", "median", "worst", "real-time factor", "x real time"))
    for r in bench_snac(args.device, args.snac, args.runs):
        print(r)
    if args.model:
        try:
            import vllm  # noqa: F401
        except ImportError:
            print("| talker | vLLM is not installed here | | | |")
        else:
            for r in asyncio.run(bench_talker(args.model, args.layout, args.runs)):
                print(r)


if __name__ == "__main__":
    main()
