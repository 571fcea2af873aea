"""Short interruptions ("Stop.", "Wait.", "Hold on.") said over a reply, in voices of both
parts: the natural-voice set's interruptions are whole requests, so a rule that keeps a
misheard backchannel from cancelling a reply is checked here against the shortest real
ones. Made by the project's own talkers (hibari, Kokoro, eSpeak NG) at load, from
pinned weights, and split by voice as the corpus is: Kokoro voices the corpus tunes on
and eSpeak's US voice in the tune part; hibari (held out in the corpus), Kokoro voices
the corpus never uses and eSpeak's Scottish voice held out.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroTalker
from lab.voices import TARGET_DBFS, set_level, speech_bounds

RATE = 24000
PHRASES = (
    "Stop.", "Wait.", "Hold on.", "Hang on.", "Stop, please.", "Wait a second.", "Sorry, what?", "Cancel that.",
    "Pause.", "Excuse me.", "Not that one.", "Actually, stop.",
)  # fmt: skip
"""("No." alone is not here: the policy takes a lone "no" for a backchannel.)"""
VOICES = {
    "tune": ("af_heart", "am_michael", "bf_emma", "bm_george", "espeak:en-us"),
    "heldout": ("heart", "af_bella", "am_fenrir", "am_puck", "bm_fable", "espeak:en-gb-scotland"),
}
LEAD_S = 0.15
"""Silence kept before the speech (the corpus's clips keep 150 ms either side)."""


@dataclass(frozen=True, slots=True)
class Command:
    """One short interruption in one voice: 24 kHz PCM16 at -26 dBFS active level."""

    text: str
    voice: str
    split: str
    pcm: np.ndarray
    speech_start: int
    """Sample where the words begin (energy detector, as the corpus marks them)."""

    @property
    def name(self) -> str:
        return f"{self.text.rstrip('.?!').lower().replace(' ', '_').replace(',', '')}@{self.voice}"


async def _say(talker: HibariTalker, text: str, voice: str, n: int) -> np.ndarray:
    parts = [c.audio.data async for c in talker.speak(SpeechRequest(f"command-{n}", text, voice=voice))]
    said: np.ndarray = np.concatenate(parts).astype(np.int16)  # (typed: some numpy stubs say Any)
    return said


async def _command(talker: HibariTalker, phrase: str, voice: str, split: str, n: int) -> Command:
    pcm = await _say(talker, phrase, voice, n)
    start, end = speech_bounds(pcm, RATE)
    lead = int(LEAD_S * RATE)
    speech = set_level(pcm[max(0, start - lead) : end + lead], TARGET_DBFS, RATE)
    return Command(phrase, voice, split, speech, min(start, lead))


async def _made(phrases: tuple[str, ...], voices: tuple[str, ...], split: str) -> list[Command]:
    talker = HibariTalker(kokoro=KokoroTalker(fallback=EspeakTalker()))
    try:
        pairs = [(voice, phrase) for voice in voices for phrase in phrases]
        return [await _command(talker, phrase, voice, split, n) for n, (voice, phrase) in enumerate(pairs)]
    finally:
        await talker.aclose()


def commands(split: str) -> list[Command]:
    """Every phrase in every voice of ``split`` (synthesised now: ~10 s on two cores)."""
    return asyncio.run(_made(PHRASES, VOICES[split], split))


async def command(phrase: str, voice: str) -> Command:
    """One phrase in one voice of either part."""
    split = next(s for s, voices in VOICES.items() if voice in voices)
    return (await _made((phrase,), (voice,), split))[0]
