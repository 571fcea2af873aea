"""The user's side of a scripted conversation: eSpeak NG speech, WAV files,
silence, noise and coughs, made on the spot (nothing is downloaded)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import soxr

from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.talkers.espeak import EspeakTalker


async def speech(
    talker: EspeakTalker, text: str, rate: int = 24000, voice: str = "en-us+klatt2", speed: float = 1.0
) -> np.ndarray:
    """``text`` spoken by eSpeak NG, as PCM16 at ``rate``."""
    parts = [c.audio.data async for c in talker.speak(SpeechRequest("t", text, voice=voice, speed=speed))]
    x = np.concatenate(parts).astype(np.float32) / 32768.0
    y = soxr.resample(x, talker.sample_rate, rate)
    pcm: np.ndarray = np.clip(np.rint(y * 32767), -32768, 32767).astype(np.int16)
    return pcm


def trim(pcm: np.ndarray, rate: int, level: int = 300) -> np.ndarray:
    """Cut leading and trailing silence (10 ms RMS below ``level``)."""
    start, end = voiced_bounds(pcm, rate, level)
    return pcm[start:end]


def voiced_bounds(pcm: np.ndarray, rate: int, level: int = 300) -> tuple[int, int]:
    """First and last sample of the signal's audible part (10 ms RMS above ``level``)."""
    hop = rate // 100
    n = pcm.size // hop
    rms = np.sqrt((pcm[: n * hop].astype(np.float64).reshape(n, hop) ** 2).mean(axis=1))
    loud = np.nonzero(rms > level)[0]
    if loud.size == 0:
        return 0, 0
    return int(loud[0] * hop), int((loud[-1] + 1) * hop)


def silence(seconds: float, rate: int = 24000) -> np.ndarray:
    """Digital silence, PCM16."""
    return np.zeros(int(seconds * rate), np.int16)


def noise(seconds: float, rate: int = 24000, level: float = 3000.0, seed: int = 0) -> np.ndarray:
    """White noise of RMS ``level`` (PCM16 units), seeded."""
    rng = np.random.default_rng(seed)
    pcm: np.ndarray = np.clip(rng.normal(0, level, int(seconds * rate)), -32768, 32767).astype(np.int16)
    return pcm


def cough(rate: int = 24000, seconds: float = 0.3, seed: int = 1) -> np.ndarray:
    """A cough-like burst: a voiced, noisy 'khh' with a sharp attack and fast decay."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    env = np.minimum(1.0, t / 0.01) * np.exp(-t / (seconds / 3))
    voiced = np.sign(np.sin(2 * np.pi * 140 * t)) * 0.5 + np.sin(2 * np.pi * 280 * t)
    # A crude vocal-tract colouring: smooth the breath noise a little.
    breath = np.convolve(rng.normal(0, 1, n), np.ones(6) / 6, mode="same")
    x = env * (0.6 * voiced + 1.2 * breath)
    pcm: np.ndarray = np.clip(x / np.abs(x).max() * 20000, -32768, 32767).astype(np.int16)
    return pcm


def mix(*parts: np.ndarray) -> np.ndarray:
    """The parts one after another, as PCM16."""
    pcm: np.ndarray = np.concatenate(parts).astype(np.int16)
    return pcm


def read_wav(path: str | Path, rate: int) -> np.ndarray:
    """A PCM16 WAV file as mono PCM16 at ``rate``."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV files are supported")
        channels, source_rate = w.getnchannels(), w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16)
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
    if source_rate != rate:
        y = soxr.resample(pcm.astype(np.float32) / 32768.0, source_rate, rate)
        pcm = np.clip(np.rint(y * 32767), -32768, 32767).astype(np.int16)
    return pcm


def write_wav(path: str | Path, rate: int, *channels: np.ndarray) -> None:
    """Write PCM16 channels (padded to the longest) as one WAV file."""
    n = max(c.size for c in channels)
    frames = np.stack([np.pad(c, (0, n - c.size)) for c in channels], axis=1).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(len(channels))
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.tobytes())
