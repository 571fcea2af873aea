"""Spoken questions with answers that can be checked: the conversation benchmark's set.

Forty conversations a voice assistant meets (facts, quantities, sums, practical
advice, follow-ups that need the previous turn, tool calls, things it must not
invent, a command), each turn with a pattern its answer must match. Said by the
project's own talkers at load, split by voice as the corpus is
(:mod:`lab.commands` has the same two sets of voices): each
conversation is said once in each part, by the next voice of that part in turn; in
the held-out part every third one is heard through a condition (babble at 10 dB SNR,
a telephone line, a low level) from the corpus's own variants.

A turn's answer passes when its words match ``expect`` (case-insensitive, after the
corpus's own normalisation: digits as words, so "6 minutes" and "six minutes" both
match ``six``); a tool turn passes when the reply calls ``tool`` with arguments
matching ``expect``, then says something that matches ``after``; a command turn
passes when no reply follows.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroTalker
from lab.commands import VOICES
from lab.voices import TARGET_DBFS, mix, normalize_words, set_level, speech_bounds, telephone
from lab.voices import _noise_track as noise_track

RATE = 24000
LEAD_S = 0.15
REFUSE = (
    r"(not|never|no one|nobody|n't|unable|cannot|can not|no) .*(know|aware|sure|information|record|exist|real|access"
    r"|find|familiar|able)|fictional|made up|no such|there is no|there was no|does not exist|do not know|unknown"
)
"""What an answer that does not invent says."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One thing the user says and what the answer must hold."""

    said: str
    expect: str | None
    """A pattern the answer's words must match; None for a command (no reply may follow)."""
    tool: str | None = None
    """The function the reply must call (its arguments must match ``expect``)."""
    output: dict[str, Any] | None = None
    """What the tool returns."""
    after: str | None = None
    """What the answer after the tool's output must match."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """Turns said in one session, in order."""

    name: str
    kind: str
    """facts | quantity | advice | follow-up | tool | refusal | command"""
    turns: tuple[Turn, ...]


def _one(name: str, kind: str, said: str, expect: str) -> Conversation:
    return Conversation(name, kind, (Turn(said, expect),))


CONVERSATIONS: tuple[Conversation, ...] = (
    _one("capital-france", "facts", "What is the capital of France?", r"\bparis\b"),
    _one("capital-japan", "facts", "What is the capital of Japan?", r"\btokyo\b"),
    _one("capital-australia", "facts", "What is the capital of Australia?", r"\bcanberra\b"),
    _one("romeo", "facts", "Who wrote Romeo and Juliet?", r"shakespeare"),
    _one("largest-planet", "facts", "What is the largest planet in our solar system?", r"\bjupiter\b"),
    _one("spider", "facts", "How many legs does a spider have?", r"\beight\b"),
    _one("gold", "facts", "What is the chemical symbol for gold?", r"\ba ?u\b"),
    _one("ocean", "facts", "Which ocean is the largest?", r"\bpacific\b"),
    _one("continents", "facts", "How many continents are there?", r"\bseven\b"),
    _one("mona-lisa", "facts", "Who painted the Mona Lisa?", r"leonardo|da vinci"),
    _one("everest", "facts", "What is the tallest mountain in the world?", r"\beverest\b"),
    _one("brazil", "facts", "What language do people speak in Brazil?", r"portuguese"),
    _one("red-planet", "facts", "Which planet is known as the red planet?", r"\bmars\b"),
    _one("plants", "facts", "What gas do plants take in from the air?", r"carbon dioxide|\bc ?o ?two\b"),
    _one("boiling", "quantity", "At what temperature does water boil, in Celsius?", r"\b(one )?hundred\b"),
    _one("freezing-f", "quantity", "What is the freezing point of water in Fahrenheit?", r"\bthirty two\b"),
    _one("leap-year", "quantity", "How many days are in a leap year?", r"three hundred (and )?sixty six"),
    _one("meter", "quantity", "How many centimeters are in a meter?", r"\b(one )?hundred\b"),
    _one("pound", "quantity", "How many ounces are in a pound?", r"\bsixteen\b"),
    _one("week", "quantity", "How many hours are there in a day?", r"\btwenty four\b"),
    _one("times", "quantity", "What is twelve times twelve?", r"one hundred (and )?forty four|\bgross\b"),
    _one("plus", "quantity", "What is fifteen plus twenty seven?", r"\bforty two\b"),
    _one("apples", "quantity", "If I have three apples and eat one, how many are left?", r"\btwo\b"),
    _one("egg", "advice", "How long should I boil an egg for a soft yolk?", r"\b(four|five|six|seven)\b.*minute"),
    _one("sleep", "advice", "How many hours of sleep does an adult need?", r"\b(seven|eight|nine)\b"),
    _one("cookies", "advice", "What oven temperature should I bake cookies at, in Fahrenheit?", r"three hundred"),
    Conversation(
        "italy",
        "follow-up",
        (
            Turn("What is the capital of Italy?", r"\brome\b"),
            Turn("And roughly how many people live there?", r"million"),
        ),
    ),
    Conversation(
        "moon",
        "follow-up",
        (
            Turn("Who was the first person to walk on the moon?", r"armstrong"),
            Turn(
                "In what year did that happen?", r"nineteen (hundred )?sixty nine|one thousand nine hundred sixty nine"
            ),
        ),
    ),
    Conversation(
        "russia",
        "follow-up",
        (
            Turn("What is the largest country in the world?", r"\brussia\b"),
            Turn("And what is its capital?", r"\bmoscow\b"),
        ),
    ),
    Conversation(
        "planets",
        "follow-up",
        (
            Turn("How many planets are in our solar system?", r"\beight\b"),
            Turn("Which one is closest to the sun?", r"\bmercury\b"),
        ),
    ),
    Conversation(
        "weather",
        "tool",
        (
            Turn(
                "What's the weather like in Paris right now?",
                r"paris",
                tool="get_weather",
                output={"city": "Paris", "temperature_c": 18, "condition": "sunny"},
                after=r"eighteen|sunny",
            ),
        ),
    ),
    Conversation(
        "weather-tokyo",
        "tool",
        (
            Turn(
                "Can you check the weather in Tokyo for me?",
                r"tokyo",
                tool="get_weather",
                output={"city": "Tokyo", "temperature_c": 9, "condition": "raining"},
                after=r"\bnine\b|rain",
            ),
        ),
    ),
    Conversation(
        "timer",
        "tool",
        (
            Turn(
                "Set a timer for ten minutes.",
                r"\b10\b|ten",
                tool="set_timer",
                output={"ok": True, "minutes": 10},
                after=r"\bten\b|timer|set",
            ),
        ),
    ),
    _one("zorblatt", "refusal", "What year did the Zorblatt bridge in Paris open?", REFUSE),
    _one("neighbour", "refusal", "What is my neighbor's first name?", REFUSE),
    _one("nobel-time", "refusal", "Who won the Nobel prize for time travel in 2019?", REFUSE),
    _one("glimmer", "refusal", "How tall is the Glimmerstone tower in Oslo?", REFUSE),
    Conversation("stop", "command", (Turn("Stop.", None),)),
    Conversation("never-mind", "command", (Turn("Never mind.", None),)),
    _one("joke", "advice", "Tell me a short joke.", r"\w+ \w+ \w+"),
)
"""Every conversation of the set ."""

DEV_CONVERSATIONS: tuple[Conversation, ...] = (
    _one("dev-capital-canada", "facts", "What is the capital of Canada?", r"\bottawa\b"),
    _one("dev-capital-spain", "facts", "What's the capital city of Spain?", r"\bmadrid\b"),
    _one("dev-hamlet", "facts", "Who wrote Hamlet?", r"shakespeare"),
    _one("dev-smallest-planet", "facts", "What is the smallest planet in the solar system?", r"\bmercury\b"),
    _one("dev-insect", "facts", "How many legs does an insect have?", r"\bsix\b"),
    _one("dev-silver", "facts", "What is the chemical symbol for silver?", r"\ba ?g\b"),
    _one("dev-desert", "facts", "What is the largest hot desert in the world?", r"sahara"),
    _one("dev-water", "facts", "What is water made of?", r"hydrogen"),
    _one("dev-week", "quantity", "How many days are there in a week?", r"\bseven\b"),
    _one("dev-kilo", "quantity", "How many grams are in a kilogram?", r"\b(one )?thousand\b"),
    _one("dev-times", "quantity", "What is nine times seven?", r"\bsixty three\b"),
    _one("dev-minus", "quantity", "What is one hundred minus thirty five?", r"\bsixty five\b"),
    _one("dev-rice", "advice", "How long does white rice take to cook?", r"\b(fifteen|twenty|eighteen|ten|twelve)\b"),
    _one(
        "dev-water-drink",
        "advice",
        "How much water should I drink a day?",
        r"\b(two|eight|three|liters|glasses|cups)\b",
    ),
    Conversation(
        "dev-germany",
        "follow-up",
        (Turn("What is the capital of Germany?", r"\bberlin\b"), Turn("And what river runs through it?", r"spree")),
    ),
    Conversation(
        "dev-author",
        "follow-up",
        (
            Turn("Who wrote Pride and Prejudice?", r"austen"),
            Turn("When was it published?", r"eighteen (hundred )?thirteen|one thousand eight hundred thirteen"),
        ),
    ),
    Conversation(
        "dev-weather",
        "tool",
        (
            Turn(
                "Is it cold in Berlin today?",
                r"berlin",
                tool="get_weather",
                output={"city": "Berlin", "temperature_c": 2, "condition": "snow"},
                after=r"\btwo\b|snow|cold",
            ),
        ),
    ),
    Conversation(
        "dev-timer",
        "tool",
        (
            Turn(
                "Start a five minute timer please.",
                r"\b5\b|five",
                tool="set_timer",
                output={"ok": True, "minutes": 5},
                after=r"\bfive\b|timer|set",
            ),
        ),
    ),
    _one("dev-quibble", "refusal", "What is the population of the town of Quibblestead in Norway?", REFUSE),
    _one("dev-my-car", "refusal", "What color is my car?", REFUSE),
    _one("dev-prize", "refusal", "Who won the 2021 world championship of underwater chess?", REFUSE),
)
"""Another set of the same kinds, to tune the thinker's prompt and settings on: what is
chosen by looking at it leaves :data:`CONVERSATIONS` a fair measure."""

DIALOGUE = Conversation(
    "dialogue",
    "dialogue",
    (
        Turn("Hi there. What can you help me with?", r"\w+ \w+ \w+"),
        Turn("What is the capital of Portugal?", r"lisbon"),
        Turn("What's the weather like there right now?", r"lisbon", tool="get_weather",
             output={"city": "Lisbon", "temperature_c": 21, "condition": "sunny"}, after=r"twenty one|sunny"),
        Turn("Nice. Should I bring an umbrella?", r"\bno\b|not|sunny|don't|do not"),
        Turn("How many minutes are there in two hours?", r"one hundred (and )?twenty"),
        Turn("Who wrote Don Quixote?", r"cervantes"),
        Turn("And what language did he write it in?", r"spanish"),
        Turn("Set a timer for five minutes.", r"\b5\b|five", tool="set_timer",
             output={"ok": True, "minutes": 5}, after=r"five|timer|set"),
        Turn("Stop.", None),
        Turn("Thanks, that's all for now.", r"\w+"),
    ),
)  # fmt: skip
"""A ten-turn conversation, recorded whole for the docs (``bench_conversation.py --dialogue``)."""

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "type": "function",
        "name": "set_timer",
        "description": "Start a countdown timer.",
        "parameters": {"type": "object", "properties": {"minutes": {"type": "number"}}, "required": ["minutes"]},
    },
)
"""The function tools every benchmark session offers (the Realtime shape)."""

CONDITIONS = ("babble10", "tel", "low")
"""What every third held-out conversation is heard through."""


def passes(turn: Turn, answer: str) -> bool:
    """Whether ``answer`` (the reply's words) holds what ``turn`` expects."""
    if turn.expect is None:
        return not answer.strip()
    words = " ".join(normalize_words(answer))
    return bool(re.search(turn.expect, words) or re.search(turn.expect, answer.lower()))


def call_passes(turn: Turn, name: str, arguments: str) -> bool:
    """Whether a function call is the one ``turn`` asks for."""
    if turn.tool is None or name != turn.tool:
        return False
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return False
    flat = " ".join(str(v) for v in args.values()) if isinstance(args, dict) else str(args)
    return bool(turn.expect and re.search(turn.expect, flat.lower()))


@dataclass(frozen=True, slots=True)
class Spoken:
    """A conversation as one voice says it: 24 kHz PCM16 per turn."""

    conversation: Conversation
    voice: str
    split: str
    condition: str
    turns: tuple[np.ndarray, ...]


async def _say(talker: HibariTalker, text: str, voice: str, n: int) -> np.ndarray:
    chunks = [c.audio.data async for c in talker.speak(SpeechRequest(f"question-{n}", text, voice=voice))]
    pcm = np.concatenate(chunks).astype(np.int16)
    start, end = speech_bounds(pcm, RATE)
    lead = int(LEAD_S * RATE)
    return set_level(pcm[max(0, start - lead) : end + lead], TARGET_DBFS, RATE)


def _heard(pcm: np.ndarray, condition: str, seed: int) -> np.ndarray:
    if condition == "tel":
        return telephone(pcm, RATE)
    if condition == "low":
        return set_level(pcm, -35.0, RATE)
    if condition == "babble10":
        return mix(pcm, noise_track(_root(), "babble_heldout", RATE), RATE, snr_db=10.0, seed=seed)
    return pcm


def _root() -> Any:
    from lab.voices import DEFAULT_ROOT

    return DEFAULT_ROOT


async def _spoken(split: str, only: tuple[str, ...] | None) -> list[Spoken]:
    talker = HibariTalker(kokoro=KokoroTalker(fallback=EspeakTalker()))
    voices = VOICES[split]
    out = []
    n = 0
    try:
        for i, conv in enumerate(CONVERSATIONS):
            if only is not None and conv.name not in only:
                continue
            voice = voices[i % len(voices)]
            condition = CONDITIONS[(i // 3) % len(CONDITIONS)] if split == "heldout" and i % 3 == 2 else "clean"
            turns = []
            for turn in conv.turns:
                n += 1
                turns.append(_heard(await _say(talker, turn.said, voice, n), condition, seed=i))
            out.append(Spoken(conv, voice, split, condition, tuple(turns)))
    finally:
        await talker.aclose()
    return out


async def _one_voice(conv: Conversation, voice: str, split: str) -> Spoken:
    talker = HibariTalker(kokoro=KokoroTalker(fallback=EspeakTalker()))
    try:
        turns = [await _say(talker, turn.said, voice, n) for n, turn in enumerate(conv.turns)]
    finally:
        await talker.aclose()
    return Spoken(conv, voice, split, "clean", tuple(turns))


def spoken_by(conv: Conversation, voice: str) -> Spoken:
    """One conversation said by one voice of either part (synthesised now)."""
    split = next(s for s, voices in VOICES.items() if voice in voices)
    return asyncio.run(_one_voice(conv, voice, split))


def spoken(split: str, only: tuple[str, ...] | None = None) -> list[Spoken]:
    """Every conversation (or those named in ``only``) said in ``split``'s voices (synthesised now)."""
    return asyncio.run(_spoken(split, only))
