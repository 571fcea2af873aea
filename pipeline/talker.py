"""The talker interface: text in, a stream of audio buffers (PCM or codec frames) out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.state import StateHandle


@dataclass(frozen=True, slots=True)
class WordMark:
    """Where a word of the reply text starts in the reply's audio."""

    start: int
    """Character offset of the word in the request text."""
    end: int
    position: int
    """Offset from the start of the reply, in the talker's own units (samples of
    its PCM, or codec frames), so a later stage can map it onto output samples."""


@dataclass(frozen=True, slots=True)
class TalkerChunk:
    """One piece of a talker's output and the words that begin inside it."""

    audio: AudioBuffer
    words: tuple[WordMark, ...] = ()
    text: str = ""
    """Reply text this chunk makes known (the engine sets it when text streams in)."""

    @property
    def nbytes(self) -> int:
        """What the chunk costs against a stream's byte bound."""
        return self.audio.nbytes + len(self.text)


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """What to say and how."""

    request_id: str
    text: str
    voice: str | None = None
    speed: float = 1.0
    state: StateHandle | None = None
    """The session's handle on backend state; a talker refuses one from another checkpoint."""


class TalkerError(RuntimeError):
    """A talker failed mid-reply; the reply fails, the session lives on."""


class Talker(Protocol):
    """Turns text into a stream of audio buffers.

    ``speak`` is an async generator. Closing or cancelling it must abort the
    backend's work at once (the next chunk boundary at the latest) and must never
    block the event loop.
    """

    name: str
    artifact_id: str
    """What produces the audio (a checkpoint's identity, or the built-in voice's)."""

    def speak(self, request: SpeechRequest) -> AsyncIterator[TalkerChunk]: ...

    def voices(self) -> list[str]:
        """Voice names this talker accepts."""
        ...

    def check_voice(self, voice: str) -> None:
        """Raise ValueError naming the problem if ``voice`` is not usable."""
        ...

    async def aclose(self) -> None: ...
