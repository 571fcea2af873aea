"""Which voice speaks a reply: one router for every talker with neural voices.

A reply's voice is chosen once, when its first text segment comes, and kept for its
later segments (one request each, the same ``request_id``): the first voice of the
reply's chain that is not at capacity (:class:`~duplex.pipeline.talkers.pool.Capacity`,
the one definition: pieces being made at once). The chain ends with a voice that has
no capacity to reach (eSpeak NG), so a reply always has a voice. Each step down the
chain is counted and logged: a reply that sounds different says why.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duplex.pipeline.talker import REPLIES_KEPT
from duplex.pipeline.talkers.pool import Capacity

log = logging.getLogger("duplex.voice")

SHOWN = {"espeak": "eSpeak NG", "kokoro": "Kokoro", "hibari": "hibari"}
"""How the log names each voice."""


@dataclass(frozen=True, slots=True)
class Choice:
    """A voice a reply may speak with: its route, the voice name it is given there, and
    its capacity (None: never full)."""

    route: str
    voice: str | None
    capacity: Capacity | None = None

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.capacity.full


@dataclass(slots=True)
class Routed:
    """A reply's voice (chosen once) and how much of its text has been spoken."""

    route: str
    voice: str | None
    spoken: int = 0


class Router:
    """The voice of every reply in progress (the newest ``REPLIES_KEPT``), and how often a
    reply stepped down its chain (``stepped[(wanted, spoken_with)]``)."""

    def __init__(self) -> None:
        self._replies: OrderedDict[str, Routed] = OrderedDict()
        self.stepped: Counter[tuple[str, str]] = Counter()

    def reply(self, request_id: str, chain: Callable[[], Sequence[Choice]]) -> Routed:
        """The reply's voice: chosen now from ``chain()`` (the wanted voice first, a voice
        that is never full last) if this is its first segment."""
        found = self._replies.get(request_id)
        if found is not None:
            self._replies.move_to_end(request_id)
            return found
        choices = chain()
        chosen = next((c for c in choices if not c.full), choices[-1])
        wanted = choices[0]
        if chosen is not wanted:
            self.stepped[(wanted.route, chosen.route)] += 1
            assert wanted.capacity is not None  # only a full voice is stepped past
            log.log(
                logging.WARNING if chosen.route == "espeak" else logging.INFO,
                "%s is making %d pieces (its capacity): this reply speaks with %s",
                SHOWN.get(wanted.route, wanted.route),
                wanted.capacity.making,
                SHOWN.get(chosen.route, chosen.route),
                extra={"response": request_id},
            )
        routed = self._replies[request_id] = Routed(chosen.route, chosen.voice)
        while len(self._replies) > REPLIES_KEPT:
            self._replies.popitem(last=False)
        return routed

    def release(self, request_id: str) -> None:
        """The reply is over: its voice is chosen afresh if the id ever comes again."""
        self._replies.pop(request_id, None)

    def to(self, route: str) -> int:
        """Replies that stepped down to ``route`` because a voice before it was full."""
        return sum(n for (_, got), n in self.stepped.items() if got == route)
