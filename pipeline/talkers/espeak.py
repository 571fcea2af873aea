"""The built-in voice: eSpeak NG through ``espeakng-loader`` and ctypes.

The library is process-global C state, so one worker thread owns it (a
:class:`~duplex.pipeline.talkers.pool.SynthesisPool` of one) and a module lock
serialises every call into it. Synthesis runs ~1000x faster than
real time, so the thread is never the bottleneck; what must not happen is a
slow listener holding the library. Text is therefore synthesised a clause at a
time: a clause is handed over as it is made (it streams), the next clause is
only started when the consumer asks for more (backpressure), and cancelling sets
a flag the synthesis callback checks, which stops eSpeak mid-utterance.
"""

from __future__ import annotations

import asyncio
import ctypes
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import espeakng_loader
import numpy as np

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.talker import OpenAIVoice, SpeechRequest, TalkerChunk, TalkerError, WordMark, is_openai_voice
from duplex.pipeline.talkers.pool import PoolJob, SynthesisPool


class _Library:
    """The C library's process-wide state, as Python sees it.

    libespeak-ng keeps one synthesiser per process whatever Python does: it is
    initialised once, and its current voice is shared. This is the one piece of
    module state in the project, because the thing it describes is process state.
    """

    lock = threading.Lock()
    handle: ctypes.CDLL | None = None
    sample_rate = 0
    voice: str | None = None

    @classmethod
    def open(cls) -> ctypes.CDLL:
        with cls.lock:
            if cls.handle is None:
                lib = ctypes.CDLL(espeakng_loader.get_library_path())
                lib.espeak_Synth.argtypes = [
                    ctypes.c_void_p,
                    ctypes.c_size_t,
                    ctypes.c_uint,
                    ctypes.c_int,
                    ctypes.c_uint,
                    ctypes.c_uint,
                    ctypes.c_void_p,
                    ctypes.c_void_p,
                ]
                lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
                lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
                lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
                rate = lib.espeak_Initialize(
                    _AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), _INITIALIZE_DONT_EXIT
                )
                if rate <= 0:
                    raise TalkerError(f"espeak_Initialize returned {rate}")
                cls.sample_rate = int(rate)
                cls.handle = lib
            return cls.handle


def phonemize(text: str, voice: str = "en-us") -> list[str]:
    """eSpeak NG's IPA (with stress marks) for ``text``: one string per clause, its words
    separated by spaces, the clause's punctuation kept at its end (a neural voice reads
    them). Thread-safe: the library's lock is held, and its current voice noted."""
    lib = _Library.open()
    out: list[str] = []
    with _Library.lock:
        if voice != _Library.voice:
            _Library.voice = None
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise TalkerError(f"eSpeak NG has no voice {voice!r}")
            _Library.voice = voice
        for m in re.finditer(r"[^,.!?;:]+[,.!?;:]*", text):
            words = m.group().rstrip(",.!?;:")
            if not words.strip():
                continue
            buf = ctypes.c_char_p(words.encode())
            clause: list[str] = []
            while buf.value:
                ipa = lib.espeak_TextToPhonemes(ctypes.byref(buf), _CHARS_UTF8, _PHONEMES_IPA)
                if ipa:
                    clause.append(ipa.decode().strip())
            out.append(" ".join(clause) + m.group()[len(words) :][:1])
    return out


_AUDIO_OUTPUT_SYNCHRONOUS = 2
_PHONEMES_IPA = 0x02
_INITIALIZE_DONT_EXIT = 0x8000
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_PARAM_RATE = 1

DEFAULT_VOICE = "en-us+klatt2"
DEFAULT_WPM = 160
MAX_CLAUSE_CHARS = 160

# OpenAI's voice names map onto eSpeak voices so unmodified Realtime clients work.
VOICE_ALIASES: dict[OpenAIVoice, str] = {
    "alloy": "en-us+klatt2",
    "ash": "en-us+m3",
    "ballad": "en-us+m5",
    "coral": "en-us+f2",
    "echo": "en-us+m1",
    "sage": "en-us+f4",
    "shimmer": "en-us+f3",
    "verse": "en-us+m7",
    "marin": "en-us+f5",
    "cedar": "en-us+m2",
}


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


class _Voice(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))
_END = object()


