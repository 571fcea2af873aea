"""What a small local model writes, made fit to be said: the markup it was asked not to
write (emphasis, code ticks, headings, list markers) dropped as the text streams."""

from __future__ import annotations

import re

_MARKUP = re.compile(r"[*`#]+")
_BULLET = re.compile(r"^\s*(?:[-•*]|\d+[.)])\s+")
_MAYBE_BULLET = re.compile(r"^\s*(?:[-•*]|\d+[.)]?)?\s*$")


class Speakable:
    """Drops what a voice would read out but a reader only sees: markdown emphasis,
    code ticks, headings and list markers. :meth:`flush` at the end."""

    def __init__(self) -> None:
        self._line_start = True
        self._held = ""  # a line's start, until it is known whether a list marker begins it

    def feed(self, text: str) -> str:
        out: list[str] = []
        for piece in (self._held + text).splitlines(keepends=True):
            self._held = ""
            if self._line_start:
                if not piece.endswith("\n") and _MAYBE_BULLET.match(piece):
                    self._held = piece  # "- " or "2." so far: wait for the rest of the line
                    break
                piece = _BULLET.sub("", piece, count=1)
            out.append(piece)
            self._line_start = piece.endswith("\n")
        return _MARKUP.sub("", "".join(out))

    def flush(self) -> str:
        """What was held back at the end of the text."""
        held, self._held = self._held, ""
        return _MARKUP.sub("", held).strip()
