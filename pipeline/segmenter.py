"""Cutting a reply's text stream into pieces worth speaking.

The first piece ends at the first clause boundary, so speech starts long before the
model has finished; later ones at sentence ends, so the voice flows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


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
