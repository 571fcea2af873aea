"""A session's microphone input: admission under its limits, the input clock, and
where the audio goes (the listener, or the manual-commit buffer).

Audio comes in three steps, so the edge can hear a large chunk in slices and let
other sessions run between them: :meth:`Intake.audio_of` (what a message carries),
:meth:`Intake.accept` (under the session's limits, whole or not at all),
:meth:`Intake.hear` (in order, in any slicing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from duplex.app.core.conversation import decode_audio
from duplex.app.core.limits import SessionLimits
from duplex.app.core.listening import DEAF, Ears, Listener, Signal
from duplex.app.core.pacing import SessionClock
from duplex.app.core.protocol import ClientEvent, ProtocolError
from duplex.app.core.settings import SessionSettings
from duplex.pipeline.echo import Cleaner, Cleaning
from duplex.pipeline.g711 import TelephoneInput
from duplex.pipeline.voice_activity import VoiceActivity

FarEnd = Callable[[float, float, int], "np.ndarray | None"] | None
"""What played over input samples at session times ``t0..t1``, ``n`` of them."""


class Intake:
    """Where a session's microphone audio goes, on its input sample clock."""

    def __init__(
        self,
        clock: SessionClock,
        limits: SessionLimits,
        voice_activity: VoiceActivity | None,
        now: float,
        ears: Ears = DEAF,
        cleaning: Cleaning | None = None,
    ) -> None:
        self.clock = clock
        self.cleaning = cleaning
        self.cleaner: Cleaner | None = None
        """The microphone's cleaner (echo, noise) as the settings ask, if the server has one."""
        self.ears = ears
        self.limits = limits
        self.voice_activity = voice_activity
        self.samples = 0
        """Input samples heard: the session's input clock."""
        self.received = False
        """Whether any audio was accepted (G.711 may not have given a sample yet)."""
        self.listener: Listener | None = None
        self._buffer = bytearray()  # manual-commit buffer, when server VAD is off
        self._budget = limits.input_burst_s  # seconds of input the client may send now
        self._budget_at = now
        self._accepted = 0  # bytes admitted but not heard yet
        self._telephone: TelephoneInput | None = None  # G.711 input, decoded and brought to the heard rate
        self._cleaner_rate = 0

    def listen(self, settings: SessionSettings) -> list[Signal]:
        """Server VAD per the settings (from the current input sample), or none. Speech
        in progress is kept: a new detector decides its end, or, with server VAD turned
        off, it ends here and its audio is the manual-commit buffer's."""
        td, old = settings.turn_detection, self.listener
        if td is None or self.voice_activity is None:
            self.listener = None
            if old is None:
                return []
            self._buffer += old.pending().astype("<i2").tobytes()
            return old.abandon()
        if old is not None and old.rate == settings.input_rate:
            old.retune(td)
            return []
        # Started at the current input sample: watermarks stay on the session's clock.
        self.listener = Listener(self.voice_activity, settings.input_rate, td, start=self.samples, ears=self.ears)
        return old.abandon() if old is not None else []

    def clean(self, settings: SessionSettings) -> None:
        """Open the cleaner the settings ask for (a new one when what it does changes)."""
        echo, noise = settings.cleaning()
        c = self.cleaner
        if self.cleaning is None or not (echo or noise):
            self.cleaner = None
        elif c is None or (c.echo, c.noise, self._cleaner_rate) != (echo, noise, settings.input_rate):
            self.cleaner = self.cleaning.open(settings.input_rate, echo=echo, noise=noise)
            self._cleaner_rate = settings.input_rate

    def audio_of(self, message: ClientEvent | bytes, settings: SessionSettings) -> bytes:
        """The PCM16 an append event or a binary frame carries, at the session's input
        rate (G.711 is decoded and resampled here; raises ProtocolError)."""
        law = settings.input_format if settings.input_format != "pcm16" else None
        if isinstance(message, ClientEvent):
            raw = decode_audio(message.data["audio"], "audio", pcm16=law is None)
        elif not settings.binary_audio:
            raise ProtocolError(
                "binary_not_enabled", "binary frames carry audio only after session.update sets binary_audio: true"
            )
        elif law is None and len(message) % 2:
            raise ProtocolError("invalid_audio", f"binary audio frame has an odd number of bytes ({len(message)})")
        else:
            raw = message
        if law is None:
            return raw
        if self._telephone is None or self._telephone.law != law:
            self._telephone = TelephoneInput(law)
        return self._telephone.pcm(raw)

    def accept(self, raw: bytes, rate: int, now: float) -> None:
        """Admit one chunk under the session's limits, whole or not at all (raises
        ProtocolError; nothing is kept then)."""
        seconds = len(raw) / 2 / rate
        lim = self.limits
        self._budget = min(lim.input_burst_s, self._budget + (now - self._budget_at) * lim.max_input_speed)
        self._budget_at = now
        if seconds > self._budget:
            raise ProtocolError(
                "input_rate_exceeded",
                f"input audio is arriving faster than {lim.max_input_speed:g}x real time; this chunk was dropped",
                param="audio",
            )
        if self.listener is None and len(self._buffer) + self._accepted + len(raw) > lim.max_input_buffer_bytes:
            raise ProtocolError(
                "input_audio_buffer_full",
                f"the input audio buffer holds at most {lim.max_input_buffer_bytes} bytes; commit or clear it",
                param="audio",
            )
        self._budget -= seconds
        self._accepted += len(raw)
        self.received = True

    def hear(self, raw: bytes, rate: int, now: float, *, replying: bool, far: FarEnd = None) -> list[Signal]:
        """Accepted audio, in order: advance the clocks, clean it (``far``: what played
        over it, given the session times it spans and its length), buffer it or listen
        to it."""
        self._accepted = max(0, self._accepted - len(raw))
        samples = len(raw) // 2
        self.samples += samples
        self.clock.on_input(samples / rate, now)
        if self.cleaner is not None and samples:
            pcm = np.frombuffer(raw, "<i2").astype(np.int16)
            t0 = self.clock.time_of_input(self.samples - samples, rate)
            t1 = self.clock.time_of_input(self.samples, rate)
            reference = far(t0, t1, samples) if far is not None and self.cleaner.echo else None
            pcm = self.cleaner.process(pcm, reference)
            raw = pcm.astype("<i2").tobytes()
        if self.listener is None:
            self._buffer += raw
            return []
        return self.listener.push(np.frombuffer(raw, "<i2").astype(np.int16), replying=replying)

    def take(self) -> np.ndarray:
        """What a manual commit commits: the buffer, or the listener's pending segment."""
        if self.listener is not None:
            return self.listener.take_segment()
        audio = np.frombuffer(bytes(self._buffer), "<i2").astype(np.int16)
        self._buffer.clear()
        return audio

    def clear(self) -> list[Signal]:
        """Forget uncommitted audio (``input_audio_buffer.clear``), and the speech in
        progress with it."""
        self._buffer.clear()
        return self.listener.clear() if self.listener is not None else []
