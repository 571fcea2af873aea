"""The default voice: hibari (Kokoro's af_heart distilled) from its pinned package, sentence
by sentence, its padding cut, heard by Whisper, cancellable, never on the network; Kokoro for
the other voices and eSpeak NG beyond capacity."""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from duplex.pipeline.stages import ReplyStages
from duplex.pipeline.stream import ChunkEvent
from duplex.pipeline.talker import SpeechRequest, TalkerChunk
from duplex.pipeline.talkers import hibari, router
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.hibari import HibariModel, HibariRuntime, HibariTalker
from duplex.pipeline.talkers.kokoro import KokoroRuntime, KokoroTalker
from duplex.pipeline.vocoders.pcm import PcmVocoder
from duplex.pipeline.weights import WeightsError
from lab.voices import resample, wer, write_wav

from .test_browser import ARTIFACTS
from .util import gate, until

SENTENCES = [
    "Sure, I can help with that.",
    "The meeting was moved to Thursday afternoon at three.",
    "Please remember to buy milk, eggs and bread on your way home.",
    "It looks like it will rain tomorrow, so take an umbrella.",
    "Your package should arrive in two or three business days.",
]


@pytest.fixture(scope="module")
def runtime() -> HibariRuntime:
    rt = HibariRuntime()
    rt.warm()
    return rt


@pytest.fixture
def talker(runtime: HibariRuntime, espeak_runtime) -> HibariTalker:
    return HibariTalker(runtime, EspeakTalker(espeak_runtime))


REPLY_IDS = itertools.count()


async def speak(talker: HibariTalker, text: str, voice: str | None = None, rid: str | None = None) -> list[TalkerChunk]:
    """One reply of one text segment."""
    request = SpeechRequest(rid or f"h{next(REPLY_IDS)}", text, voice=voice)
    return [c async for c in talker.speak(request)]


def pcm_of(chunks: list[TalkerChunk]) -> np.ndarray:
    return np.concatenate([c.audio.data for c in chunks])


async def test_sentences_stream_one_ahead_with_the_padding_cut(talker: HibariTalker, runtime: HibariRuntime):
    made = runtime.pool.made
    first_seen_after = None
    chunks = []
    async for chunk in talker.speak(SpeechRequest("first", " ".join(SENTENCES[1:4]))):
        if first_seen_after is None:
            first_seen_after = runtime.pool.made - made
        chunks.append(chunk)
    # The first words are handed on as soon as they are made (the rest is made meanwhile):
    # three sentences, the first made in two.
    assert first_seen_after in (1, 2) and runtime.pool.made - made == 4
    pcm = pcm_of(chunks)
    assert chunks[0].audio.rate == 24000 and chunks[0].audio.owner == "hibari" and pcm.dtype == np.int16
    assert all(c.audio.data.size <= hibari.CHUNK for c in chunks)
    assert np.abs(pcm[: 24000 // 10]).max() > 1000, "speech within 100 ms: the model's leading padding is cut"
    short = "It is raining today."  # four words: made in one piece
    raw = runtime.model.make(runtime.model.phonemize(short), 1.0)
    alone = pcm_of(await speak(talker, short))
    assert raw.size - alone.size > 24000 * 0.4, "the model pads each call with ~0.8 s: cut to natural pauses"
    tail = np.flatnonzero(np.abs(pcm) > 300)[-1]
    assert pcm.size - tail < 24000 * 0.4, "the trailing padding is cut to a sentence's pause"


@pytest.mark.parametrize("said", ["1" * 37, "$" + "9" * 40, "9" * 40 + "th", "-" + "9" * 40 + "%", "3." + "1" * 60])
async def test_a_number_too_long_for_words_is_said_digit_by_digit(talker: HibariTalker, said: str):
    """37 digits once failed the whole reply (IndexError in hibari's number words)."""
    chunks = await speak(talker, f"The answer is {said} exactly.")
    assert {c.audio.owner for c in chunks} == {"hibari"}
    assert pcm_of(chunks).size > 24000 * 37 * 0.2  # every digit said, not dropped


def test_the_g2p_never_refuses_text(runtime: HibariRuntime):
    """Random text of digits, signs, letters and symbols (seeded): phonemes, never an error."""
    rng = np.random.default_rng(7)
    alphabet = list("0123456789" * 4 + ",.-+$%e x/:'") + ["th", "st", "\u00e9", "\u20ac", "\U0001f600", "\u00bd"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 80))))
        assert isinstance(runtime.model.phonemize(text), str), text


