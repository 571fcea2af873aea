"""The thinker: what to say. Given the conversation so far, stream the reply's text.

The conversation a thinker sees holds every assistant reply only as far as the
user heard it (a truncated reply is cut at the last word begun by then), so the
next answer knows what was actually said. Closing or cancelling ``think`` must
abort the language-model request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

Message = dict[str, str]
"""A chat message: ``{"role": "system"|"user"|"assistant", "content": ...}``."""


@dataclass(frozen=True, slots=True)
class ThinkRequest:
    """What the thinker answers: the conversation as chat messages."""

    request_id: str
    messages: tuple[Message, ...]
    """Oldest first."""
    options: dict[str, object] = field(default_factory=dict)


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
