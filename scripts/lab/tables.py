"""Markdown tables for benchmark reports: median and a high quantile of a measure, as a
cell or as a row against a baseline, and the Full-Duplex-Bench turn-taking table with
the published anchors beside Duplex's own figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lab.anchors import ANCHORS
from lab.stats import median, pct


def spread(
    values: Sequence[float],
    *,
    scale: float = 1.0,
    digits: int = 0,
    q: float | Sequence[float] = 0.95,
    unit: str = "",
) -> str:
    """``"median / p95"`` of ``values`` times ``scale``, then ``unit``; ``-`` when there are none.

    ``q`` is the quantile after the median (0.99, or 1.0 for the worst), or several of
    them (``(0.95, 1.0)``: ``"median / p95 / max"``).
    """
    if not values:
        return "-"
    qs = (q,) if isinstance(q, int | float) else tuple(q)
    cells = [median(values) * scale, *(pct(values, x) * scale for x in qs)]
    text = " / ".join(f"{c:.{digits}f}" for c in cells)
    return f"{text} {unit}" if unit else text


def header(*columns: str) -> str:
    """A markdown table's header line and the line under it."""
    return "| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|"


def row(
    name: str,
    values: Sequence[float],
    unit: str = "",
    *,
    scale: float = 1.0,
    digits: int | None = 2,
    q: float = 0.95,
    base: float | None = None,
    note: str | Sequence[str] = "",
) -> str:
    """One row: ``name``, then the median and the ``q`` quantile (p95) of ``values`` times
    ``scale``, each with ``unit``, then the median's ratio to ``base`` (``"1.23x"``; where
    ``base`` is given and not 0) or else ``note`` (several cells if it is a sequence).

    ``digits=None``: 2 decimals where the quantile is under 10, none above. No values:
    ``-`` for both figures.
    """
    last = [note] if isinstance(note, str) else list(note)
    if not values:
        return "| " + " | ".join([name, "-", "-", *last]) + " |"
    med, top = median(values) * scale, pct(values, q) * scale
    if digits is None:
        digits = 2 if top < 10 else 0
    u = f" {unit}" if unit else ""
    if base:
        last = [f"{med / base:.2f}x"]
    return "| " + " | ".join([name, f"{med:.{digits}f}{u}", f"{top:.{digits}f}{u}", *last]) + " |"


FULL_DUPLEX_BENCH = (
    "pause TOR ↓",
    "backchannel TOR ↓",
    "turn TOR ↑",
    "turn latency ↓",
    "interruption TOR ↑",
    "interruption latency ↓",
    "stop latency ↓",
)
"""The turn-taking table's columns after the system's name (the anchors have no stop latency)."""


def full_duplex_bench(systems: Mapping[str, Sequence[str]]) -> str:
    """The Full-Duplex-Bench style turn-taking table: one row per measured system (its name
    in bold, then its cells for ``FULL_DUPLEX_BENCH``, already formatted), then the
    published figures of ``ANCHORS``."""
    lines = [header("system", *FULL_DUPLEX_BENCH)]
    for name, cells in systems.items():
        if len(cells) != len(FULL_DUPLEX_BENCH):
            raise ValueError(f"{name}: {len(cells)} cells for {len(FULL_DUPLEX_BENCH)} columns")
        lines.append("| " + " | ".join([f"**{name}**", *cells]) + " |")
    for name, (p, b, t, tl, i, il) in ANCHORS.items():
        lines.append(f"| {name} (published) | {p:.3f} | {b:.3f} | {t:.3f} | {tl:.3f} | {i:.3f} | {il:.3f} | |")
    return "\n".join(lines)
