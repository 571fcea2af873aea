"""Recognition on the natural-voice set: word error and CPU per second of speech,
per recogniser and condition.

Every turn of ``tests/voices`` (Kokoro and Piper voices, human recordings; 56
utterances, ~170 s of speech) is decoded clean, at -35 dBFS, in the telephone band
(300-3400 Hz, mu-law), and in babble and music at 10 dB SNR, by each recogniser
one utterance at a time. CPU is the whole process's user+system time (workers
included) over the seconds of audio decoded. The baseline in the same run is
Whisper tiny.en decoding each utterance in the 30 s window every stock Whisper
runtime uses (what ``faster-whisper`` and the OpenAI-compatible servers do),
against Duplex's window sized to the audio.

``--split`` picks the part of the corpus: ``heldout`` (the default: voices the project
never tuned on, the figures that decide), ``tune`` or ``all``.

``--enhancer`` adds each Whisper model again with Hush before it (``pipeline/enhancer.py``:
only on audio its levels call noisy).

A second table gives each recogniser's WER by family (how the voice was made: neural,
HTS, clustergen, diphone, or a human recording), over all five conditions.

    python scripts/bench_recognition.py [--models tiny.en,base,pocketsphinx] [--split heldout] [--enhancer]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import numpy as np

from duplex.pipeline.enhancer import Hush
from duplex.pipeline.recognizers import whisper as whisper_module
from lab.tables import spread
from lab.voices import load_corpus, variant, wer

RATE = 16000
CONDITIONS = ("clean", "low", "tel", "babble10", "music10")

Decode = Callable[[np.ndarray], str]


def cpu_seconds() -> float:
    """User+system CPU of this process and its children (pocketsphinx's workers; without
    psutil, this process's alone)."""
    try:
        import psutil
    except ImportError:
        return time.process_time()
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker replaced meanwhile
            total += sum(child.cpu_times()[:2])
    return total


def whisper(model: str, *, full_window: bool = False, enhanced: bool = False) -> Decode:
    rec = whisper_module.WhisperRecognizer(model, workers=1, enhancer=Hush() if enhanced else None)
    rec.load()
    rec.transcribe_blocking(np.zeros(RATE // 2, np.int16), RATE)
    if not full_window:
        return lambda pcm: rec.transcribe_blocking(pcm, RATE)

    def decode(pcm: np.ndarray) -> str:
        tail = whisper_module.TAIL_FRAMES
        whisper_module.TAIL_FRAMES = whisper_module.MAX_FRAMES  # every window 30 s
        try:
            return rec.transcribe_blocking(pcm, RATE)
        finally:
            whisper_module.TAIL_FRAMES = tail

    return decode


def pocketsphinx() -> Decode:
    from duplex.pipeline.recognizers.pocketsphinx import PocketsphinxRecognizer

    rec = PocketsphinxRecognizer(workers=1, nice=0)
    rec.transcribe_blocking(np.zeros(RATE // 2, np.int16), RATE)
    return lambda pcm: rec.transcribe_blocking(pcm, RATE)


def measure(name: str, decode: Decode, split: str) -> dict[str, object]:
    corpus = load_corpus()
    part = corpus.clips if split == "all" else corpus.split(split)
    clips = [c for c in part if c.kind in ("turn", "paused")]
    row: dict[str, object] = {"name": name}
    walls: list[float] = []
    cpu = audio = 0.0
    families: dict[str, list[int]] = {}
    for condition in CONDITIONS:
        errors = words = 0
        for i, clip in enumerate(clips):
            assert clip.text is not None
            pcm = variant(clip, condition, RATE, seed=i)
            c0, t0 = cpu_seconds(), time.perf_counter()
            text = decode(pcm)
            walls.append(time.perf_counter() - t0)
            cpu += cpu_seconds() - c0
            audio += pcm.size / RATE
            e, n = wer(clip.text, text)
            errors, words = errors + e, words + n
            tally = families.setdefault(clip.family, [0, 0])
            tally[0], tally[1] = tally[0] + e, tally[1] + n
        row[condition] = errors / words
    rates = {f: e / max(1, n) for f, (e, n) in sorted(families.items())}
    row["families"], row["human"] = rates, rates.get("human", float("nan"))
    row["cpu"] = cpu / audio
    row["wall"] = spread(walls, scale=1000)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny.en,base,pocketsphinx")
    ap.add_argument("--split", choices=("heldout", "tune", "all"), default="heldout")
    ap.add_argument("--enhancer", action="store_true", help="each Whisper model with Hush before it too")
    args = ap.parse_args()
    rows = [measure("tiny.en, 30 s window (baseline)", whisper("tiny.en", full_window=True), args.split)]
    for model in args.models.split(","):
        if model == "pocketsphinx":
            rows.append(measure("pocketsphinx 5", pocketsphinx(), args.split))
        else:
            rows.append(measure(f"Whisper {model} (Duplex)", whisper(model), args.split))
            if args.enhancer:
                rows.append(measure(f"Whisper {model} + Hush", whisper(model, enhanced=True), args.split))
    print(f"\nPart of the corpus: {args.split}\n")
    base_cpu = float(rows[0]["cpu"])  # type: ignore[arg-type]
    head = " | ".join(CONDITIONS)
    print(f"| recogniser | {head} | human | CPU s / speech s | vs baseline | ms per utterance, median / p95 |")
    print("|---|" + "---|" * (len(CONDITIONS) + 5))
    for r in rows:
        wers = " | ".join(f"{float(r[c]):.3f}" for c in CONDITIONS)  # type: ignore[arg-type]
        cpu = float(r["cpu"])  # type: ignore[arg-type]
        print(f"| {r['name']} | {wers} | {float(r['human']):.3f} | {cpu:.3f} | {cpu / base_cpu:.2f}x | {r['wall']} |")  # type: ignore[arg-type]
    names = list(rows[0]["families"])  # type: ignore[call-overload]
    print(f"\nBy family (the voices' synthesis, or human; all five conditions): WER, {args.split}\n")
    print(f"| recogniser | {' | '.join(names)} |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        fam: dict[str, float] = r["families"]  # type: ignore[assignment]
        print(f"| {r['name']} | " + " | ".join(f"{fam[f]:.3f}" for f in names) + " |")


if __name__ == "__main__":
    main()
