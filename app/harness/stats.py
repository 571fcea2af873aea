"""Percentiles and table rows for benchmark reports."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def median_p95(values: Sequence[float], scale: float = 1.0, digits: int = 0) -> str:
    """``"median / p95"`` of ``values`` times ``scale``, or ``-`` when there are none."""
    if not values:
        return "-"
    return f"{median(values) * scale:.{digits}f} / {pct(values, 0.95) * scale:.{digits}f}"
