"""Percentiles for benchmark reports (their tables: :mod:`lab.tables`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
