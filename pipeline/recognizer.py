"""The recogniser interface: user speech in, its text out.

A recogniser transcribes a finished turn, and, if it says it can (``partials``),
the growing speech of a turn still being spoken: those decodes are asked for
every few hundred milliseconds and must be cheap (a greedy decode, say), while a
turn's final transcript may take a more careful one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

import numpy as np

COMMANDS = frozenset({"stop", "wait", "pause", "cancel", "hold", "hang", "enough", "quiet", "shush"})
"""Words a user says to stop a voice agent. A recogniser that drops unsure transcripts as
guesses keeps one that holds a command: a recogniser unsure of a short "Stop." (tiny.en
scores most one-word commands of some voices under its guess bar) would otherwise leave
the reply talking, while its guesses for a cough or noise ("Thank you.", "you", "Bye.")
hold none of these."""
_WORD = re.compile(r"[a-z]+")


def holds_command(text: str) -> bool:
    """Whether ``text`` holds one of :data:`COMMANDS`."""
    return not COMMANDS.isdisjoint(_WORD.findall(text.lower()))


COMMAND_COMPANIONS = frozenset({
    "please", "ok", "okay", "now", "just", "a", "second", "sec", "minute", "moment", "on", "up", "it", "that",
    "talking", "there", "oh", "um", "uh", "actually", "sorry", "thanks", "thank", "you", "be", "right", "hey",
})  # fmt: skip
"""Words that go with a command without making it a request ("Stop talking, please.", "Hold on a second.",
"Hey, stop.")."""
_SAID_OTHERWISE = ((re.compile(r"\bnever\s*mind\b"), "cancel"), (re.compile(r"\bshut\s+up\b"), "quiet"))


def only_command(text: str) -> bool:
    """Whether ``text`` is nothing but a command to stop ("Stop.", "Hold on a second.", "Never mind."):
    the server obeys it (the reply stops, none follows); it is no question for the thinker."""
    lowered = text.lower()
    for phrase, command in _SAID_OTHERWISE:
        lowered = phrase.sub(command, lowered)
    words = _WORD.findall(lowered)
    return (
        0 < len(words) <= 6 and holds_command(lowered) and all(w in COMMANDS or w in COMMAND_COMPANIONS for w in words)
    )


class Recognizer(Protocol):
    """Speech to text.

    ``transcribe`` must not hold the event loop for the length of a decode: a
    recogniser decodes in worker processes, on threads that release the GIL, or
    on another machine.

    Lifecycle: built cheaply (a configuration is checked before anything loads);
    ``start`` loads the model and runs a first decode, or checks the remote end;
    ``aclose`` stops its workers or connections.
    """

    name: str
    partials: bool
    """Whether partial transcripts of speech in progress are worth asking for."""

    @property
    def concurrency(self) -> int:
        """Utterances it decodes at once (its workers); more wait their turn."""
        ...

    async def start(self) -> None:
        """Load models and start workers now (or check the remote end), so the first
        turn does not wait and a bad configuration fails before serving."""
        ...

    async def transcribe(
        self, pcm: np.ndarray, rate: int, *, partial: bool = False, go_on: Callable[[], None] | None = None
    ) -> str:
        """The words in ``pcm`` (PCM16 mono at ``rate``); ``partial``: the speech is
        still going on, so speed matters more than the last word. ``go_on`` is called
        on the event loop between a decode's steps, if it has several; it raises to stop
        the decode (a partial the user's pause has made moot: its work is the pause's)."""
        ...

    async def aclose(self) -> None:
        """Stop workers and free models."""
        ...
