"""The default voice: hibari, Kokoro-82M's af_heart voice distilled into a 6 M-parameter model.

``hibari-tts==0.2.1`` (Apache-2.0, with NOTICE) carries everything in its wheel: an
8 MB int8 ONNX graph with an iSTFT vocoder, and its own G2P (misaki's lexicons and
small nets; no eSpeak). Every file it reads is checked against a pinned sha256 here
before the model is built. Only its bundled voice (``heart``) is ever used: the
package's other voice names fetch files from a model hub at run time, so this module
never passes a voice name to it (the model file is given by path) and refuses every
name it does not own.

It makes a sentence in ~20–50 ms on one core (~50x real time), so a reply is made
sentence by sentence (long ones at their commas), the next sentence while the current
one is handed on, and many replies fit at once. Like Kokoro it pads each call with
~0.3 s of silence before the speech and ~0.5 s after it: both are cut to natural
pauses. Word positions are each word's share of the sentence's phonemes.

OpenAI's default voice name, ``alloy``, is this voice (it was Kokoro's af_heart, the
voice hibari was distilled from). The other OpenAI names and Kokoro's own names speak
with Kokoro, when it is loaded, within its capacity; beyond that, with this voice;
beyond this voice's capacity, with eSpeak NG (``espeak:<voice>`` always).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from duplex.pipeline.arena import shrinking
from duplex.pipeline.talker import (
    DEFAULT_VOICE,
    OPENAI_VOICES,
    SpeechRequest,
    TalkerChunk,
    is_openai_voice,
)
from duplex.pipeline.talkers import espeak
from duplex.pipeline.talkers.pool import Cancelled, Capacity, Job, SynthesisPool
from duplex.pipeline.talkers.router import Choice, Routed, Router
from duplex.pipeline.talkers.segments import FIRST_WORDS, speech_chunks
from duplex.pipeline.weights import PackagedFile

if TYPE_CHECKING:  # Kokoro is optional at run time
    from duplex.pipeline.talkers.kokoro import KokoroTalker

log = logging.getLogger("duplex.voice")

RATE = 24000
CHUNK = RATE // 10
"""Samples per chunk handed on (100 ms): the pacing and cancel granularity."""
WORKERS = 2
"""Synthesis threads (one onnxruntime thread each)."""
CAPACITY = 16
"""Replies made at once before a new one speaks with eSpeak NG (scripts/bench_voice.py
measured 16 streams in real time on 2 cores, each sentence still ~10x faster than it plays)."""
NICE = 0
"""Not niced: a sentence costs tens of milliseconds, and the listener waits for the first."""
MAX_CHARS = 160
"""Longer sentences are made in pieces cut at commas (the model reads 400 phonemes at most)."""

VERSION = "0.2.1"
_PINS = {
    "hibari.onnx": "5f70741d4e900f4e85d0037498736cc1b3e1b9a63a13546a5da1e63abf4fccd8",
    "vocab.json": "70abefbe8a1c8865e43e0a43bbdc25b91a33e4aa053479d443ccf23e20a59e5d",
    "oov.onnx": "d3cfd8122c5f172a98c8de38268bf1213ee09f2c2ae4df6e055fc6532590fe76",
    "oov.json": "b462e6e5dbdf0e7346c732385d0dd844f612f1770871441c56932bff4ca75d8c",
    "lexicon_us_gold.json.gz": "63ae94f8ef0e906d5b24fe9b59ffcbd1529aca5686a774610e43973cbaa86ad2",
    "lexicon_us_silver.json.gz": "c4c2546ebf1eb07010331e7ef785a431aa17ba8e7bfb6b4af8d654ee96a71fd3",
    "tagger.json.gz": "d2da7502284bbbe45d49e0b7ce3ce67bdab82254150f4317f1b8559b4d38d0eb",
    "tokenizer_exceptions.json": "ddf3a3da07bdcf5144270ea4530191d8580fb4fd6f5ae93296e87916e795659a",
    "normalize.json": "d478ff05404bc43ac3e0468e306674e51085f1b1afc94cdef7c7ea4fb0d56bd8",
}
FILES = tuple(PackagedFile("hibari-tts", VERSION, f"hibari/assets/{name}", sha) for name, sha in _PINS.items())
MODEL = FILES[0]

VOICE = "heart"
NAMES = (DEFAULT_VOICE, VOICE)
"""The names this voice answers to: OpenAI's default and its own."""
ESPEAK_PREFIX = "espeak:"

Route = Literal["hibari", "kokoro", "espeak"]


_LONG_NUMBER = re.compile(r"\d{16,}")
"""Digits beyond what a person reads as one number (quadrillions): said one by one."""
_SAYABLE = re.compile(r"[A-Za-z]+|\d{1,15}")


