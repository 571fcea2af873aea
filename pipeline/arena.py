"""Giving back what onnxruntime's CPU arenas grew to, once nobody is using them.

Each onnxruntime session allocates from an arena of its own that grows to the most
its runs have needed at once (the longest sentence, a few runs side by side) and
keeps it. Measured here (2 cores): Smart Turn, hibari and Kokoro loaded took 390 MiB;
after a few runs each, 688 MiB; after three threads ran hibari and Smart Turn side
by side, 745 MiB. Without the arena nothing is kept (400 MiB), but every run pays for
its allocations: Smart Turn 93 -> 110 ms a decision, hibari's 20-word sentence
59 -> 71 ms, Kokoro +14%. So the arenas stay while sessions talk, and when the last
one has gone one tiny run of each model with arena shrinkage on frees every chunk not
in use: 745 -> 415 MiB, for ~0.5 s of one core, once.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

SHRINK = "memory.enable_memory_arena_shrinkage"
"""onnxruntime's run option: at the end of the run, free the arena's unused chunks."""


def shrinking() -> Any:
    """Run options that shrink the CPU arena at the end of the run."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry(SHRINK, "cpu:0")
    return options


@runtime_checkable
class HoldsArena(Protocol):
    """A part whose models keep an arena: :meth:`shrink` gives back what it is not using."""

    def shrink(self) -> None:
        """One tiny run per model that frees its arena's unused chunks (blocking; safe
        beside other runs, which keep what they are using)."""
        ...
