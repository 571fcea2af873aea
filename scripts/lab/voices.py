"""The natural-voice test corpus (``tests/voices``) and the variants tests make of it.

The corpus is 16 kHz mono PCM16: neural voices (Kokoro, Piper, hibari), older
synthesis families (flite and festival: diphone, clustergen, HTS) and human
recordings found in registry packages, split by voice into a part to tune on and
a held-out part that is only measured on (``scripts/make_voices.py`` made it;
its README says from what). This module loads it, measures speech the same way
everywhere, and derives the conditions a recogniser or a turn detector is tried
under: levels, babble and music at a given SNR, a telephone line. Everything is
deterministic for a seed.

Why this module is long: the corpus, its loading and every condition derived from it
are one concept that tests, benchmarks and the load test must share exactly.
"""

from __future__ import annotations

import json
import re
import wave
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import soxr

RATE = 16000
"""The corpus's sample rate."""
TARGET_DBFS = -26.0
"""Active speech level of every clean clip."""
KINDS = ("turn", "paused", "backchannel", "noise")
SPLITS = ("tune", "heldout")
"""The corpus's parts, chosen by voice: what the project tunes on, and what it only measures on."""
_FAMILIES = {"kokoro": "neural", "piper": "neural", "hibari": "neural"}
"""A clip's family from its source, for manifest entries that do not name it."""
VARIANTS = ("clean", "low", "loud", "babble10", "music10", "tel", "babble_abs40")
"""The names ``variant`` knows."""
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "tests" / "voices"
FRAME_S = 0.02
SILENT_DBFS = -120.0
"""What the level of digital silence is reported as."""


@dataclass(frozen=True, eq=False)
class Clip:
    """One WAV of the corpus with its manifest entry; ``pcm`` is int16 at ``rate``."""

    name: str
    file: str
    kind: str
    text: str | None
    voice: str
    source: str
    license: str
    rate: int
    speech_start: int
    speech_end: int
    pcm: np.ndarray
    pause_start: int | None = None
    pause_end: int | None = None
    root: Path = DEFAULT_ROOT
    """The corpus folder the clip is from (where ``variant`` finds its noise tracks)."""
    split: str = "tune"
    """The part of the corpus it is in (``SPLITS``): "tune" or "heldout"."""
    family: str = ""
    """How it was made: neural | diphone | clustergen | hts | human, or what a noise bed is made of."""

    @property
    def samples(self) -> int:
        return int(self.pcm.size)

    @property
    def seconds(self) -> float:
        return self.pcm.size / self.rate


