"""Whisper's log-mel spectrogram in numpy: the front end of Whisper and of Smart Turn.

16 kHz audio, 25 ms Hann windows every 10 ms (400-point FFT, 160 hop), 80 mel
bands on the Slaney scale with Slaney area normalisation, log10, a dynamic range
of 80 dB below the loudest value, then scaled to about [-1, 1] — the same
computation as OpenAI's Whisper and Hugging Face's WhisperFeatureExtractor.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 80


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    linear = 3.0 * f / 200.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) * 27.0 / np.log(6.4), linear)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    linear = 200.0 * m / 3.0
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), linear)


@cache
def mel_filters() -> np.ndarray:
    """``[N_MELS, N_FFT // 2 + 1]`` triangular filters, Slaney-normalised."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(RATE / 2)), N_MELS + 2))
    bins = np.linspace(0, RATE / 2, N_FFT // 2 + 1)
    ramps = edges[:, None] - bins[None, :]
    widths = np.diff(edges)
    down = -ramps[:-2] / widths[:-1, None]
    up = ramps[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= (2.0 / (edges[2 : N_MELS + 2] - edges[:N_MELS]))[:, None]
    return np.asarray(filters, np.float64)


@cache
def _window() -> np.ndarray:
    return np.hanning(N_FFT + 1)[:-1]  # periodic, as torch.hann_window


def log_mel(audio: np.ndarray, frames: int, *, normalize: bool = False) -> np.ndarray:
    """``[N_MELS, frames]`` float32 features of ``audio`` (float, 16 kHz), zero-padded
    or cut at the end to ``frames * HOP`` samples. ``normalize``: zero mean, unit
    variance of the waveform first (Smart Turn's extractor does this)."""
    x = np.asarray(audio, np.float32)
    n = frames * HOP
    x = np.pad(x, (0, n - x.size)) if x.size < n else x[:n]
    if normalize:
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    windows = sliding_window_view(padded, N_FFT)[::HOP][:frames]
    power = np.abs(np.fft.rfft(windows * _window(), axis=-1)) ** 2
    mel = np.log10(np.maximum(1e-10, mel_filters() @ power.T))
    mel = np.maximum(mel, mel.max() - 8.0)
    return np.asarray((mel + 4.0) / 4.0, np.float32)
