"""What the server's listening backends can do, as the realtime core needs to know it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ears:
    """The listening side of the backends, as capabilities (no I/O here)."""

    transcripts: bool = False
    """A recogniser transcribes turns (and, at a pause, the turn as it stands)."""
    partials: bool = False
    """It is fast enough to re-decode speech in progress every few hundred ms."""
    turn_model: bool = False
    """An end-of-turn model answers ``semantic_vad``'s questions."""


DEAF = Ears()
"""No recogniser and no end-of-turn model."""
