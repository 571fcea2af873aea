"""WebRTC's audio processing (AEC3 echo cancellation, noise suppression) as a
:class:`~duplex.pipeline.echo.Cleaning`, from ``livekit``'s binary wheel.

``livekit.rtc.AudioProcessingModule`` is the WebRTC audio processing module browsers
run, behind LiveKit's FFI: no server, no network. It takes 10 ms frames at the
session's rate (8-48 kHz), the far end first (``process_reverse_stream``), then the
microphone, cleaned in place (``process_stream``). AEC3 finds the echo's delay itself
(measured here: 60-400 ms late, four reflections, removed by > 50 dB after a second;
speech over it kept within 2-3 dB), so the far end is given as it played, with no
delay hint. ~13-16 ms of CPU per second of audio per session, measured in process
(``WebRtcCleaner.cpu_s`` over 10 s of reply at 16-48 kHz; the
:class:`~duplex.pipeline.echo.NearEnd` judge ~1 ms of it). The frames that judge passes
as the user's skip AEC3 and go through :class:`~duplex.pipeline.linear_echo.LinearEcho`
instead (~20 ms more at 16 kHz while an echo is heard).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from duplex.pipeline.echo import Cleaner, EchoPresence, Framed
from duplex.pipeline.linear_echo import LinearEcho
from duplex.pipeline.near_end import NearEnd


class WebRtcCleaner:
    """One session's WebRTC audio processing."""

    def __init__(self, rate: int, *, echo: bool, noise: bool) -> None:
        from livekit import rtc  # the FFI library loads with the first session that needs it

        self.echo, self.noise, self.rate = echo, noise, rate
        self.cpu_s = 0.0
        self._rtc: Any = rtc
        self._apm = rtc.AudioProcessingModule(echo_cancellation=echo, noise_suppression=noise, high_pass_filter=noise)
        self._framed = Framed(rate, self._step, always=noise)
        self.presence = EchoPresence()
        self.near_end = NearEnd(rate)
        self.linear = LinearEcho(self._framed.frame)

    @property
    def lag(self) -> int:
        """Samples the cleaned audio runs behind the microphone (0 for whole 10 ms frames)."""
        return self._framed.lag

    def process(self, near: np.ndarray, far: np.ndarray | None) -> np.ndarray:
        began = time.thread_time()
        try:
            return self._framed.process(near, far if self.echo else None)
        finally:
            self.cpu_s += time.thread_time() - began

    def _step(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        n = near.size
        if self.echo:
            self._apm.process_reverse_stream(self._rtc.AudioFrame(far.astype(np.int16).tobytes(), self.rate, 1, n))
        frame = self._rtc.AudioFrame(near.astype(np.int16).tobytes(), self.rate, 1, n)
        self._apm.process_stream(frame)
        if self.echo and not self.noise:
            user = self.near_end.add(near, far)
            linear = self.linear.process(near, far, lag=self.near_end.delay.lag, user=user)
            if not self.presence.add(near, far, user=user):
                return near  # no echo heard: nothing to take out (and AEC3 would take the user's speech)
            if user:
                return linear  # the user's voice, well above any echo: AEC3 would cut its start (the echo
                # under it is taken out by the linear canceller, once it has learned the room)
        return np.frombuffer(frame.data, np.int16).copy()


class WebRtcCleaning:
    """Opens a :class:`WebRtcCleaner` for each session."""

    name = "webrtc"

    def warm(self) -> None:
        """Load the library now (~38 MiB, a few threads) rather than with the first
        session, so the server's memory at start includes it; raises if it cannot load."""
        WebRtcCleaner(16000, echo=True, noise=True).process(np.zeros(160, np.int16), np.zeros(160, np.int16))

    def open(self, rate: int, *, echo: bool, noise: bool) -> Cleaner:
        return WebRtcCleaner(rate, echo=echo, noise=noise)