def test_a_replys_first_piece_is_its_first_words_alone():
    text = "The meeting was moved to Thursday afternoon. Bring the notes."
    pieces = hibari.head_first([(0, "The meeting was moved to Thursday afternoon. "), (45, "Bring the notes.")])
    assert [p for _, p in pieces] == ["The meeting was ", "moved to Thursday afternoon. ", "Bring the notes."]
    assert all(text[o : o + len(p)] == p for o, p in pieces), "offsets still point into the text"
    assert hibari.head_first([(0, "Sure, I can.")]) == [(0, "Sure, I can.")], "four words or fewer: one piece"


async def test_whisper_hears_the_voice(talker: HibariTalker, recognizer):
    errors = words = 0
    out = Path(ARTIFACTS) / "voices"  # to listen to (CI keeps artifacts/)
    out.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(SENTENCES):
        pcm = pcm_of(await speak(talker, text))
        if i == 0:
            write_wav(out / "hibari_heart.wav", pcm, 24000)
        heard = recognizer.transcribe_blocking(resample(pcm, 24000, 16000), 16000)
        e, n = wer(text, heard)
        errors, words = errors + e, words + n
    assert errors / words <= 0.05, errors / words


async def test_word_marks_follow_the_text_and_the_audio(talker: HibariTalker):
    text = " ".join(SENTENCES[2:4])
    chunks = await speak(talker, text)
    marks = [m for c in chunks for m in c.words]
    assert [text[m.start : m.end] for m in marks] == text.split()
    positions = [m.position for m in marks]
    assert positions == sorted(positions) and positions[-1] < pcm_of(chunks).size
    at = 0
    for c in chunks:  # each mark rides on the chunk its position falls in
        assert all(at <= m.position < at + c.audio.data.size for m in c.words)
        at += c.audio.data.size


async def test_cancel_skips_the_sentences_not_yet_heard(talker: HibariTalker, runtime: HibariRuntime):
    stopped, made = runtime.pool.stopped, runtime.pool.made
    gen = talker.speak(SpeechRequest("cancelled", " ".join(SENTENCES * 3)))
    await anext(gen)  # the first sentence is out; the second is queued or being made
    await gen.aclose()
    assert await asyncio.to_thread(runtime.pool.wait_idle, 30)
    assert runtime.pool.made + runtime.pool.stopped - made - stopped == 2, "one made and handed on, one ahead"
    assert runtime.pool.made - made <= 2 and runtime.making == 0


async def test_voice_names(talker: HibariTalker, runtime: HibariRuntime, espeak_runtime):
    for name in ("alloy", "heart", "cedar", "marin", "espeak:en-us+f3"):
        talker.check_voice(name)
    # Without Kokoro, OpenAI's other names speak with this voice; Kokoro's own names do not exist.
    assert (await speak(talker, "Hello.", "cedar"))[0].audio.owner == "hibari"
    for name in ("af_bella", "nobody", "fenrir", "emma", "fable", "kore"):  # hibari's others would download
        with pytest.raises(ValueError, match="unknown voice"):
            talker.check_voice(name)
    assert (await speak(talker, "Hello there.", "espeak:en-us"))[0].audio.owner == "espeak"


@pytest.fixture(scope="module")
def kokoro_runtime() -> KokoroRuntime:
    rt = KokoroRuntime(capacity=1)
    rt.warm()
    return rt


