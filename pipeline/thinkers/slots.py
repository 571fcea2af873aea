"""Which of llama.cpp's slots a conversation's requests go to, and what of the
conversation fits a slot's context.

A slot keeps the prompt it last read in its cache, so a conversation that keeps its
slot reads only what is new at each turn. Conversations own slots while there are
enough; a new one takes a slot nobody has used for a few seconds, a free one before
the least recently used (whose prefix, the same system prompt for every session of an
application, it reuses), in the lane that has the cores to spare.
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from duplex.pipeline.thinker import Message
from duplex.pipeline.thinkers.lane import SHARED_S


class Slots:
    """Conversation -> slot, least recently used first; and what each slot is running.
    Slot ``s`` is decoded in lane ``s % lanes`` (:mod:`~duplex.pipeline.thinkers.engine`),
    and only the first lane has every thread: a new conversation takes a slot nobody has
    used for :data:`~duplex.pipeline.thinkers.lane.SHARED_S`, in the lane with the fewest
    replies running (the first lane on a tie), so a conversation talking alone gets every
    thread and conversations talking at once are written on both cores."""

    def __init__(self, count: int, lanes: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.count, self.lanes, self._clock = count, lanes, clock
        self._owners: OrderedDict[str, int] = OrderedDict()
        self._running: dict[int, str] = {}
        self._used = [-math.inf] * count

    def of(self, conversation: str) -> int | None:
        """The conversation's slot (taking one over if it has none); None for nobody's."""
        if not conversation:
            return None
        now = self._clock()
        if conversation in self._owners:
            self._owners.move_to_end(conversation)
            slot = self._owners[conversation]
        else:
            slot = self._choose(now)
            for owner, s in list(self._owners.items()):
                if s == slot:
                    del self._owners[owner]
            self._owners[conversation] = slot
        self._used[slot] = now
        return slot

    def _choose(self, now: float) -> int:
        active = {s for s in range(self.count) if s in self._running or now - self._used[s] < SHARED_S}
        busy = [0] * self.lanes
        for s in self._running:
            busy[s % self.lanes] += 1
        taken = set(self._owners.values())
        order = [s for s in range(self.count) if s not in taken] + list(self._owners.values())  # free, then LRU
        # Not running (its reply would wait), not in use (its conversation's cache kept), in
        # the lane with the fewest replies running, the first lane on a tie.
        return min(order, key=lambda s: (s in self._running, s in active, busy[s % self.lanes], s % self.lanes))

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
