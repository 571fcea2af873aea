"""A WebRTC call's audio: the reply as an outgoing track, the microphone as PCM.

The reply's track is a speaker the server holds: it plays the session's audio at real
time, 20 ms at a time, as aiortc asks for it (Opus, 48 kHz), ducked, paused or dropped
as the session says, as any client's speaker would. What it has played of each reply
is known here from its own RTP clock, less the browser's jitter buffer: that is the
playback position the session is told (``playback.ack``), in place of a client's.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from duplex.pipeline.resampling import LiveResampler

RATE = 48000
"""WebRTC's audio rate (Opus): the session's output is asked for at it."""
FRAME = RATE // 50
"""20 ms: one Opus packet."""
MIC_RATE = 24000
"""The rate the microphone is heard at (the session's input)."""
JITTER_S = 0.06
"""What a browser's jitter buffer holds before it plays (its target is 40-80 ms)."""
UPLINK_S = 0.06
"""How late the caller's microphone reaches the session: the packet, the server's jitter
buffer (one packet before it gives the first) and Opus decoding on aiortc's thread;
measured on loopback (``scripts/bench_calls.py``: at 0.02 the cut came 28-92 ms after
what the caller had heard)."""


@dataclass
class _Reply:
    rid: str
    queued: deque[np.ndarray] = field(default_factory=deque)
    played: int = 0
    """Samples sent into the track (its RTP clock)."""
    gain: float = 1.0
    paused: bool = False
    done: bool = False
    """The server said ``response.done``: when its queue runs out, it has stopped."""


class PacedTrack(MediaStreamTrack):
    """An audio track that gives a 20 ms frame (48 kHz, mono) each time its real-time
    clock comes round: what :meth:`_next` says then."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None
        self._pts = 0

    def _next(self) -> np.ndarray:
        """The next frame's PCM16 (:data:`FRAME` samples)."""
        raise NotImplementedError

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME
            # The track's real-time clock: each packet goes when its time comes.
            await asyncio.sleep(max(0.0, self._start + self._pts / RATE - time.monotonic()))
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(self._next().tobytes())
        frame.pts = self._pts
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


class ReplyTrack(PacedTrack):
    """The server's speaker for one call: the replies it is sent, in order, at real time.
    ``on_started(rid)`` as a reply's first sample goes out, ``on_stopped(rid)`` as its
    last has (``output_audio_buffer.started|stopped``)."""

    def __init__(self, on_started: Callable[[str], None], on_stopped: Callable[[str], None]) -> None:
        super().__init__()
        self.replies: deque[_Reply] = deque()
        self._on_started, self._on_stopped = on_started, on_stopped
        self.played_out = asyncio.Event()
        """Set while nothing is queued to play: every reply sent has been heard (or dropped)."""
        self.played_out.set()

    def _reply(self, rid: str) -> _Reply:
        for r in self.replies:
            if r.rid == rid:
                return r
        self.replies.append(_Reply(rid))
        return self.replies[-1]

    def push(self, rid: str, pcm: np.ndarray) -> None:
        self._reply(rid).queued.append(pcm)
        self.played_out.clear()

    def end(self, rid: str) -> None:
        self._reply(rid).done = True

    def duck(self, rid: str, gain: float) -> None:
        self._reply(rid).gain = gain

    def pause(self, rid: str) -> None:
        self._reply(rid).paused = True

    def resume(self) -> None:
        for r in self.replies:
            r.paused, r.gain = False, 1.0

    def drop(self, rid: str | None = None) -> bool:
        """Stop playing ``rid`` (the one playing if None) now; whether anything was left."""
        for r in list(self.replies):
            if rid is None or r.rid == rid:
                self.replies.remove(r)
                if not self.replies:
                    self.played_out.set()
                return bool(r.queued) or not r.done
        return False

    @property
    def current(self) -> str | None:
        return self.replies[0].rid if self.replies else None

    def played(self, rid: str) -> int:
        """Samples of ``rid`` the caller had heard when it captured the microphone audio
        the session has now: sent, less the caller's jitter buffer, less how late the
        microphone arrives (the session places this on its input clock)."""
        for r in self.replies:
            if r.rid == rid:
                return max(0, r.played - int((JITTER_S + UPLINK_S) * RATE))
        return 0

    def _next(self) -> np.ndarray:
        out = np.zeros(FRAME, np.int16)
        filled = 0
        while filled < FRAME and self.replies:
            r = self.replies[0]
            if r.paused:
                break
            if not r.queued:
                if r.done:  # played out
                    self.replies.popleft()
                    self._on_stopped(r.rid)
                    if not self.replies:
                        self.played_out.set()
                    continue
                break  # an underrun: silence until more comes
            if r.played == 0:
                self._on_started(r.rid)
            chunk = r.queued[0]
            take = min(FRAME - filled, chunk.size)
            part = chunk[:take]
            out[filled : filled + take] = part if r.gain == 1.0 else (part * r.gain).astype(np.int16)
            r.queued[0] = chunk[take:]
            if not r.queued[0].size:
                r.queued.popleft()
            r.played += take
            filled += take
        return out


class Microphone:
    """The caller's audio (decoded Opus) as mono PCM16 at :data:`MIC_RATE`."""

    def __init__(self) -> None:
        self._resampler: LiveResampler | None = None
        self._rate = 0

    def pcm(self, frame: AudioFrame) -> np.ndarray:
        x = frame.to_ndarray()
        channels = len(frame.layout.channels)
        mono = (x.reshape(-1, channels).mean(axis=1) if x.ndim == 2 and x.shape[0] == 1 else x.mean(axis=0)).astype(
            np.float32
        )
        if frame.format.name.startswith("s16"):
            mono /= 32768.0
        if frame.sample_rate != self._rate:
            self._rate = frame.sample_rate
            self._resampler = LiveResampler(self._rate, MIC_RATE)
        assert self._resampler is not None
        y = self._resampler.resample_chunk(mono)
        out: np.ndarray = np.clip(np.rint(y * 32767), -32768, 32767).astype(np.int16)
        return out