class HibariModel:
    """The verified model and its G2P; :meth:`make` is thread-safe."""

    def __init__(self) -> None:
        for spec in FILES:  # every file hibari will read, before it reads any
            spec.read()
        from hibari import Hibari

        # The model by path: a voice name would let the package look for a download.
        self.tts: Any = Hibari(model=str(MODEL.locate()), threads=1)
        self._g2p_lock = threading.Lock()
        self.phonemize(".")  # builds the G2P (lexicons, tagger) now, not in a first reply

    def phonemize(self, text: str) -> str:
        """Phonemes of ``text`` in the model's alphabet, words separated by spaces.

        Text its G2P cannot say is said another way, never refused: a number too long
        for its number words (37 digits raised IndexError) digit by digit, and anything
        else it fails on with only its words and numbers."""
        text = _LONG_NUMBER.sub(lambda m: " ".join(m.group()), text)
        with self._g2p_lock:  # its tokenizer and caches are plain Python state
            try:
                return str(self.tts.g2p(text))
            except Exception:
                log.warning("hibari could not say %r; saying it plainly", text[:80])
                return str(self.tts.g2p(" ".join(_SAYABLE.findall(text)) or "."))

    def make(self, phonemes: str, speed: float) -> np.ndarray:
        """Float audio at 24 kHz (with the model's padding)."""
        ids = self.tts.ids(phonemes)
        return np.asarray(self.tts.from_ids(ids, speed, np.random.default_rng(0)), np.float32)

    def shrink(self) -> None:
        """Give back the arena's unused memory: one run of a full stop, on the package's
        own session (its ``from_ids`` takes no run options)."""
        ids = self.tts.ids(self.phonemize("."))
        feed = {"ids": np.asarray([ids], np.int64), "speed": np.asarray([1.0], np.float32)}
        self.tts.sess.run(None, feed, shrinking())


