"""The thinker: what to say. Given the conversation so far, stream the reply's text.

The conversation a thinker sees holds every assistant reply only as far as the
user heard it (a truncated reply is cut at the last word begun by then), so the
next answer knows what was actually said. Closing or cancelling ``think`` must
abort the language-model request. The :class:`Segmenter` turns the text stream
into speakable pieces: the first at the first clause boundary, so speech starts
long before the model has finished.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ThinkRequest:
    """What the thinker answers: the conversation as chat messages."""

    request_id: str
    messages: tuple[dict[str, str], ...]
    """``{"role": "system"|"user"|"assistant", "content": ...}``, oldest first."""
    options: dict = field(default_factory=dict)


class Thinker(Protocol):
    """Streams a reply's text for a conversation."""

    name: str

    def think(self, request: ThinkRequest) -> AsyncIterator[str]: ...

    async def aclose(self) -> None: ...


NOTHING_HEARD = "I have nothing to repeat yet."
NOT_UNDERSTOOD = "Sorry, I did not catch that."


class EchoThinker:
    """The offline default: say back the last thing the user said."""

    name = "echo"

    async def think(self, request: ThinkRequest) -> AsyncIterator[str]:
        users = [m["content"] for m in request.messages if m["role"] == "user"]
        if not users:
            yield NOTHING_HEARD
            return
        yield users[-1].strip() or NOT_UNDERSTOOD

    async def aclose(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Segment:
    """A speakable piece of the reply and where it sits in the reply's text."""

    offset: int
    text: str


_CLAUSE = re.compile(r"[,;:.!?](?=\s)|[.!?]$")
_SENTENCE = re.compile(r"[.!?;](?=\s)")


class Segmenter:
    """Cuts a stream of text deltas into segments worth speaking.

    The first segment ends at the first clause boundary (or a space after
    ``first_max`` characters), so the talker starts early; later ones at sentence
    ends (or a space after ``max_chars``), so the voice flows.
    """

    def __init__(self, *, first_max: int = 48, max_chars: int = 240) -> None:
        self.first_max = first_max
        self.max_chars = max_chars
        self._buffer = ""
        self._offset = 0
        self._count = 0

    def feed(self, delta: str) -> list[Segment]:
        self._buffer += delta
        out = []
        while (cut := self._cut()) is not None:
            out.append(self._take(cut))
        return out

    def finish(self) -> list[Segment]:
        return [self._take(len(self._buffer))] if self._buffer.strip() else []

    def _cut(self) -> int | None:
        b = self._buffer
        pattern, limit = (_CLAUSE, self.first_max) if self._count == 0 else (_SENTENCE, self.max_chars)
        m = pattern.search(b)
        if m:
            return m.end()
        if len(b) > limit:
            space = b.rfind(" ", 0, limit)
            return space + 1 if space > 0 else limit
        return None

    def _take(self, n: int) -> Segment:
        seg = Segment(self._offset, self._buffer[:n])
        self._buffer = self._buffer[n:]
        self._offset += n
        self._count += 1
        return seg