async def test_kokoro_speaks_its_voices_and_hibari_beyond_its_capacity(
    runtime, kokoro_runtime, espeak_runtime, caplog, monkeypatch
):
    espeak = EspeakTalker(espeak_runtime)
    talker = HibariTalker(runtime, espeak, kokoro=KokoroTalker(kokoro_runtime, espeak))
    assert "af_bella" in talker.voices() and "cedar" in talker.names()
    assert (await speak(talker, "Hello.", "af_bella"))[0].audio.owner == "kokoro"
    assert (await speak(talker, "Hello.", "alloy"))[0].audio.owner == "hibari"
    hold = gate(kokoro_runtime.pool, monkeypatch)
    busy = talker.speak(SpeechRequest("busy", " ".join(SENTENCES), voice="cedar"))
    waiting = asyncio.ensure_future(anext(busy))
    await until(lambda: kokoro_runtime.making == 1)  # Kokoro is making a segment: its capacity
    with caplog.at_level(logging.INFO, logger="duplex.voice"):
        assert (await speak(talker, "And another thing.", "marin", rid="other"))[0].audio.owner == "hibari"
    assert talker.overflows == 1 and "speaks with hibari" in caplog.text
    hold.set()
    assert (await waiting).audio.owner == "kokoro"
    # A reply keeps its voice across its text segments, whatever else is running then.
    await busy.aclose()
    assert (await speak(talker, "And on.", "marin", rid="other"))[0].audio.owner == "hibari"


async def test_beyond_capacity_a_reply_speaks_with_espeak_and_says_so(runtime, espeak_runtime, caplog, monkeypatch):
    talker = HibariTalker(runtime, EspeakTalker(espeak_runtime))
    monkeypatch.setattr(runtime, "capacity", 1)
    hold = gate(runtime.pool, monkeypatch)
    first = talker.speak(SpeechRequest("a", " ".join(SENTENCES)))
    waiting = asyncio.ensure_future(anext(first))  # its first sentence is being made
    await until(lambda: runtime.making == 1)
    with caplog.at_level(logging.WARNING, logger="duplex.voice"):
        second = await speak(talker, "And another thing.", "ballad")
    assert second[0].audio.owner == "espeak" and talker.fallbacks == 1
    assert "speaks with eSpeak NG" in caplog.text
    hold.set()
    assert (await waiting).audio.owner == "hibari"
    await first.aclose()
    assert (await speak(talker, "Now there is room."))[0].audio.owner == "hibari"


async def test_a_reply_nobody_reads_holds_no_capacity(runtime, espeak_runtime, monkeypatch):
    talker = HibariTalker(runtime, EspeakTalker(espeak_runtime))
    monkeypatch.setattr(runtime, "capacity", 1)
    stalled = talker.speak(SpeechRequest("stalled", " ".join(SENTENCES * 3)))
    await anext(stalled)  # played a little, then the client stopped reading
    assert await asyncio.to_thread(runtime.pool.wait_idle, 30)  # the one sentence ahead is made
    await until(lambda: runtime.making == 0)
    assert (await speak(talker, "Another session speaks.", rid="other"))[0].audio.owner == "hibari"
    assert talker.fallbacks == 0
    await stalled.aclose()
    assert runtime.making == 0


