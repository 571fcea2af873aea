"""The end-of-turn fit's parts: the prosody it measures, the pauses it records (real
Silero, Whisper and Smart Turn on a real paused sentence of the corpus), and the scoring
that replays them through the real ``semantic_vad`` policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from duplex.app.core.listening.semantic import EAGERNESS, Eagerness
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.offline import Answers
from lab.pauses import ASKS_MS, RATE, Heard, Pause, ends_at, record, score
from lab.prosody import prosody
from lab.voices import load_corpus

MEDIUM = EAGERNESS["medium"]


def glide(start_hz: float, end_hz: float, seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """A voiced glide (a pulse-rich tone) from one pitch to another, PCM16."""
    f = np.linspace(start_hz, end_hz, int(seconds * rate))
    phase = 2 * np.pi * np.cumsum(f) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 6))
    return (x / np.abs(x).max() * 8000).astype(np.int16)


def test_prosody_hears_a_fall_a_rise_and_nothing_in_silence():
    fall, rise = prosody(glide(220, 140), 16000), prosody(glide(140, 220), 16000)
    assert fall is not None and rise is not None
    assert fall.slope_st_s < -3 and fall.final_st < -2, fall
    assert rise.slope_st_s > 3 and rise.final_st > 2, rise
    assert prosody(np.zeros(16000, np.int16), 16000) is None
    assert prosody(glide(180, 180, rate=24000), 24000) is not None, "resampled from another rate"


def ms(n: int) -> int:
    return ms_to_samples(n, RATE)


def heard(text: str, p: float, room_ms: int) -> Heard:
    """A paused sentence: a pause of ``room_ms`` inside it, then its end."""
    resumes = ms(2000) + ms(room_ms)
    h = Heard(clip=None, condition="clean", true_end=ms(4000), resumes=resumes)  # type: ignore[arg-type]
    probabilities = dict.fromkeys(ASKS_MS, p)
    h.pauses = [
        Pause(ms(2000), ms(room_ms), text, probabilities, None, mid=True),
        Pause(ms(4070), None, text + " on Sunday.", dict.fromkeys(ASKS_MS, 0.99), None),
    ]
    return h


def test_scoring_replays_the_real_policy_and_the_slack_lengthens_every_pause():
    sure = heard("We should leave it.", 0.99, 300)
    end, where = ends_at(MEDIUM, sure) or (0, None)
    assert where is sure.pauses[0] and end == ms(2000) + ms(MEDIUM.quick_ms), "sure and whole: taken at quick_ms"
    assert score(MEDIUM, [sure]).takeovers == 1
    hangs = heard("We should leave it at", 0.99, 300)
    assert score(MEDIUM, [hangs]).takeovers == 0, "the words hang: it waits past the pause"
    short = heard("We should leave it.", 0.99, MEDIUM.quick_ms - 20)
    assert score(MEDIUM, [short]).takeovers == 0, "the speech went on first"
    assert score(MEDIUM, [short], slack_ms=40).takeovers == 1, "...but not by a margin"
    unsure = heard("We should leave it.", 0.1, MEDIUM.doubt_ms - 50)
    assert score(MEDIUM, [unsure]).takeovers == 0, "the model doubts it: doubt_ms outlasts the pause"
    assert score(replace(MEDIUM, doubt_ms=MEDIUM.doubt_ms - 100), [unsure]).takeovers == 1, "the eagerness decides"


def test_an_eagerness_with_its_waits_out_of_order_is_refused():
    with pytest.raises(ValueError, match="out of order"):
        Eagerness(ask_ms=300, again_ms=300, quick_ms=250, sure=0.9, likely=0.3, settle_ms=400, doubt_ms=600, max_ms=800)


def test_recording_a_real_paused_sentence_finds_its_pause_and_asks_the_model_at_each_silence():
    clip = next(c for c in load_corpus().paused if c.voice == "af_heart")
    h = record(SileroVad(), Answers("tiny.en"), clip, "clean", 0)
    [mid] = [p for p in h.pauses if p.mid]
    assert h.resumes is not None and mid.room == h.resumes - mid.speech_end
    assert mid.speech_end < h.resumes and h.pauses[-1].room is None, "the sentence's end did not go on"
    assert set(mid.p) == set(ASKS_MS) and all(0.0 <= v <= 1.0 for v in mid.p.values())
    assert mid.text.strip() and mid.prosody is not None
    assert abs(h.pauses[-1].speech_end - h.true_end) < ms(300), "Silero's end is near the corpus's mark"
