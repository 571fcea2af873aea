"""Which of llama.cpp's slots a conversation's requests go to, and what of the
conversation fits a slot's context.

A slot keeps the prompt it last read in its cache, so a conversation that keeps its
slot reads only what is new at each turn. Conversations own slots while there are
enough; a new one takes a slot nobody owns, else the least recently used one (whose
prefix, the same system prompt for every session of an application, it reuses).
"""

from __future__ import annotations

import json
from collections import OrderedDict

from duplex.pipeline.thinker import Message


class Slots:
    """Conversation -> slot, least recently used first; and what each slot is running."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._owners: OrderedDict[str, int] = OrderedDict()
        self._running: dict[int, str] = {}

    def of(self, conversation: str) -> int | None:
        """The conversation's slot (taking one over if it has none); None for nobody's."""
        if not conversation:
            return None
        if conversation in self._owners:
            self._owners.move_to_end(conversation)
            return self._owners[conversation]
        taken = set(self._owners.values())
        free = [s for s in range(self.count) if s not in taken]
        slot = free[0] if free else self._owners.popitem(last=False)[1]
        self._owners[conversation] = slot
        return slot

    def busy_for(self, slot: int | None, conversation: str) -> bool:
        """Whether ``slot`` is running another conversation's request (this one must wait)."""
        return slot is not None and self._running.get(slot, conversation) != conversation

    def started(self, slot: int | None, conversation: str) -> None:
        if slot is not None and conversation:
            self._running[slot] = conversation

    def ended(self, slot: int | None, conversation: str) -> None:
        if slot is not None and self._running.get(slot) == conversation:
            del self._running[slot]

    @property
    def answering(self) -> int:
        """Slots running a request now."""
        return len(self._running)


CHARS_PER_TOKEN = 3
"""A cautious estimate (English runs ~4 characters a token): what fits a slot's context."""
CONTEXT_MARGIN = 64
"""Tokens of a slot kept for the chat template's own."""


def fit_context(msgs: list[Message], tokens: int) -> list[Message]:
    """``msgs`` with the oldest turns after the system prompt dropped until they fit
    ``tokens`` of a slot's context (less :data:`CONTEXT_MARGIN`). Cut to half of it at
    once, so that cuts (each of which the model must read the rest again for) come seldom."""

    def size(m: Message) -> int:
        return len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or []))

    budget = (tokens - CONTEXT_MARGIN) * CHARS_PER_TOKEN
    if sum(size(m) for m in msgs) <= budget:
        return msgs
    head = msgs[:1] if msgs and msgs[0]["role"] == "system" else []
    rest = msgs[len(head) :]
    total = sum(size(m) for m in head + rest)
    while len(rest) > 1 and (total > budget // 2 or rest[0]["role"] == "tool"):
        total -= size(rest.pop(0))
    return head + rest
