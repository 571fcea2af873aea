"""The talker interface: text in, a stream of audio buffers (PCM or codec frames) out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, get_args

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.state import StateHandle

OpenAIVoice = Literal["alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"]
"""OpenAI's voice names: every talker speaks each of them (with a voice of its own), so
unmodified Realtime clients work."""
OPENAI_VOICES: tuple[OpenAIVoice, ...] = get_args(OpenAIVoice)
DEFAULT_VOICE: OpenAIVoice = "alloy"
REPLIES_KEPT = 4096
"""Replies a talker remembers across their text segments until released. The reply stage
releases each one as it ends, so only live replies are kept; the bound only catches a
caller that never releases (far above --max-sessions)."""
"""OpenAI's default voice, and a session's."""


def is_openai_voice(name: str | None) -> TypeGuard[OpenAIVoice]:
    """Whether ``name`` is one of OpenAI's voice names."""
    return name in OPENAI_VOICES


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
    text_only: bool = False
    """No talker made it: it only carries reply text (of a segment that made no sound),
    so its empty audio says nothing of the talker's rate or format."""

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

    Lifecycle: a talker is ready once built. It has no ``start``: whoever builds it
    (``duplex.app.cli.backends``) loads and warms its runtime or starts its engine
    first, because a runtime may be shared by several talkers and a voice whose
    weights are missing is replaced by another before serving. ``aclose`` stops the
    threads or engine it holds (see :mod:`duplex.pipeline.backends`).
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

    def release(self, request_id: str) -> None:
        """The reply ``request_id`` is over (spoken, cancelled or failed): forget what was
        kept for it across its text segments (the voice chosen at its start). The reply's
        stage calls it once; a talker that keeps nothing does nothing."""
        ...

    async def aclose(self) -> None:
        """Stop the threads or engine it holds; nothing is spoken after it."""
        ...
