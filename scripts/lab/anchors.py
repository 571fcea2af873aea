"""Published turn-taking figures the benchmarks print beside Duplex's own.

Full-Duplex-Bench v1, arXiv 2503.04721v3 Table III and the benchmark's repository
README (DanielLin94144/Full-Duplex-Bench; GPT-Realtime and PersonaPlex rows appear in
the README only). Columns: pause TOR (synthetic), backchannel TOR, smooth-turn TOR,
smooth-turn latency s, interruption TOR, interruption latency s.
"""

from __future__ import annotations

ANCHORS: dict[str, tuple[float, float, float, float, float, float]] = {
    "Moshi": (0.985, 1.000, 0.941, 0.265, 1.000, 0.257),
    "Gemini Live": (0.255, 0.091, 0.655, 1.301, 0.891, 1.183),
    "GPT-Realtime": (0.010, 0.000, 1.000, 1.470, 0.970, 1.500),
    "Freeze-Omni": (0.642, 0.636, 0.336, 0.953, 0.867, 1.409),
    "dGSLM": (0.934, 0.691, 0.975, 0.352, 0.917, 2.531),
    "PersonaPlex": (0.584, 0.327, 0.992, 0.070, 1.000, 0.400),
}
