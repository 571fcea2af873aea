"""The recogniser interface: one finished utterance in, its text out."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Recognizer(Protocol):
    """Speech to text for finished utterances.

    ``transcribe`` must not hold the event loop for the length of a decode: a
    recogniser decodes in worker processes, or on threads that release the GIL.
    """

    name: str

    @property
    def concurrency(self) -> int:
        """Utterances it decodes at once (its workers); more wait their turn."""
        ...

    async def start(self) -> None:
        """Load models and start workers now, so the first turn does not wait."""
        ...

    async def transcribe(self, pcm: np.ndarray, rate: int) -> str:
        """The words in ``pcm`` (PCM16 mono at ``rate``)."""
        ...

    async def aclose(self) -> None:
        """Stop workers and free models."""
        ...
