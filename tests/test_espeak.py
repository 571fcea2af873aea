"""The built-in eSpeak NG talker: streams, stops on cancel, never blocks the loop."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from duplex.pipeline.talker import SpeechRequest
from duplex.pipeline.talkers.espeak import EspeakRuntime, EspeakTalker, _Job, split_for_speech

LONG_CLAUSE = " ".join(["this clause keeps going without any punctuation at all"] * 3)


async def _idle(runtime: EspeakRuntime) -> None:
    assert await asyncio.to_thread(runtime.wait_idle, 10)


async def test_streams_pcm_with_word_positions(talker: EspeakTalker):
    text = "Hello there, friend. How are you today?"
    chunks = [c async for c in talker.speak(SpeechRequest("r", text))]
    assert len(chunks) > 5, "audio must arrive in pieces, not as one buffer"
    pcm = np.concatenate([c.audio.data for c in chunks])
    assert talker.sample_rate == 22050
    assert 1.2 < pcm.size / 22050 < 5.0
    assert np.abs(pcm).max() > 3000
    words = [w for c in chunks for w in c.words]
    assert [text[w.start : w.end] for w in words] == ["Hello", "there", "friend", "How", "are", "you", "today"]
    positions = [w.position for w in words]
    assert positions == sorted(positions) and positions[-1] < pcm.size
    # Each word's audio really starts near its mark: there is sound just after it.
    for w in words[1:]:
        assert np.abs(pcm[w.position : w.position + 5512]).max() > 1000


async def test_clauses_are_synthesised_on_demand(talker: EspeakTalker, espeak_runtime: EspeakRuntime):
    """Backpressure: the next clause is not made until the consumer asks for it."""
    await _idle(espeak_runtime)
    before = espeak_runtime.jobs_started
    gen = talker.speak(SpeechRequest("r", "One. Two. Three. Four. Five."))
    first = await gen.__anext__()
    assert first.audio.length > 0
    await gen.aclose()
    await _idle(espeak_runtime)
    assert espeak_runtime.jobs_started - before == 1


async def test_cancel_stops_synthesis_mid_utterance(espeak_runtime: EspeakRuntime):
    """Hold the worker after its first chunk, cancel, and see eSpeak stop there."""
    loop = asyncio.get_running_loop()
    first_chunk = threading.Event()
    release = threading.Event()

    class HeldJob(_Job):
        def deliver(self, item: object) -> None:
            super().deliver(item)
            if not first_chunk.is_set():
                first_chunk.set()
                release.wait(10)

    await _idle(espeak_runtime)
    aborted = espeak_runtime.jobs_aborted
    job = HeldJob(loop, True, text=LONG_CLAUSE, voice="en-us", wpm=160)
    espeak_runtime.submit(job)
    assert await asyncio.to_thread(first_chunk.wait, 10)
    job.cancel()
    release.set()
    await _idle(espeak_runtime)
    full = sum(len(w) for w in LONG_CLAUSE.split()) * 0.06 * 22050  # ~60 ms a letter, roughly
    assert job.aborted and espeak_runtime.jobs_aborted == aborted + 1
    assert job.samples <= 2 * 1324 < full / 10


async def test_synthesis_runs_off_the_event_loop(espeak_runtime: EspeakRuntime):
    """While the worker is busy inside eSpeak, the event loop keeps running."""
    loop = asyncio.get_running_loop()
    inside = threading.Event()
    release = threading.Event()
    threads: set[int] = set()

    class HeldJob(_Job):
        def deliver(self, item: object) -> None:
            threads.add(threading.get_ident())
            super().deliver(item)
            if not inside.is_set():
                inside.set()
                release.wait(10)

    job = HeldJob(loop, True, text="Blocking test.", voice="en-us", wpm=160)
    espeak_runtime.submit(job)
    assert await asyncio.to_thread(inside.wait, 10)
    ticks = 0
    for _ in range(20):  # the loop turns while the synthesis thread is held
        await asyncio.sleep(0)
        ticks += 1
    release.set()
    await _idle(espeak_runtime)
    assert ticks == 20
    assert threading.get_ident() not in threads


async def test_unknown_voice_is_refused(talker: EspeakTalker):
    with pytest.raises(ValueError, match="unknown voice"):
        talker.check_voice("no-such-voice")
    with pytest.raises(ValueError):
        talker.check_voice("en-us+nosuchvariant")
    talker.check_voice("alloy")
    talker.check_voice("en-us+klatt2")
    talker.check_voice("fr")


async def test_speed_changes_duration(talker: EspeakTalker):
    text = "The quick brown fox jumps over the lazy dog."

    async def length(speed: float) -> int:
        return sum([c.audio.length async for c in talker.speak(SpeechRequest("r", text, speed=speed))])

    slow, fast = await length(0.75), await length(1.5)
    assert fast < 0.7 * slow


def test_split_for_speech_keeps_offsets():
    text = "First sentence. " + "a, " * 100 + "end!  Last one?"
    pieces = split_for_speech(text, max_chars=50)
    assert all(len(p) <= 50 for _, p in pieces)
    assert all(text[o : o + len(p)] == p for o, p in pieces)
    assert "".join(p for _, p in pieces).split() == text.split()


async def test_two_runtimes_share_the_one_library_safely(talker: EspeakTalker):
    """libespeak-ng is process state: a second runtime must not re-initialise it or
    leave the first one speaking with the wrong voice."""
    text = "The same words in two voices."

    async def length(t: EspeakTalker, voice: str) -> int:
        return sum([c.audio.length async for c in t.speak(SpeechRequest("r", text, voice=voice))])

    before = await length(talker, "en-us+klatt2")
    other = EspeakTalker(EspeakRuntime())
    french = await length(other, "fr")
    after = await length(talker, "en-us+klatt2")
    await other.aclose()
    assert abs(after - before) < 0.005 * before, "the first runtime spoke with the other's voice"
    assert abs(french - before) > 0.02 * before  # so a voice mix-up would show
