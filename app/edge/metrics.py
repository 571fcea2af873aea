"""Server metrics in Prometheus' text format, for ``/metrics``."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Histogram:
    """Cumulative buckets of observed seconds, as Prometheus renders them."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str) -> list[str]:
        out: list[str] = []
        running = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        out += [f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total:.6f}", f"{name}_count {self.n}"]
        return out


class Metrics:
    """Counters, gauges and histograms the server keeps; one instance per server."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = defaultdict(float)
        self.labelled: dict[tuple[str, str, str], float] = defaultdict(float)
        self.gauges: dict[str, float] = {}
        self.histograms: dict[str, Histogram] = defaultdict(Histogram)
        self.help: dict[str, str] = {}

    def inc(self, name: str, value: float = 1.0, **label: str) -> None:
        if label:
            ((k, v),) = label.items()
            self.labelled[(name, k, v)] += value
        else:
            self.counters[name] += value

    def set(self, name: str, value: float) -> None:
        self.gauges[name] = value

    def high_water(self, name: str, value: float) -> None:
        self.gauges[name] = max(self.gauges.get(name, 0.0), value)

    def observe(self, name: str, seconds: float) -> None:
        self.histograms[name].observe(seconds)

    def value(self, name: str, **label: str) -> float:
        """A counter's or gauge's current value (0 if never set)."""
        if label:
            ((k, v),) = label.items()
            return self.labelled.get((name, k, v), 0.0)
        return self.counters.get(name, self.gauges.get(name, 0.0))

    def render(self) -> str:
        lines: list[str] = []
        for name, value in sorted(self.counters.items()):
            lines += [f"# TYPE {name} counter", f"{name} {value:g}"]
        seen: set[str] = set()
        for (name, k, v), value in sorted(self.labelled.items()):
            if name not in seen:
                lines.append(f"# TYPE {name} counter")
                seen.add(name)
            lines.append(f'{name}{{{k}="{v}"}} {value:g}')
        for name, value in sorted(self.gauges.items()):
            lines += [f"# TYPE {name} gauge", f"{name} {value:g}"]
        for name, hist in sorted(self.histograms.items()):
            lines += [f"# TYPE {name} histogram", *hist.lines(name)]
        return "\n".join(lines) + "\n"
