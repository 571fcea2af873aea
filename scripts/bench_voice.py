"""The voices, side by side: first audio, real-time factor, CPU and memory, how well
Whisper hears them, word-timing error, and how many can speak at once in real time.

eSpeak NG is the baseline, measured in the same run. For each voice, on 20 varied
sentences (numbers, names, questions, long and short):

* first audio: the text of the reply -> its first PCM chunk, one reply at a time, and
  while another session listens;
* real-time factor: the time to make a reply / its length, alone and while another
  session listens (Whisper tiny.en partials every 400 ms on a growing utterance, at
  real time, as the server does while someone speaks);
* CPU: the process's CPU seconds per second of speech made; RSS: the process's
  growth when the voice is loaded;
* WER: Whisper tiny.en (the server's own ears) on each sentence;
* word timing: the talker's word positions against forced alignment by Whisper
  (faster-whisper's word timestamps on the same audio), median / p95 error;
* at once: the most replies that play without a gap when made together, each
  consumed at real time by its own listener.

One WAV per voice goes to ``artifacts/voices/`` for listening.

    python scripts/bench_voice.py [--voices espeak:alloy,hibari:alloy,kokoro:cedar]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from duplex.pipeline.recognizers.whisper import MODELS, WhisperRecognizer
from duplex.pipeline.talker import SpeechRequest, Talker
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariRuntime, HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroRuntime, KokoroTalker
from lab.tables import spread
from lab.voices import resample, wer, write_wav

SENTENCES = [  # words only: a recogniser writes numbers as digits, which a word count would call errors
    "Sure, I can help with that.",
    "The meeting was moved to Thursday afternoon.",
    "Please remember to buy milk, eggs and bread on your way home.",
    "It looks like it will rain tomorrow, so take an umbrella.",
    "Your package should arrive in two or three business days.",
    "Turn left at the second light, then keep going for about a mile.",
    "I set a timer for ten minutes.",
    "Do you want me to read the next message?",
    "The flight to Chicago leaves from the last gate on the left.",
    "Water boils faster when you put a lid on the pot.",
    "Here is a quick recipe: pasta, garlic, olive oil and a little chili.",
    "Okay, I will remind you in the morning.",
    "I could not find anything called Blue Harbor in your contacts.",
    "The battery is almost empty, so plug in the charger soon.",
    "Would you like the short version or the full story?",
    "Elephants can recognize themselves in a mirror, which few animals can do.",
    "Your next appointment is with Maria Patel on Monday morning.",
    "That song was released before you were born.",
    "I have added oranges to your shopping list.",
    "Sorry, I did not catch that. Could you say it again?",
]
LONG = " ".join(SENTENCES[1:9])
RATE_16K = 16000
AT_ONCE = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
REPLY_IDS = itertools.count()


@dataclass
class Row:
    name: str
    first_ms: list[float] = field(default_factory=list)
    first_listening_ms: list[float] = field(default_factory=list)
    rtf: float = 0.0
    rtf_listening: float = 0.0
    cpu: float = 0.0
    rss_mb: float = 0.0
    wer: float = 0.0
    timing_ms: list[float] = field(default_factory=list)
    at_once: str = ""


def cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


async def make(talker: Talker, text: str, voice: str) -> tuple[np.ndarray, int, list[tuple[int, int, int]], float]:
    """(PCM, rate, word marks, seconds to the first chunk) of one reply, made as fast as it can be."""
    t0 = time.perf_counter()
    first = None
    pcm, marks, rate = [], [], 0
    async for chunk in talker.speak(SpeechRequest(f"bench{next(REPLY_IDS)}", text, voice=voice)):
        first = first if first is not None else time.perf_counter() - t0
        pcm.append(chunk.audio.data)
        rate = chunk.audio.rate
        marks += [(m.start, m.end, m.position) for m in chunk.words]
    return np.concatenate(pcm), rate, marks, first or 0.0


class Listener:
    """Another session listening at real time: Whisper partials every 400 ms on an
    utterance that grows to 4 s and starts again."""

    def __init__(self, recognizer: WhisperRecognizer, speech: np.ndarray) -> None:
        self.rec, self.speech = recognizer, speech
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.perf_counter()
        while not self.stop.is_set():
            heard = (time.perf_counter() - start) % 4.0
            self.rec.transcribe_blocking(self.speech[: max(1600, int(heard * RATE_16K))], RATE_16K, True)
            self.stop.wait(0.4)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


async def gapless_at_once(talker: Talker, voice: str, n: int) -> bool:
    """Whether ``n`` replies made together all play without a gap (after their first chunk)."""

    async def one() -> float:
        late = 0.0
        clock = None
        async for chunk in talker.speak(SpeechRequest(f"bench{next(REPLY_IDS)}", LONG, voice=voice)):
            now = time.perf_counter()
            if clock is None:
                clock = now
            late += max(0.0, now - clock)  # the listener had run out of audio this long ago
            clock = max(clock, now) + chunk.audio.data.size / chunk.audio.rate
            await asyncio.sleep(max(0.0, clock - now - 0.5))  # a playback buffer of 0.5 s
        return late

    lates = await asyncio.gather(*(one() for _ in range(n)))
    return max(lates) <= 0.1


def aligned_starts(model: object, pcm: np.ndarray, rate: int) -> list[tuple[str, float]]:
    segments, _ = model.transcribe(  # type: ignore[attr-defined]
        resample(pcm, rate, RATE_16K).astype(np.float32) / 32768.0, beam_size=5, word_timestamps=True
    )
    return [(w.word, w.start) for s in segments for w in s.words]


def norm(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


async def measure(label: str, talker: Talker, voice: str, rec: WhisperRecognizer, aligner: object) -> Row:
    row = Row(label)
    await make(talker, "Hello there.", voice)  # warm
    audio, made_s = 0.0, 0.0
    errors = words = 0
    out = Path("artifacts/voices")
    out.mkdir(parents=True, exist_ok=True)
    sample = []
    cpu = 0.0
    for text in SENTENCES:
        t0, c0 = time.perf_counter(), cpu_seconds()
        pcm, rate, marks, first = await make(talker, text, voice)
        made_s += time.perf_counter() - t0
        cpu += cpu_seconds() - c0  # the voice's alone, not the judging that follows
        audio += pcm.size / rate
        row.first_ms.append(first * 1000)
        heard = rec.transcribe_blocking(resample(pcm, rate, RATE_16K), RATE_16K)
        e, n = wer(text, heard)
        errors, words = errors + e, words + n
        if len(sample) < 8:
            sample += [pcm, np.zeros(rate // 3, np.int16)]
        aligned = aligned_starts(aligner, pcm, rate)
        if [norm(w) for w, _ in aligned] == [norm(text[s:e]) for s, e, _ in marks]:
            row.timing_ms += [abs(p / rate - t) * 1000 for (_, _, p), (_, t) in zip(marks, aligned, strict=True)]
    row.rtf, row.cpu, row.wer = made_s / audio, cpu / audio, errors / words
    write_wav(out / f"{label.split(' (')[0].replace(' ', '_').lower()}.wav", np.concatenate(sample), rate)
    speech = resample(pcm, rate, RATE_16K)
    with Listener(rec, np.tile(speech, 4)):
        t0 = time.perf_counter()
        pcm, rate, _, _ = await make(talker, LONG, voice)
        row.rtf_listening = (time.perf_counter() - t0) / (pcm.size / rate)
        for text in SENTENCES:  # the first clause alone, as the reply's stages hand it on
            clause = re.split(r"(?<=[,.?!:])\s", text)[0]
            row.first_listening_ms.append((await make(talker, clause, voice))[3] * 1000)
    most = 0
    for n in AT_ONCE:
        if not await gapless_at_once(talker, voice, n):
            break
        most = n
    row.at_once = f"{most}" if most < AT_ONCE[-1] else f"≥{most}"
    return row


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voices", default="espeak:alloy,hibari:alloy,kokoro:alloy,kokoro:cedar,kokoro:shimmer")
    args = ap.parse_args()
    from faster_whisper import WhisperModel

    rec = WhisperRecognizer("tiny.en", workers=1)
    rec.load()
    aligner = WhisperModel(str(MODELS["tiny.en"].config.locate().parent), device="cpu", compute_type="int8")
    rows = []
    kokoro: KokoroTalker | None = None
    hibari: HibariTalker | None = None
    espeak = EspeakTalker()
    for spec in args.voices.split(","):
        kind, voice = spec.split(":")
        rss0 = psutil.Process().memory_info().rss
        if kind == "kokoro":
            if kokoro is None:
                runtime = KokoroRuntime(capacity=100)  # no fallback: the raw capacity is measured
                kokoro = KokoroTalker(runtime, espeak)
                rss = psutil.Process().memory_info().rss - rss0
            talker: Talker = kokoro
            label = f"Kokoro {kokoro.resolve_voice(voice)} ({voice})"
        elif kind == "hibari":
            if hibari is None:
                hibari = HibariTalker(HibariRuntime(capacity=100), espeak)
                rss = psutil.Process().memory_info().rss - rss0
            talker, label = hibari, f"hibari heart ({voice})"
        else:
            talker, label, rss = espeak, f"eSpeak NG {espeak.resolve_voice(voice)} ({voice}, baseline)", 0
        row = await measure(label, talker, voice, rec, aligner)
        row.rss_mb = rss / 2**20
        rows.append(row)
        print(f"{label}: done", flush=True)
    base = rows[0]
    print(f"\nVoices on this CPU ({os.cpu_count()} cores), {len(SENTENCES)} sentences each\n")
    print(
        "| voice | first audio ms, median / p95 | vs baseline | first clause, another session listening, ms | "
        "real-time factor | RTF, another session listening | CPU s / speech s | RSS MB (voice loaded) | "
        "WER (Whisper tiny.en) | word timing error ms, median / p95 | replies at once in real time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = np.median(r.first_ms) / max(1e-9, float(np.median(base.first_ms)))
        print(
            f"| {r.name} | {spread(r.first_ms)} | {ratio:.1f}x | {spread(r.first_listening_ms)} | "
            f"{r.rtf:.3f} | {r.rtf_listening:.3f} | "
            f"{r.cpu:.3f} | {r.rss_mb:.0f} | {r.wer:.3f} | {spread(r.timing_ms)} | {r.at_once} |"
        )
    await espeak.aclose()
    if kokoro is not None:
        kokoro.runtime.close()
    if hibari is not None:
        hibari.runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
