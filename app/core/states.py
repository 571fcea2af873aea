"""State written as data: a transition table and the one function that moves by it.

Each state machine of the core (a reply's phase, barge-in, the listener's speech)
is an enum of states, an enum of events and a table of the moves allowed, in the
manner of h11's ``_state.py``: what can happen is read from the table, and a move
the table does not hold is a bug that raises at once instead of leaving a flag
combination nobody meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Generic, TypeVar

S = TypeVar("S", bound=Enum)
E = TypeVar("E", bound=Enum)


class ImpossibleMove(RuntimeError):
    """An event that the state it came in cannot take."""


class Table(Generic[S, E]):
    """The moves of one state machine: ``(state, event) -> next state``."""

    def __init__(self, name: str, moves: Mapping[tuple[S, E], S]) -> None:
        self.name = name
        self.moves = dict(moves)

    def move(self, state: S, event: E) -> S:
        """The state ``event`` leads to from ``state``; raises :class:`ImpossibleMove`."""
        try:
            return self.moves[(state, event)]
        except KeyError:
            raise ImpossibleMove(f"{self.name}: {event.name} cannot happen in {state.name}") from None

    def allows(self, state: S, event: E) -> bool:
        """Whether ``event`` may happen in ``state``."""
        return (state, event) in self.moves