async def test_a_reply_keeps_its_voice_however_many_replies_begin_and_end_meanwhile(
    runtime, espeak_runtime, monkeypatch
):
    # Issue 42 #1: the reply's voice was forgotten once REPLIES_KEPT other replies had
    # spoken, and its next segment, routed afresh with the voice full, came at eSpeak's rate.
    talker = HibariTalker(runtime, EspeakTalker(espeak_runtime))
    monkeypatch.setattr(router, "REPLIES_KEPT", 4)
    assert (await speak(talker, SENTENCES[0], rid="long"))[0].audio.owner == "hibari"
    for n in range(8):  # other replies, each through the stages that end it
        stages = ReplyStages(talker, PcmVocoder(), SpeechRequest(f"other{n}", "Hi."), epoch=1, output_rate=hibari.RATE)

        async def sink(event: ChunkEvent) -> None:
            pass

        await stages.run(sink)
    monkeypatch.setattr(runtime, "capacity", 0)  # full when the long reply's next segment comes
    later = await speak(talker, SENTENCES[1], rid="long")
    assert {(c.audio.owner, c.audio.rate) for c in later} == {("hibari", hibari.RATE)}
    talker.release("long")
    assert (await speak(talker, SENTENCES[2], rid="long"))[0].audio.owner == "espeak"  # a new reply


def test_every_file_is_checked_against_its_pin(monkeypatch):
    files = hibari.FILES
    for i in (0, 2):  # the model, and the G2P's net for unknown words
        changed = tuple(replace(f, sha256="0" * 64) if j == i else f for j, f in enumerate(files))
        monkeypatch.setattr(hibari, "FILES", changed)
        with pytest.raises(WeightsError, match=f"hibari-tts==0.2.1: {files[i].path} has sha256"):
            HibariModel()


NO_NETWORK = textwrap.dedent(
    """
    import asyncio, os, sys
    events = []
    def audit(event, args):
        if event.startswith(("socket.connect", "socket.getaddrinfo", "urllib.Request", "http.client")):
            events.append(event)
    sys.addaudithook(audit)
    from duplex.pipeline.talker import SpeechRequest
    from duplex.pipeline.talkers.hibari import HibariTalker

    async def main():
        talker = HibariTalker()
        for name in ("fenrir", "emma", "fable", "kore"):
            try:
                talker.check_voice(name)
            except ValueError:
                pass
            else:
                raise SystemExit(f"{name} accepted")
        for voice in ("alloy", "heart", "cedar", None):
            async for _ in talker.speak(SpeechRequest(str(voice), "Hello there, how are you?", voice=voice)):
                pass
        await talker.aclose()
    asyncio.run(main())
    print("events", events, "cache", os.listdir(os.environ["HIBARI_HOME"]))
    """
)


def test_the_voice_never_opens_a_network_connection(tmp_path):
    # A fresh interpreter watches every socket and URL opened while the voice loads and speaks;
    # hibari's download cache (HIBARI_HOME) must stay empty.
    env = {"HIBARI_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "events [] cache []" in done.stdout, done.stdout


async def test_the_server_speaks_hibari_by_default_with_kokoro_for_the_other_voices(monkeypatch, caplog):
    from duplex.app.cli.backends import BackendChoice, build
    from duplex.pipeline.talkers import kokoro_model

    backends = await build(BackendChoice(asr="none", turn_model="none"))
    try:
        talker = backends.talker
        assert isinstance(talker, HibariTalker) and talker.runtime.capacity == hibari.CAPACITY
        assert isinstance(talker.kokoro, KokoroTalker) and talker.fallback is talker.kokoro.fallback
    finally:
        await backends.aclose()
    parts = kokoro_model.MODEL_PARTS
    monkeypatch.setattr(kokoro_model, "MODEL_PARTS", (replace(parts[0], sha256="0" * 64), *parts[1:]))
    with caplog.at_level(logging.WARNING):
        backends = await build(BackendChoice(asr="none", turn_model="none"))
    try:
        assert isinstance(backends.talker, HibariTalker) and backends.talker.kokoro is None
        assert "its voices speak with hibari" in caplog.text
    finally:
        await backends.aclose()
    monkeypatch.undo()
    monkeypatch.setattr(hibari, "FILES", (replace(hibari.FILES[0], sha256="0" * 64), *hibari.FILES[1:]))
    backends = await build(BackendChoice(asr="none", turn_model="none"))
    try:
        assert isinstance(backends.talker, KokoroTalker), "without hibari's files: Kokoro"
    finally:
        await backends.aclose()