@dataclass(eq=False)
class _Job(PoolJob):
    """One clause to synthesise; its audio streams back to the loop as it is made.

    The queue gets ``(samples, words)`` pieces, then ``_END`` (or a :class:`TalkerError`).
    """

    text: str = ""
    voice: str = ""
    wpm: int = DEFAULT_WPM
    out: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    samples: int = 0
    aborted: bool = False
    """Stopped mid-utterance because the reply was cancelled."""

    def deliver(self, item: object) -> None:
        """Hand an item to the event loop without blocking this thread."""
        self.call_in_loop(self.out.put_nowait, item)


def split_for_speech(text: str, max_chars: int = MAX_CLAUSE_CHARS) -> list[tuple[int, str]]:
    """Split ``text`` into (offset, clause) pieces that are cheap to synthesise.

    Sentences first; a sentence longer than ``max_chars`` at commas, then at
    spaces. Offsets point into ``text`` so word positions stay exact.
    """
    pieces: list[tuple[int, str]] = []
    for m in re.finditer(r"[^.!?;]+(?:[.!?;]+|$)", text):
        _split_long(m.start(), m.group(), max_chars, pieces)
    return [(o, p) for o, p in pieces if p.strip()]


def _split_long(offset: int, piece: str, max_chars: int, out: list[tuple[int, str]]) -> None:
    if len(piece) <= max_chars:
        out.append((offset, piece))
        return
    cut = piece.rfind(",", 0, max_chars)
    if cut <= 0:
        cut = piece.rfind(" ", 0, max_chars)
    if cut <= 0:
        cut = max_chars - 1
    out.append((offset, piece[: cut + 1]))
    _split_long(offset + cut + 1, piece[cut + 1 :], max_chars, out)