def head_first(pieces: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """A reply's first piece made in two: its first few words alone, then the rest. The
    model's time grows with the text (21 ms for "Sure,", 65 ms for a 44-character
    clause, another session listening): the listener waits for the first words only."""
    if not pieces:
        return pieces
    offset, text = pieces[0]
    words = list(re.finditer(r"\S+", text))
    if len(words) <= FIRST_WORDS + 1:  # a last lone word would be its own tiny piece
        return pieces
    cut = words[FIRST_WORDS].start()
    return [(offset, text[:cut]), (offset + cut, text[cut:]), *pieces[1:]]


@dataclass(eq=False)
class _Job(Job[tuple[np.ndarray, str]]):
    """One sentence (or a long sentence's piece) to make."""

    text: str = ""
    speed: float = 1.0


class HibariRuntime(Capacity):
    """The model and its worker threads, shared by every session; its capacity counts
    sentences being made (beyond it a new reply speaks with eSpeak NG)."""

    def __init__(self, *, workers: int = WORKERS, capacity: int = CAPACITY, nice: int = NICE) -> None:
        super().__init__(capacity)
        self.model = HibariModel()
        self.pool: SynthesisPool[_Job] = SynthesisPool(self._make, workers=workers, nice=nice, name="hibari")

    def _make(self, job: _Job) -> tuple[np.ndarray, str]:
        phonemes = self.model.phonemize(job.text)
        if job.cancelled.is_set():
            raise Cancelled
        return self.model.make(phonemes, job.speed), phonemes

    def warm(self) -> None:
        """One short synthesis: the first real one does not pay for set-up."""
        self.model.make(self.model.phonemize("Hello there."), 1.0)

    def shrink(self) -> None:
        self.model.shrink()

    def close(self) -> None:
        self.pool.close()


class HibariTalker:
    """The default talker: hibari's voice for ``alloy``, Kokoro's voices for the other
    names (if given), eSpeak NG as ``espeak:<voice>`` and beyond capacity."""

    name = "hibari"
    artifact_id = f"hibari-{VERSION}@{MODEL.sha256[:12]}"
    sample_rate = RATE

    def __init__(
        self,
        runtime: HibariRuntime | None = None,
        fallback: espeak.EspeakTalker | None = None,
        *,
        kokoro: KokoroTalker | None = None,
        default_voice: str = DEFAULT_VOICE,
    ) -> None:
        self._own_runtime = runtime is None
        self.runtime = runtime or HibariRuntime()
        self._own_fallback = fallback is None
        self.fallback = fallback or espeak.EspeakTalker()
        self.kokoro = kokoro
        self.default_voice = default_voice
        self.router = Router()
        self.check_voice(default_voice)

    @property
    def fallbacks(self) -> int:
        """Replies spoken with eSpeak NG because a neural voice was at capacity."""
        return self.router.to("espeak")

    @property
    def overflows(self) -> int:
        """Replies asked of Kokoro that this voice spoke because Kokoro was at capacity."""
        return self.router.stepped[("kokoro", "hibari")]

    def names(self) -> list[str]:
        """The voice names besides eSpeak NG's: this voice's, then Kokoro's (OpenAI's names
        first), or only OpenAI's names when Kokoro is not loaded (they speak with this voice)."""
        others: tuple[str, ...] = OPENAI_VOICES
        if self.kokoro is not None:
            from duplex.pipeline.talkers.kokoro import VOICE_ALIASES
            from duplex.pipeline.talkers.kokoro_model import VOICES

            others = (*VOICE_ALIASES, *VOICES)
        return [*NAMES, *(n for n in others if n not in NAMES)]

    def _route(self, voice: str) -> Route:
        if voice.startswith(ESPEAK_PREFIX):
            return "espeak"
        if voice not in self.names():
            raise ValueError(f"unknown voice {voice!r} (one of {', '.join(self.names())}, or espeak:<voice>)")
        return "hibari" if voice in NAMES or self.kokoro is None else "kokoro"

    def check_voice(self, voice: str) -> None:
        """Raise ValueError unless ``voice`` is this voice, a Kokoro voice, or ``espeak:<voice>``."""
        if self._route(voice) == "espeak":
            self.fallback.check_voice(voice.removeprefix(ESPEAK_PREFIX))

    def voices(self) -> list[str]:
        return [*self.names(), *(ESPEAK_PREFIX + v for v in self.fallback.voices())]

    def _chain(self, voice: str) -> list[Choice]:
        """Where a reply asked of ``voice`` may speak, the wanted voice first."""
        espeak_voice = voice if is_openai_voice(voice) else DEFAULT_VOICE
        route = self._route(voice)
        if route == "espeak":
            return [Choice("espeak", voice.removeprefix(ESPEAK_PREFIX))]
        chain = [Choice("hibari", VOICE, self.runtime), Choice("espeak", espeak_voice)]
        if route == "kokoro" and self.kokoro is not None:
            chain.insert(0, Choice("kokoro", voice, self.kokoro.runtime))
        return chain

    async def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]:
        """Stream the request's audio sentence by sentence, with estimated word positions.
        A reply's text segments (one request each, the same ``request_id``) keep one voice."""
        voice = request.voice or self.default_voice
        reply = self.router.reply(request.request_id, lambda: self._chain(voice))
        source: AsyncIterator[TalkerChunk]
        if reply.route == "espeak":
            source = self.fallback.speak(replace(request, voice=reply.voice))
        elif reply.route == "kokoro":
            assert self.kokoro is not None
            source = self.kokoro.speak(replace(request, voice=reply.voice))
        else:
            source = self._speak(request, reply)
        # Closed here, not whenever it is collected: a cancel frees its work at once.
        async with contextlib.aclosing(cast(AsyncGenerator[TalkerChunk, None], source)):
            async for chunk in source:
                yield chunk

    async def _speak(self, request: SpeechRequest, reply: Routed) -> AsyncIterator[TalkerChunk]:
        loop = asyncio.get_running_loop()
        speed = float(min(2.0, max(0.5, request.speed)))
        pieces = espeak.split_for_speech(request.text, MAX_CHARS)
        first = reply.spoken == 0
        if first:
            pieces = head_first(pieces)
        reply.spoken += len(request.text)

        runtime = self.runtime

        def submit(index: int) -> _Job | None:
            if index >= len(pieces):
                return None
            job = _Job(loop, first and index == 0, loop.create_future(), text=pieces[index][1], speed=speed)
            runtime.hold(job)
            runtime.pool.submit(job)
            return job

        base = 0
        job = submit(0)
        try:
            for index, (offset, text) in enumerate(pieces):
                assert job is not None
                audio, phonemes = await job.done
                job = submit(index + 1)  # the next sentence is made while this one plays
                chunks = speech_chunks(
                    audio,
                    text,
                    [phonemes],
                    offset=offset,
                    base=base,
                    last=index == len(pieces) - 1,
                    rate=RATE,
                    size=CHUNK,
                    owner=self.name,
                )
                for chunk in chunks:
                    yield chunk
                base += sum(c.audio.data.size for c in chunks)
        finally:
            if job is not None:
                job.cancel()
                runtime.release(job)  # no longer awaited: it no longer counts

    def release(self, request_id: str) -> None:
        """The reply is over: its voice is chosen afresh if the id ever comes again."""
        self.router.release(request_id)
        if self.kokoro is not None:
            self.kokoro.release(request_id)

    def shrink(self) -> None:
        """Give back what the voices' arenas hold beyond the runs in progress."""
        self.runtime.shrink()
        if self.kokoro is not None:
            self.kokoro.shrink()

    async def aclose(self) -> None:
        if self._own_runtime:
            await asyncio.to_thread(self.runtime.close)
        if self.kokoro is not None:
            await self.kokoro.aclose()
        if self._own_fallback:
            await self.fallback.aclose()
