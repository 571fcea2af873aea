"""The end-of-turn model interface: has the speaker finished their turn?

An audio model that hears the end of an utterance (words, intonation, the pause
after it) and says how likely it is that the turn is complete. The realtime core
asks it once speech has paused, and weighs its answer with the silence so far and
the transcript (see :mod:`duplex.app.core.listening.semantic`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class TurnModel(Protocol):
    """Probability that the speech so far is a complete turn.

    Lifecycle: built cheaply; ``start`` loads the model (checking its weights) and
    runs it once; ``aclose`` stops its workers.
    """

    name: str
    seconds: float
    """The most audio it looks at (the end of the turn): give it no more."""
    concurrency: int
    """Questions it answers at once (more wait their turn, fairly across sessions)."""

    async def start(self) -> None:
        """Load the model now (and check its weights)."""
        ...

    async def complete(self, pcm: np.ndarray, rate: int) -> float:
        """P(turn complete) for the speech ending ``pcm`` (PCM16 mono at ``rate``);
        off the event loop."""
        ...

    async def aclose(self) -> None:
        """Free the model."""
        ...
