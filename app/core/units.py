"""Sample counts and milliseconds: the two units of the session's clocks."""

from __future__ import annotations


def samples_to_ms(samples: int, rate: int) -> int:
    """Whole milliseconds in ``samples`` at ``rate`` (rounded down)."""
    return samples * 1000 // rate


def ms_to_samples(ms: int, rate: int) -> int:
    """Whole samples in ``ms`` milliseconds at ``rate`` (rounded down)."""
    return ms * rate // 1000