@dataclass(frozen=True, eq=False)
class Corpus:
    """Every clip of one corpus folder."""

    root: Path
    clips: tuple[Clip, ...]

    def kind(self, kind: str) -> list[Clip]:
        """The clips of one kind (turn, paused, backchannel or noise)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
        return [c for c in self.clips if c.kind == kind]

    @property
    def turns(self) -> list[Clip]:
        return self.kind("turn")

    @property
    def paused(self) -> list[Clip]:
        return self.kind("paused")

    @property
    def backchannels(self) -> list[Clip]:
        return self.kind("backchannel")

    @property
    def noises(self) -> list[Clip]:
        return self.kind("noise")

    def split(self, name: str) -> list[Clip]:
        """The clips of one part: "tune" (tuned on) or "heldout" (only measured on)."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r} (one of {', '.join(SPLITS)})")
        return [c for c in self.clips if c.split == name]

    def __getitem__(self, name: str) -> Clip:
        """A clip by name (the file name with or without ``.wav``)."""
        for c in self.clips:
            if name in (c.name, c.file):
                return c
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.clips)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A mono PCM16 WAV as (int16 samples, rate)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{path}: not mono PCM16")
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16), w.getframerate()


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> None:
    """Write int16 ``pcm`` as a mono PCM16 WAV."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, "<i2").tobytes())


def load_corpus(root: Path | None = None) -> Corpus:
    """Read ``manifest.json`` and every WAV it names (default: the repo's ``tests/voices``)."""
    root = Path(root) if root is not None else DEFAULT_ROOT
    entries = json.loads((root / "manifest.json").read_text())["clips"]
    clips = []
    for e in entries:
        pcm, rate = read_wav(root / e["file"])
        if rate != e["rate"] or pcm.size != e["samples"]:
            raise ValueError(f"{e['file']}: the WAV does not match its manifest entry")
        clips.append(
            Clip(
                name=e["file"].removesuffix(".wav"),
                file=e["file"],
                kind=e["kind"],
                text=e.get("text"),
                voice=e["voice"],
                source=e["source"],
                license=e["license"],
                rate=rate,
                speech_start=e["speech_start"],
                speech_end=e["speech_end"],
                pcm=pcm,
                pause_start=e.get("pause_start"),
                pause_end=e.get("pause_end"),
                root=root,
                split=e.get("split", "tune"),
                family=e.get("family") or _FAMILIES.get(e["source"], e["source"]),
            )
        )
    return Corpus(root, tuple(clips))


@cache
def _default_corpus() -> Corpus:
    return load_corpus()


# --- levels -------------------------------------------------------------------------------------------------------


def _frame_power(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Mean square (full scale = 1) of each whole 20 ms frame."""
    x = np.asarray(pcm, np.float64) / 32768.0
    n = max(1, int(rate * FRAME_S))
    frames = x[: x.size - x.size % n].reshape(-1, n)
    return (frames**2).mean(axis=1) if frames.size else np.zeros(0)


def _db(power: float | np.ndarray) -> np.ndarray:
    return np.asarray(10.0 * np.log10(np.maximum(power, 1e-12)))


def speech_level_dbfs(pcm: np.ndarray, rate: int = RATE) -> float:
    """Active speech level in dBFS (a full-scale sine reads -3): a simplified ITU-T P.56.

    The RMS over the 20 ms frames above a threshold, where the threshold is lowered
    from the loudest frame until it sits 15.9 dB (P.56's margin) under the level of
    the frames above it. Pauses and the noise floor between words are so left out.
    """
    power = _frame_power(pcm, rate)
    power = power[power > 1e-10]  # digital silence (< -100 dBFS) is never speech
    if power.size == 0:
        return SILENT_DBFS
    levels = _db(power)
    top = float(levels.max())
    for threshold in np.arange(top, top - 60.0, -0.5):
        active = float(_db(power[levels >= threshold].mean()))
        if active - threshold >= 15.9:
            return active
    return float(_db(power.mean()))


def speech_bounds(pcm: np.ndarray, rate: int = RATE, floor_db: float = 35.0) -> tuple[int, int]:
    """(first, last) sample of speech by an energy detector: the first and last 20 ms frame
    within ``floor_db`` of the loudest (and above -60 dBFS). (0, 0) for silence."""
    power = _frame_power(pcm, rate)
    if power.size == 0:
        return 0, 0
    levels = _db(power)
    above = np.flatnonzero(levels >= max(float(levels.max()) - floor_db, -60.0))
    if above.size == 0:
        return 0, 0
    n = int(rate * FRAME_S)
    return int(above[0] * n), int(min(pcm.size, (above[-1] + 1) * n))


def _to_int16(x: np.ndarray) -> np.ndarray:
    """Float at int16 scale to int16, clipped at full scale."""
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def set_level(pcm: np.ndarray, dbfs: float, rate: int = RATE) -> np.ndarray:
    """``pcm`` scaled to an active speech level of ``dbfs`` (samples past full scale clip)."""
    level = speech_level_dbfs(pcm, rate)
    if level <= SILENT_DBFS:
        return np.asarray(pcm, np.int16).copy()
    return _to_int16(np.asarray(pcm, np.float64) * 10 ** ((dbfs - level) / 20))


def resample(pcm: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """int16 ``pcm`` from one rate to another (soxr, high quality)."""
    if rate_in == rate_out:
        return np.asarray(pcm, np.int16).copy()
    return _to_int16(soxr.resample(np.asarray(pcm, np.float32), rate_in, rate_out, quality="HQ"))


# --- noise and channels -------------------------------------------------------------------------------------------


@cache
def _noise_track(root: Path, name: str, rate: int) -> np.ndarray:
    corpus = _default_corpus() if root == DEFAULT_ROOT else load_corpus(root)
    clip = corpus[name]
    if clip.kind != "noise":
        raise ValueError(f"{name} is not a noise track")
    return resample(clip.pcm, clip.rate, rate)


def _stretch(track: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """``samples`` of ``track`` from an offset chosen by ``seed`` (wrapping round)."""
    offset = int(np.random.default_rng(seed).integers(0, track.size))
    return np.take(track, np.arange(offset, offset + samples), mode="wrap")


def noise(
    name: str, seconds: float, level_dbfs: float, rate: int = 24000, seed: int = 0, root: Path | None = None
) -> np.ndarray:
    """A stretch of a noise track (``babble`` or ``music``) alone, at an RMS of ``level_dbfs``."""
    track = _noise_track(Path(root) if root is not None else DEFAULT_ROOT, name.removesuffix(".wav"), rate)
    x = _stretch(track, int(round(seconds * rate)), seed).astype(np.float64)
    rms = float(np.sqrt(np.mean(x**2))) / 32768.0
    return _to_int16(x * (10 ** (level_dbfs / 20) / max(rms, 1e-9)))


def in_bed(
    clip: Clip, snr_db: float, rate: int, *, lead_s: float, tail_s: float, seed: int = 0, track: str = "babble"
) -> tuple[np.ndarray, int]:
    """``clip`` at -26 dBFS inside a bed of ``track`` ``snr_db`` under it that starts
    ``lead_s`` before the speech and goes on ``tail_s`` after it (a café: the turn must
    end while the babble does not); and the sample where the clip begins in it."""
    speech = set_level(resample(clip.pcm, clip.rate, rate), -26.0, rate)
    lead, tail = int(lead_s * rate), int(tail_s * rate)
    bed = noise(track, (lead + speech.size + tail) / rate, -26.0 - snr_db, rate, seed=seed).astype(np.int32)
    bed[lead : lead + speech.size] += speech
    return np.clip(bed, -32768, 32767).astype(np.int16), lead


def mix(
    speech: np.ndarray,
    noise_track: np.ndarray,
    rate: int,
    *,
    snr_db: float | None = None,
    noise_dbfs: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """``speech`` (int16, at its level) plus a stretch of ``noise_track`` (int16, same rate) whose
    RMS is ``snr_db`` under the speech's active level, or at ``noise_dbfs`` absolute."""
    if (snr_db is None) == (noise_dbfs is None):
        raise ValueError("give exactly one of snr_db and noise_dbfs")
    target = speech_level_dbfs(speech, rate) - snr_db if snr_db is not None else noise_dbfs
    assert target is not None
    n = _stretch(noise_track, speech.size, seed).astype(np.float64)
    rms = float(np.sqrt(np.mean(n**2))) / 32768.0
    n *= 10 ** (target / 20) / max(rms, 1e-9)
    return _to_int16(np.asarray(speech, np.float64) + n)


def _band_pass(x: np.ndarray, rate: int, low: float, high: float, order: int = 4) -> np.ndarray:
    """Zero-phase band-pass in the frequency domain, Butterworth-shaped magnitude."""
    size = 1 << int(np.ceil(np.log2(max(2, x.size * 2))))
    f = np.fft.rfftfreq(size, 1 / rate)
    f[0] = 1e-3
    gain = 1 / np.sqrt(1 + (low / f) ** (2 * order)) / np.sqrt(1 + (f / high) ** (2 * order))
    return np.fft.irfft(np.fft.rfft(x, size) * gain, size)[: x.size]


def mu_law(x: np.ndarray, mu: int = 255) -> np.ndarray:
    """G.711 mu-law: encode float samples (full scale 1) to 8 bits and decode them again."""
    y = np.sign(x) * np.log1p(mu * np.minimum(np.abs(x), 1.0)) / np.log1p(mu)
    q = np.round(y * 127) / 127
    return np.asarray(np.sign(q) * np.expm1(np.abs(q) * np.log1p(mu)) / mu)


def telephone(pcm: np.ndarray, rate: int, rate_out: int | None = None) -> np.ndarray:
    """A narrowband phone line: 300-3400 Hz band-pass, 8 kHz, G.711 mu-law, back up to ``rate_out``."""
    x = _band_pass(np.asarray(pcm, np.float64), rate, 300.0, 3400.0)
    narrow = soxr.resample(x.astype(np.float32) / 32768.0, rate, 8000, quality="HQ")
    line = mu_law(np.asarray(narrow, np.float64)).astype(np.float32)
    return _to_int16(soxr.resample(line, 8000, rate_out or rate, quality="HQ") * 32768.0)


def variant(clip: Clip, name: str, rate: int = 24000, seed: int = 0, root: Path | None = None) -> np.ndarray:
    """``clip`` under one condition of ``VARIANTS``, as int16 at ``rate``.

    clean/low/loud: speech at -26/-35/-15 dBFS (at -15 the highest peaks clip, as on a hot
    microphone); babble10 and music10: speech at -26 with the noise's RMS 10 dB under it;
    babble_abs40: speech at -26, babble at -40 dBFS; tel: the clean clip through ``telephone``
    (it comes out 2-3 dB quieter: the band-pass removes what lies outside 300-3400 Hz). The
    noise stretch is chosen by ``seed``; the noise tracks come from ``root`` (default: the
    clip's own corpus).
    """
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r} (one of {', '.join(VARIANTS)})")
    speech = resample(clip.pcm, clip.rate, rate)
    if name == "tel":
        return telephone(set_level(speech, TARGET_DBFS, rate), rate)
    levels = {"low": -35.0, "loud": -15.0}
    speech = set_level(speech, levels.get(name, TARGET_DBFS), rate)
    noise_root = Path(root) if root is not None else clip.root
    if name in ("babble10", "music10"):
        return mix(speech, _noise_track(noise_root, name[:-2], rate), rate, snr_db=10.0, seed=seed)
    if name == "babble_abs40":
        return mix(speech, _noise_track(noise_root, "babble", rate), rate, noise_dbfs=-40.0, seed=seed)
    return speech


# --- word error -----------------------------------------------------------------------------------------------------

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}  # fmt: skip
_CONTRACTIONS = [
    (r"\bcan't\b|\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"\blet's\b", "let us"), (r"\bain't\b", "is not"), (r"\bi'm\b", "i am"), (r"n't\b", " not"),
    (r"'re\b", " are"), (r"'ll\b", " will"), (r"'ve\b", " have"), (r"'d\b", " would"),
    (r"\b(it|that|what|there|here|he|she|who|where|how|when|why)'s\b", r"\1 is"),
]  # fmt: skip
_SPELLINGS = {"ok": "okay", "mr": "mister", "mrs": "missus", "dr": "doctor", "café": "cafe", "practise": "practice",
              "uhhuh": "uh huh"}  # fmt: skip


def number_words(n: int) -> str:
    """A whole number (0 to 999,999,999) in words: 125 -> "one hundred twenty five"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for size, word in ((10**6, "million"), (1000, "thousand"), (100, "hundred")):
        if n >= size:
            head = f"{number_words(n // size)} {word}"
            return head if n % size == 0 else f"{head} {number_words(n % size)}"
    raise AssertionError(n)


def _ordinal(m: re.Match[str]) -> str:
    *head, last = number_words(int(m.group(1))).split()
    last = _ORDINAL_WORDS.get(last, last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return " ".join([*head, last])


def normalize_words(text: str) -> list[str]:
    """The words WER compares: lowercase; curly quotes straightened; "mm-hmm"/"mhm" -> "mhm";
    contractions expanded ("I'd" -> "i would", "it's" -> "it is", "don't" -> "do not");
    "$5" -> "5 dollars", "10%" -> "10 percent", "7:30" -> "7 30"; digits and ordinals in words
    ("4" -> "four", "23rd" -> "twenty third"); hyphens split words; other punctuation dropped;
    a few spellings made one ("ok" -> "okay", "mr" -> "mister", "practise" -> "practice")."""
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    t = re.sub(r"\bm+-?h+m+\b", "mhm", t)
    t = re.sub(r"\$(\d+)", r"\1 dollars", t)
    t = re.sub(r"(\d)%", r"\1 percent", t).replace("&", " and ")
    t = re.sub(r"(\d),(\d{3})\b", r"\1\2", t)
    t = re.sub(r"(\d+)\.(\d+)", lambda m: m.group(1) + " point " + " ".join(m.group(2)), t)
    t = re.sub(r"(\d):(\d\d)", lambda m: m.group(1) + (" o'clock" if m.group(2) == "00" else " " + m.group(2)), t)
    t = re.sub(r"\b(\d+)(?:st|nd|rd|th)\b", _ordinal, t)
    t = re.sub(r"\d+", lambda m: " " + number_words(int(m.group())) + " ", t)
    for pattern, full in _CONTRACTIONS:
        t = re.sub(pattern, full, t)
    t = re.sub(r"[-/]", " ", t)
    t = re.sub(r"[^\w' ]", " ", t)
    words = [w.strip("'").replace("'", "") for w in t.split()]
    return " ".join(_SPELLINGS.get(w, w) for w in words if w).split()


def wer(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words) between two texts after ``normalize_words``: the
    substitutions, deletions and insertions of a Levenshtein alignment. WER = edits / words."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1], len(ref)