class EspeakRuntime:
    """Owns the eSpeak NG library on one worker thread; shared by every session.

    The thread is a pool of one: the library is one instance with one callback.
    """

    def __init__(self) -> None:
        try:
            self._lib = _Library.open()
        except (OSError, TalkerError) as exc:
            raise TalkerError(f"eSpeak NG failed to start: {exc}") from None
        self.sample_rate = _Library.sample_rate
        self._current: _Job | None = None
        self._callback = _CALLBACK(self._on_audio)  # kept referenced: C holds the pointer
        # Not niced: a clause takes a millisecond or two, and a listener waits for the first.
        self.pool: SynthesisPool[_Job] = SynthesisPool(self._make, workers=1, nice=None, name="espeak")
        self._voice_names = self._list_voices()
        self._variants = self._list_variants()

    def _list_voices(self) -> list[str]:
        with _Library.lock:
            voices = self._lib.espeak_ListVoices(None)
        names: set[str] = set()
        i = 0
        while voices[i]:
            ident = voices[i].contents.identifier
            if ident:
                names.add(ident.decode().rsplit("/", 1)[-1].lower())
            i += 1
        return sorted(names)

    @staticmethod
    def _list_variants() -> list[str]:
        folder = Path(espeakng_loader.get_data_path()) / "voices" / "!v"
        return sorted(p.name.lower() for p in folder.iterdir()) if folder.is_dir() else []

    @property
    def jobs_started(self) -> int:
        """Clauses whose synthesis began."""
        return self.pool.started

    @property
    def jobs_aborted(self) -> int:
        """Clauses stopped mid-synthesis because their reply was cancelled."""
        return self.pool.stopped - self.pool.skipped

    def _make(self, job: _Job) -> object:
        """Synthesise ``job`` (its audio streams out through the callback): ``_END``
        when done. A cancelled job's end is not delivered (the pool sees the cancel)."""
        self._synthesise(job)
        return _END

    def _synthesise(self, job: _Job) -> None:
        data = job.text.encode("utf-8") + b"\0"
        with _Library.lock:
            self._lib.espeak_SetSynthCallback(self._callback)
            if job.voice != _Library.voice:
                _Library.voice = None
                if self._lib.espeak_SetVoiceByName(job.voice.encode()) != 0:
                    raise TalkerError(f"eSpeak NG has no voice {job.voice!r}")
                _Library.voice = job.voice
            self._lib.espeak_SetParameter(_PARAM_RATE, job.wpm, 0)
            self._current = job
            try:
                rc = self._lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE, None, None)
            finally:
                self._current = None
        # 0 is success; 1 (internal error) also comes back after an abort.
        if rc not in (0, 1) or (rc == 1 and not job.aborted):
            raise TalkerError(f"espeak_Synth returned {rc}")

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], count: int, events: ctypes._Pointer[_Event]) -> int:
        job = self._current
        if job is None:
            return 1
        if job.cancelled.is_set():
            job.aborted = True
            return 1  # stops eSpeak mid-utterance
        words: list[tuple[int, int, int]] = []
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            ev = events[i]
            if ev.type == _EVENT_WORD:
                words.append((ev.text_position - 1, ev.length, ev.sample))
            i += 1
        # A copy through bytes: np.ctypeslib.as_array would make (and ctypes cache forever)
        # one array type per distinct block length.
        samples = (
            np.frombuffer(ctypes.string_at(wav, count * 2), np.int16) if count > 0 and wav else np.zeros(0, np.int16)
        )
        if samples.size or words:
            job.deliver((samples, words))
            job.samples += samples.size
        return 0

    def submit(self, job: _Job) -> None:
        """Queue a clause for the worker thread (a reply's first clause goes first)."""
        self.pool.submit(job)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted clause has been synthesised, aborted or skipped."""
        return self.pool.wait_idle(timeout)

    def voices(self) -> list[str]:
        """Every voice (language) eSpeak NG knows; add a variant with ``+name``."""
        return list(self._voice_names)

    def variants(self) -> list[str]:
        """Voice variants (``en-us+klatt2``'s ``klatt2``)."""
        return list(self._variants)

    def close(self) -> None:
        """Stop the worker thread: the clause being made stops now, queued ones are made first."""
        current = self._current
        if current is not None:
            current.cancel()
        self.pool.close()


class EspeakTalker:
    """The built-in streaming, abortable talker (22050 Hz PCM16)."""

    name = "espeak"
    artifact_id = "espeak-ng@" + Path(espeakng_loader.get_data_path()).parent.name

    def __init__(
        self, runtime: EspeakRuntime | None = None, *, default_voice: str = DEFAULT_VOICE, wpm: int = DEFAULT_WPM
    ) -> None:
        self._own_runtime = runtime is None
        self.runtime = runtime or EspeakRuntime()
        self.sample_rate = self.runtime.sample_rate
        self.default_voice = default_voice
        self.wpm = wpm
        self.check_voice(default_voice)

    def resolve_voice(self, voice: str | None) -> str:
        """An OpenAI voice name or an eSpeak voice (optionally ``+variant``) to an eSpeak voice."""
        if not voice:
            return self.default_voice
        voice = voice.removeprefix("espeak:")  # the name the neural voice knows it by
        return VOICE_ALIASES[voice] if is_openai_voice(voice) else voice

    def check_voice(self, voice: str) -> None:
        """Raise ValueError if eSpeak NG cannot speak with ``voice``."""
        base, _, variant = self.resolve_voice(voice).lower().partition("+")
        if base not in self.runtime.voices() or (variant and variant not in self.runtime.variants()):
            raise ValueError(f"unknown voice {voice!r}")

    def voices(self) -> list[str]:
        return sorted(VOICE_ALIASES) + self.runtime.voices()

    def release(self, request_id: str) -> None:
        """Nothing is kept across a reply's segments."""

    async def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]:
        """Stream the request's audio clause by clause, with word positions."""
        loop = asyncio.get_running_loop()
        voice = self.resolve_voice(request.voice)
        wpm = int(min(450, max(80, round(self.wpm * request.speed))))
        base = 0
        for index, (offset, clause) in enumerate(split_for_speech(request.text)):
            job = _Job(loop, index == 0, text=clause, voice=voice, wpm=wpm)
            self.runtime.submit(job)
            try:
                while (item := await job.out.get()) is not _END:
                    if isinstance(item, BaseException):
                        raise item
                    samples, words = cast(tuple[np.ndarray, list[tuple[int, int, int]]], item)
                    marks = tuple(WordMark(offset + pos, offset + pos + length, base + at) for pos, length, at in words)
                    yield TalkerChunk(AudioBuffer(samples, "pcm16", self.sample_rate, self.name), marks)
                base += job.samples
            finally:
                job.cancel()

    async def aclose(self) -> None:
        if self._own_runtime:
            await asyncio.to_thread(self.runtime.close)
