"""Cutting a reply's text for a voice that makes whole segments, not a stream: segments
that grow so each is made while the one before plays, the model's padding trimmed to
natural pauses, and word positions estimated from the phonemes (for truncation)."""

from __future__ import annotations

import re

import numpy as np

from duplex.pipeline.frames import AudioBuffer
from duplex.pipeline.talker import TalkerChunk, WordMark

FIRST_WORDS = 3
"""The first segment: at most this many words (or the first clause, if shorter)."""
SEGMENT_CHARS = 240
"""Later segments: clauses packed up to about this many characters."""
MIN_CHARS = 12
"""The shortest segment after the first (each call to the model costs ~0.35 s of padding)."""

VOICED = 0.01
"""Samples above this (-40 dBFS) are speech, not the model's padding."""
LEAD_S = 0.03
TAIL_S = 0.12
WORD_GAP_S = 0.03
_PAUSES = {",": 0.12, ";": 0.2, ":": 0.2, ".": 0.3, "!": 0.3, "?": 0.3}
"""The pause kept after a segment, by its last character."""

# How long each kind of phoneme symbol lasts, relative to a plain phoneme (for word positions).
_SILENT = frozenset("ˈˌ")
_WEIGHTS = {"ː": 0.6, " ": 0.4, ",": 3.0, ";": 3.5, ":": 3.5, ".": 4.0, "!": 4.0, "?": 4.0}


def split_segments(text: str, after: int = 0) -> list[tuple[int, str]]:
    """(offset, piece) segments of ``text``: the first few words alone (what the listener
    waits for), then each segment up to ~2.5 times as long as the one before, so it is
    made while that one plays, up to :data:`SEGMENT_CHARS`.
    Segments end at a clause's end where one is near enough, else between words.
    ``after``: characters of the same reply already spoken (a later text segment of it
    goes on growing from there, without a short first segment)."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    ends = [text[e - 1] in ",;:.!?" for _, e in words]
    cuts: list[int] = []  # word index each segment ends before
    i, budget = 0, _budget(after)
    while i < len(words):
        if not cuts and not after:
            k = next((k + 1 for k in range(min(FIRST_WORDS, len(words))) if ends[k]), FIRST_WORDS)
            if len(words) - k <= 1:
                k = len(words)  # a last lone word would be its own tiny segment
        else:
            start, clause_end, enough, n = words[i][0], 0, 0, i + 1
            for n in range(i + 1, len(words) + 1):
                length = words[n - 1][1] - start
                if n > i + 1 and length > 1.5 * budget:
                    n -= 1
                    break
                if ends[n - 1] and length >= budget / 2:
                    clause_end = n  # the last clause end in reach
                if not enough and length >= budget:
                    enough = n
            k = clause_end or enough or n
            if len(words) - k == 1:
                k = len(words)
        k = min(k, len(words))
        length = words[k - 1][1] - words[i][0]
        budget = _budget(length)
        cuts.append(k)
        i = k
    out, start = [], 0
    for n, k in enumerate(cuts):
        end = len(text) if n == len(cuts) - 1 else words[k][0]
        out.append((start, text[start:end]))
        start = end
    return out


def _budget(before: int) -> int:
    """The next segment's length after one of ``before`` characters: made while that one
    plays, each call costing ~0.3 s for the model's padding plus ~0.37 s per second of
    speech (~0.065 s a character) on two threads."""
    return min(SEGMENT_CHARS, max(MIN_CHARS, int(2.5 * before) - 12))


def _weight(ipa: str) -> float:
    return sum(0.0 if c in _SILENT else _WEIGHTS.get(c, 1.0) for c in ipa)


def trim(audio: np.ndarray, text: str, rate: int, *, last: bool) -> np.ndarray:
    """A segment's audio with the model's silences cut to a natural pause: it pads each
    call with ~0.3 s before the speech and ~0.5 s after it, gaps a listener would hear
    between segments (and wait through before the first word)."""
    voiced = np.flatnonzero(np.abs(audio) > VOICED)
    if voiced.size == 0:
        return audio[:0]
    # A reply's text may come in several pieces: a sentence's end keeps its pause either way.
    end_pause = _PAUSES.get(text.rstrip()[-1:], TAIL_S if last else WORD_GAP_S)
    start = max(0, int(voiced[0] - LEAD_S * rate))
    end = min(audio.size, int(voiced[-1] + end_pause * rate))
    return audio[start:end]


def word_starts(text: str, clauses: list[str], samples: int, rate: int) -> list[tuple[int, int, int]]:
    """(start, end, sample) of each word of ``text`` in its ``samples`` of (trimmed)
    speech, from the phonemes ``clauses`` (eSpeak's groups, one per word when they agree)."""
    words = [(m.start(), m.end()) for m in re.finditer(r"[^\s]+", text)]
    groups = [g for clause in clauses for g in clause.split(" ") if g]
    if len(groups) == len(words):
        weights = [_weight(g) + _WEIGHTS[" "] for g in groups]
    else:  # eSpeak joined or split some words: share by spelling instead
        weights = [float(len(re.sub(r"\W", "", text[s:e])) or 1) for s, e in words]
    total = sum(weights) or 1.0
    lead = LEAD_S * rate
    span = max(0.0, samples - lead - _PAUSES.get(text.rstrip()[-1:], WORD_GAP_S) * rate)
    out, at = [], 0.0
    for (s, e), w in zip(words, weights, strict=True):
        out.append((s, e, int(lead + span * at / total)))
        at += w
    return out


def speech_chunks(
    audio: np.ndarray,
    text: str,
    clauses: list[str],
    *,
    offset: int,
    base: int,
    last: bool,
    rate: int,
    size: int,
    owner: str,
    keep_empty: bool = False,
) -> list[TalkerChunk]:
    """One made segment as PCM16 chunks of ``size`` samples, its padding trimmed, each chunk
    with the words that begin in it (``offset``: the segment's place in the request's
    text; ``base``: its first sample in the request's audio). ``keep_empty``: a silent
    segment still gives one (empty) chunk."""
    pcm = (np.clip(trim(audio, text, rate, last=last), -1.0, 1.0) * 32767).astype(np.int16)
    starts = word_starts(text, clauses, pcm.size, rate)
    return [
        TalkerChunk(
            AudioBuffer(pcm[at : at + size], "pcm16", rate, owner),
            tuple(WordMark(offset + s, offset + e, base + p) for s, e, p in starts if at <= p < at + size),
        )
        for at in range(0, max(pcm.size, 1 if keep_empty else 0), size)
    ]
