"""The mic demo's speaker: replies queued at the device's rate and drained by the
audio callback, which knows what it actually played (and when: the DAC time of
each block), what to hold back (a paused reply) and what to play quieter (a
ducked one).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Playback:
    """The playback side, shared between the event loop and the audio callback.

    ``index`` counts the stream's samples (input and output advance together in
    a full-duplex callback)."""

    rate: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    chunks: deque[tuple[str, np.ndarray]] = field(default_factory=deque)  # (rid, float32 at device rate)
    paused_rid: str | None = None
    ducked: tuple[str, float] | None = None
    """(rid, gain) while a reply plays on quieter."""
    blocks: deque[tuple[float, str | None, int, int]] = field(default_factory=lambda: deque(maxlen=256))
    """(dac_time, rid, start, n) of each output block."""
    written: dict[str, int] = field(default_factory=dict)  # rid -> samples handed to the device so far
    index: int = 0
    xruns: int = 0
    """Audio dropouts the callback was told of (input overflow, output underflow)."""
    levels: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=64))
    """(stream sample index, RMS) of recent output blocks, for the status line."""

    def push(self, rid: str, pcm: np.ndarray) -> None:
        with self.lock:
            self.chunks.append((rid, pcm))

    def drop(self, rid: str) -> None:
        with self.lock:
            self.chunks = deque(c for c in self.chunks if c[0] != rid)
            if self.paused_rid == rid:
                self.paused_rid = None
            if self.ducked is not None and self.ducked[0] == rid:
                self.ducked = None

    def fill(self, out: np.ndarray, dac_time: float) -> int:
        """Audio callback: write the next block (device rate, float32) that will
        sound at ``dac_time``; returns the block's stream sample index."""
        out.fill(0.0)
        n, pos, rid = out.shape[0], 0, None
        with self.lock:
            while pos < n and self.chunks:
                crid, pcm = self.chunks[0]
                if crid == self.paused_rid:
                    break
                take = min(n - pos, pcm.size)
                gain = self.ducked[1] if self.ducked is not None and self.ducked[0] == crid else 1.0
                out[pos : pos + take, 0] = pcm[:take] * gain
                rid = crid
                if take == pcm.size:
                    self.chunks.popleft()
                else:
                    self.chunks[0] = (crid, pcm[take:])
                pos += take
        index = self.index
        start = self.written.get(rid, 0) if rid else 0
        if rid:
            self.written[rid] = start + pos
            for old in list(self.written)[:-8]:  # a long session: only recent replies matter
                del self.written[old]
        self.blocks.append((dac_time, rid, start, pos))
        self.levels.append((index, float(np.sqrt(np.mean(out[:, 0] ** 2)))))
        self.index = index + n
        return index

    def played(self, rid: str, now: float) -> int:
        """Samples of ``rid`` whose DAC time had come by stream time ``now`` (not merely queued)."""
        for dac, brid, start, n in reversed(list(self.blocks)):
            if brid == rid and dac <= now:
                return start + min(n, int((now - dac) * self.rate))
        return 0

    def level(self, window: float = 0.1) -> float:
        """Loudest output of the last ``window`` seconds written."""
        since = self.index - window * self.rate
        return max((rms for at, rms in list(self.levels) if at >= since), default=0.0)
