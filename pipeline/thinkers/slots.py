"""Which of llama.cpp's slots a conversation's requests go to.

A slot keeps the prompt it last read in its cache, so a conversation that keeps its
slot reads only what is new at each turn. Conversations own slots while there are
enough; a new one takes a slot nobody owns, else the least recently used one (whose
prefix, the same system prompt for every session of an application, it reuses).
"""

from __future__ import annotations

from collections import OrderedDict


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
