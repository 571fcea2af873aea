"""What a session's parts know of it: the narrow context its replies and its turn
taking share, instead of a reference to the whole session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from duplex.app.core.context import chat_messages
from duplex.app.core.conversation import Conversation, Item
from duplex.app.core.limits import SessionLimits
from duplex.app.core.pacing import SessionClock
from duplex.app.core.settings import ResponseOptions, SessionSettings, VoiceCheck, response_options
from duplex.app.core.units import samples_to_ms
from duplex.pipeline.thinker import Message


def _any_voice(voice: str) -> None:
    return None


@dataclass(slots=True)
class SessionContext:
    """A session's ids, clock, settings, limits and conversation."""

    session_id: str
    new_id: Callable[[str], str]
    """A fresh id with this prefix, never one a client has given an item."""
    clock: SessionClock
    settings: SessionSettings
    """The settings in force (the session replaces them on ``session.update``)."""
    limits: SessionLimits
    conversation: Conversation
    can_duck: bool = True
    """Whether the client takes Duplex's ``ducked`` event; one that does not (a plain
    Realtime client) has a reply's output stop at speech over it instead, as OpenAI's
    server does: it stops its playback there and sends its own truncate."""
    check_voice: VoiceCheck = _any_voice
    """Raises for a voice the talker cannot speak."""

    def ms(self, samples: int) -> int:
        """Input samples as milliseconds on the wire."""
        return samples_to_ms(samples, self.settings.input_rate)

    def messages(self, items: list[Item] | None = None, instructions: str | None = None) -> tuple[Message, ...]:
        """The conversation as the thinker sees it: the instructions as the system
        prompt, then every item, assistant replies only as far as they were heard,
        cut to fit as the session's ``truncation`` says."""
        system = self.settings.instructions if instructions is None else instructions
        chosen = self.conversation.items if items is None else items
        return chat_messages(chosen, system, self.settings.truncation, self.limits.max_conversation_chars)

    def options(self, opts: dict[str, Any] | None = None) -> ResponseOptions:
        """What a reply asks for over the session's settings (a ``response.create``'s
        ``response`` object, or nothing: the reply to a turn)."""
        return response_options(self.settings, opts or {}, check_voice=self.check_voice)
