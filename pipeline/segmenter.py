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

    The first segment ends at the first clause boundary (or a space before
    ``first_max`` characters), so the talker starts early; later ones at sentence
    ends (or a space before ``max_chars``), so the voice flows. Linear in the text:
    each cut looks only at the next ``max_chars`` characters, and consumed text is
    dropped from the buffer in halves, never re-sliced per segment.
    """

    def __init__(self, *, first_max: int = 48, max_chars: int = 240) -> None:
        self.first_max = first_max
        self.max_chars = max_chars
        self._buffer = ""
        self._pos = 0  # start of the text not yet cut, in the buffer
        self._offset = 0  # reply offset of self._buffer[0]
        self._count = 0

    def feed(self, delta: str) -> list[Segment]:
        """Segments that ``delta`` completes."""
        if self._pos and self._pos * 2 >= len(self._buffer):
            self._buffer = self._buffer[self._pos :]
            self._offset += self._pos
            self._pos = 0
        self._buffer += delta
        out = []
        while (cut := self._cut()) is not None:
            out.append(self._take(cut))
        return out

    def finish(self) -> list[Segment]:
        """The rest, at the end of the text."""
        return [self._take(len(self._buffer))] if self._buffer[self._pos :].strip() else []

    def _cut(self) -> int | None:
        b, pos = self._buffer, self._pos
        pattern, limit = (_CLAUSE, self.first_max) if self._count == 0 else (_SENTENCE, self.max_chars)
        end = min(len(b), pos + limit + 1)  # a boundary further on would make the segment too long
        m = pattern.search(b, pos, end)
        if m and (end == len(b) or m.end() < end):  # not a "$" that only matched at the window's end
            return m.end()
        if len(b) - pos > limit:
            space = b.rfind(" ", pos, pos + limit)
            return space + 1 if space > pos else pos + limit
        return None

    def _take(self, cut: int) -> Segment:
        seg = Segment(self._offset + self._pos, self._buffer[self._pos : cut])
        self._pos = cut
        self._count += 1
        return seg
