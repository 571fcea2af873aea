"""Speech enhancement before recognition: the user's voice out of the babble around it.

Whisper hears a voice over other voices (babble at 10 dB SNR) worst of all: held out,
base made 0.37 of the words wrong there against 0.05 clean. A learned enhancer that
is trained to remove background talkers, run on what the recogniser is given (not
on what voice activity or the end-of-turn model hear), takes a fifth of those
errors away (``scripts/bench_recognition.py --enhancer``). WebRTC's noise suppressor
did the opposite (docs/benchmarks.md), and so does any enhancer at full strength:
Whisper knows noise and not the artefacts of its removal, so part of the original is
kept (:data:`KEEP`), as libdf's attenuation limit does.

:class:`Hush` is Hush (DeepFilterNet3 with a head for background speakers; Apache-2.0;
the three ONNX graphs of the ``livekit-plugins-hush`` 0.3.3 wheel, carried in
``assets/models/hush`` and checked against their sha256), run on a whole utterance
in one call per graph: exact and causal, ~0.02 s of one core per second of audio.
(Frame by frame, as the plugin runs it, the encoder's convolutions lose their two
frames of context: more errors and three times the CPU.) It runs only on audio whose
own levels say it is noisy (:func:`noisy`): clean speech, a phone line or a quiet
voice go to the recogniser untouched.

:class:`HushStream` runs it on a live stream, 40 ms at a time, for what must hear the
babble taken out as it comes: voice activity, measured offline so far and not yet wired
in (docs/benchmarks-history.md, "Issue 44: end of turn inside babble that goes on").
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from duplex.pipeline.weights import AssetFile

RATE = 16000
FILES = {
    "enc": AssetFile("models/hush/enc.onnx", "eed80a17a2e4f33209e648cf35fdd3719499319771bdf2aa3fe4b56a48cfeaba"),
    "erb_dec": AssetFile(
        "models/hush/erb_dec.onnx", "dfda32e6d3ad8bf68e075c12b5319c3a9ed264e3eb1c9da20261eeda04ea1a9a"
    ),
    "df_dec": AssetFile("models/hush/df_dec.onnx", "dae10024478a0cef057eeb91021a927c631af6387789fc88ce0f57621c7b269b"),
}
KEEP = 0.35
"""The share of the original mixed back (a ~9 dB limit on what is taken away): on the tune
part 0.25-0.5 were within 0.004 of each other on babble; 0.35 cost least elsewhere held out."""
CHUNK = 4
"""Frames (10 ms each) a stream hands the model at once (see :class:`HushStream`)."""
SPREAD_DB = 18.0
"""Audio whose loud frames are less than this over its quiet ones is noisy: the quiet
frames are a bed under the voice, not silence (see :func:`noisy`)..."""
BED_DBFS = -70.0
"""...if its quiet frames are over this at all (digital silence is even, and no bed)."""

FFT, HOP, NB_ERB, NB_DF, ORDER = 320, 160, 32, 64, 5
"""DeepFilterNet3 at 16 kHz: 20 ms frames every 10 ms, 32 ERB bands, a deep filter of
order 5 on the lowest 64 bins (the model's config.ini)."""
_WIDTHS = np.array([2] * 20 + [3, 6, 7, 7, 8, 8, 10, 12, 12, 14, 16, 18])
_STARTS = np.concatenate([[0], np.cumsum(_WIDTHS)[:-1]])
_ALPHA = np.float32(np.exp(-HOP / RATE))  # the features' normalisation: a 1 s time constant
_WINDOW = np.sin(0.5 * np.pi * np.sin(0.5 * np.pi * (np.arange(FFT) + 0.5) / (FFT // 2)) ** 2).astype(np.float32)
_WNORM = np.float32(2.0 * HOP / FFT**2)
_BANDS = np.zeros((NB_ERB, FFT // 2 + 1), np.float32)  # band gains -> bin gains
for _b, (_s, _w) in enumerate(zip(_STARTS, _WIDTHS, strict=True)):
    _BANDS[_b, _s : _s + _w] = 1.0


class Enhancer(Protocol):
    """Cleans speech for the recogniser: 16 kHz float audio in, the same length out."""

    name: str

    def load(self) -> None:
        """Check and load the model (blocking)."""
        ...

    def enhance(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` (float32 in [-1, 1] at 16 kHz) cleaned where it needs it, time-aligned."""
        ...


def noisy(audio: np.ndarray, spread_db: float = SPREAD_DB) -> bool:
    """Whether ``audio`` (16 kHz float) has a bed of sound under its loudest part: its
    10 ms levels' 90th percentile less than ``spread_db`` over their 10th. Speech in a
    quiet room has silence between and around its words, tens of dB down."""
    n = audio.size // HOP
    if n < 20:
        return False
    power = np.mean(audio[: n * HOP].reshape(n, HOP).astype(np.float64) ** 2, axis=1) + 1e-12
    low, high = np.percentile(10 * np.log10(power), [10, 90])
    return bool(high - low < spread_db and low > BED_DBFS)


class Hush:
    """Hush on onnxruntime, shared by every session (its state is per call)."""

    name = "hush"

    def __init__(self, keep: float = KEEP, *, threads: int = 1) -> None:
        self.keep = keep
        self.threads = threads
        self._graphs: dict[str, Any] = {}

    def load(self) -> None:
        if self._graphs:
            return
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Every utterance is a new length: an arena would keep the longest one's memory for
        # good (see pipeline/arena.py), and the allocations cost little beside the graphs.
        options.enable_cpu_mem_arena = False
        self._graphs = {
            name: ort.InferenceSession(f.read(), options, providers=["CPUExecutionProvider"])
            for name, f in FILES.items()
        }

    def enhance(self, audio: np.ndarray) -> np.ndarray:
        if not noisy(audio):
            return audio
        return self.clean(audio)

    def clean(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` through the model whatever its levels (16 kHz float32, same length):
        the whole of it in one call per graph, then silence enough to finish its last frame."""
        tail = np.zeros((FFT - HOP) + (-audio.size) % HOP, np.float32)
        return HushStream(self, chunk=0).process(np.concatenate([audio, tail]))[: audio.size]


class HushStream:
    """Hush on a live stream: ``chunk`` frames (10 ms each) at a time, with the graphs'
    recurrent states, the features' running means, the deep filter's past frames and the
    overlap-add carried from one chunk to the next. Sample ``i`` of what :meth:`process`
    returns cleans input sample ``i``; it comes once the chunk holding the frame after it
    is complete (10-50 ms later at 4 frames).

    The graphs take no frames from before a chunk, so their first convolutions see
    zeros there: at 4 frames the output is ~10% (RMS) off the whole utterance's on speech
    in babble, at 1-2 frames ~30% (the plugin's way). ``chunk=0``: everything given at once.
    """

    def __init__(self, hush: Hush, *, chunk: int = CHUNK) -> None:
        hush.load()
        self.hush = hush
        self.chunk = chunk
        self._x = np.zeros(FFT - HOP, np.float32)  # input not yet framed (the analysis window's overlap first)
        self._mean = np.linspace(-60.0, -90.0, NB_ERB, dtype=np.float32)
        self._unit = np.linspace(0.001, 0.0001, NB_DF, dtype=np.float32)
        self._h_enc = np.zeros((1, 1, 256), np.float32)
        self._h_erb = np.zeros((1, 1, 256), np.float32)
        self._h_df = np.zeros((3, 1, 256), np.float32)
        self._past = np.zeros((ORDER - 1, NB_DF), np.complex64)  # the deep filter's last frames
        self._tail = np.zeros(HOP, np.float32)  # the second half of the last frame's output
        self._skip = FFT - HOP  # the analysis delay: output before the input's first sample

    def process(self, audio: np.ndarray) -> np.ndarray:
        """Feed 16 kHz float audio; the cleaned samples now ready (whole chunks' worth)."""
        self._x = np.concatenate([self._x, audio.astype(np.float32)])
        frames = (self._x.size - (FFT - HOP)) // HOP
        n = frames - frames % self.chunk if self.chunk else frames
        return self._frames(n) if n else np.zeros(0, np.float32)

    def _frames(self, n: int) -> np.ndarray:
        """Clean the next ``n`` frames (a multiple of the chunk)."""
        x, self._x = self._x[: n * HOP + FFT - HOP], self._x[n * HOP :]
        at = np.arange(n)[:, None] * HOP + np.arange(FFT)[None, :]
        spec = (np.fft.rfft(x[at] * _WINDOW, axis=1) * _WNORM).astype(np.complex64)
        erb, low = self._features(spec)
        g = self.hush._graphs
        gains, coefs = [], []
        step = self.chunk or n
        for a in range(0, n, step):
            e0, e1, e2, e3, emb, c0, _, self._h_enc = g["enc"].run(
                None,
                {"feat_erb": erb[:, :, a : a + step], "feat_spec": low[:, :, a : a + step], "h_enc_in": self._h_enc},
            )
            inputs = {"emb": emb, "e3": e3, "e2": e2, "e1": e1, "e0": e0, "h_erb_dec_in": self._h_erb}
            (m, self._h_erb) = g["erb_dec"].run(None, inputs)
            (c, self._h_df) = g["df_dec"].run(None, {"emb": emb, "c0": c0, "h_df_dec_in": self._h_df})
            gains.append(m[0, 0])
            coefs.append(c[0])
        out = spec * (np.concatenate(gains) @ _BANDS)
        taps = np.concatenate(coefs).reshape(n, NB_DF, ORDER, 2)
        taps = taps[..., 0] + 1j * taps[..., 1]  # tap o filters frame t - (ORDER - 1) + o
        past = np.concatenate([self._past, spec[:, :NB_DF]])
        self._past = past[-(ORDER - 1) :]
        out[:, :NB_DF] = sum(taps[:, :, o] * past[o : o + n] for o in range(ORDER))
        keep = self.hush.keep
        out = spec * keep + out * (1 - keep)
        y = np.fft.irfft(out, n=FFT, axis=1).astype(np.float32) * (FFT * _WINDOW)
        joined = y[:, :HOP].reshape(-1)  # overlap-add by halves (a copy: the slice is strided)
        joined[:HOP] += self._tail
        joined[HOP:] += y[:-1, HOP:].reshape(-1)
        self._tail = y[-1, HOP:].copy()
        skip, self._skip = min(self._skip, joined.size), max(0, self._skip - joined.size)
        return joined[skip:]

    def _features(self, spec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """DeepFilterNet's inputs: ERB band levels and the lowest bins, each normalised by a
        running (1 s) mean, as libdf computes them."""
        power = spec.real**2 + spec.imag**2
        erb = (10 * np.log10(np.add.reduceat(power, _STARTS, axis=1) / _WIDTHS + 1e-10)).astype(np.float32)
        low = spec[:, :NB_DF]
        magnitude = np.abs(low).astype(np.float32)
        mean, unit = self._mean, self._unit
        erb_out, low_out = np.empty_like(erb), np.empty_like(low)
        rest = np.float32(1) - _ALPHA
        for t in range(erb.shape[0]):  # sequential running means: ~100 small vector steps per second
            mean = mean * _ALPHA + erb[t] * rest
            erb_out[t] = (erb[t] - mean) / 40.0
            unit = unit * _ALPHA + magnitude[t] * rest
            low_out[t] = low[t] / np.sqrt(unit)
        self._mean, self._unit = mean, unit
        spec_in = np.stack([low_out.real, low_out.imag])[None].astype(np.float32)
        return erb_out[None, None], spec_in
