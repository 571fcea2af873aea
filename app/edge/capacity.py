"""One session limit for the whole server, however many worker processes serve it.

Each worker counts its open sessions in its own slot of an array the supervisor shares
with every worker (``multiprocessing``'s shared memory, with its lock); a session may
open only while the slots sum to less than ``--max-sessions``. A worker that dies has
its slot zeroed by the supervisor, so its sessions stop counting at once. One process
alone counts in a plain list: the same rule, no lock, no shared memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import MutableSequence
from typing import Any


class Capacity:
    """Sessions open across the server's workers, against one limit."""

    def __init__(self, limit: int, slots: MutableSequence[int] | None = None, index: int = 0) -> None:
        self.limit = limit
        self.slots: MutableSequence[int] = slots if slots is not None else [0]
        self.index = index
        get_lock = getattr(self.slots, "get_lock", None)
        self._lock: Any = get_lock() if get_lock is not None else contextlib.nullcontext()

    @property
    def workers(self) -> int:
        return len(self.slots)

    def total(self) -> int:
        """Sessions open now, every worker's."""
        with self._lock:
            return sum(self.slots)

    @property
    def full(self) -> bool:
        return self.total() >= self.limit

    def take(self) -> bool:
        """Count one more session of this worker, if the limit allows (atomically)."""
        with self._lock:
            if sum(self.slots) >= self.limit:
                return False
            self.slots[self.index] += 1
            return True

    def give(self) -> None:
        """One session of this worker ended."""
        with self._lock:
            self.slots[self.index] = max(0, self.slots[self.index] - 1)
