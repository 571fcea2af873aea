"""The enhancer before recognition: Hush takes babble out of a voice, leaves clean speech
alone, and Whisper hears what it leaves. Real weights (assets/models/hush, sha256
checked), real babble from the corpus."""

from __future__ import annotations

import numpy as np
import pytest

from duplex.pipeline.enhancer import CHUNK, FFT, FILES, HOP, RATE, Hush, HushStream, noisy
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.weights import WeightsError
from lab.voices import load_corpus, mix, resample, set_level

CORPUS = load_corpus()


def voice() -> np.ndarray:
    """A sentence (the tune part's first turn) at -26 dBFS with silence around it, 16 kHz float."""
    clip = next(c for c in CORPUS.clips if c.kind == "turn" and c.split == "tune")
    pcm = set_level(resample(clip.pcm, clip.rate, RATE), -26.0, RATE)
    pad = np.zeros(RATE // 2, np.int16)
    return np.concatenate([pad, pcm, pad]).astype(np.float32) / 32768


def in_babble(speech: np.ndarray, snr_db: float, track: str = "babble") -> np.ndarray:
    bed = resample(CORPUS[track].pcm, CORPUS[track].rate, RATE)
    pcm = np.round(speech * 32768).astype(np.int16)
    return mix(pcm, bed, RATE, snr_db=snr_db, seed=1).astype(np.float32) / 32768


def db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-12))


@pytest.fixture(scope="module")
def hush() -> Hush:
    h = Hush()
    h.load()
    return h


def test_babble_under_a_voice_is_taken_out_and_the_voice_kept_in_place(hush):
    speech = voice()
    noisy_mix = in_babble(speech, 5.0)
    out = hush.clean(noisy_mix)
    assert out.shape == noisy_mix.shape
    alone = slice(RATE // 5, RATE // 2)  # babble alone before the voice (after the model's first 0.2 s)
    assert db(out[alone]) < db(noisy_mix[alone]) - 5.0, "the babble alone is 5 dB quieter"
    before, after = db(noisy_mix - speech), db(out - speech)
    assert after < before - 2.0, f"what is not the voice is not 2 dB less: {before:.1f} -> {after:.1f} dB"
    # Time-aligned: the cleaned audio matches the voice best with no shift (the STFT's delay is taken off).
    lags = range(-80, 81, 16)
    match = [float(np.dot(np.roll(out, k), speech)) for k in lags]
    assert list(lags)[int(np.argmax(match))] == 0


def test_a_stream_cleans_as_it_comes_and_keeps_the_voice_in_place(hush):
    """A live microphone, 20 ms at a time or in any pieces: the same output, close to the whole
    utterance's, the babble taken out, the voice where it was, and at most a chunk late."""
    speech = voice()
    noisy_mix = in_babble(speech, 5.0, track="babble_heldout")
    stream = HushStream(hush)
    pieces = [stream.process(noisy_mix[i : i + 320]) for i in range(0, noisy_mix.size, 320)]
    for n, got in zip(range(320, noisy_mix.size, 320), np.cumsum([p.size for p in pieces]), strict=False):
        assert n - got <= (FFT - HOP) + CHUNK * HOP, "what is fed comes back within a chunk and a frame"
    out = np.concatenate(pieces)
    rng, odd, at = np.random.default_rng(0), HushStream(hush), 0
    uneven = []
    while at < noisy_mix.size:
        k = int(rng.integers(1, 1000))
        uneven.append(odd.process(noisy_mix[at : at + k]))
        at += k
    assert np.array_equal(np.concatenate(uneven), out), "how the input is cut changes nothing"
    whole = hush.clean(noisy_mix)[: out.size]
    assert np.sqrt(np.mean((out - whole) ** 2) / np.mean(whole**2)) < 0.15, "close to the whole utterance's"
    alone = slice(RATE // 5, RATE // 2)
    assert db(out[alone]) < db(noisy_mix[alone]) - 5.0, "the babble alone is 5 dB quieter"
    lags = range(-80, 81, 16)
    match = [float(np.dot(np.roll(out, k), speech[: out.size])) for k in lags]
    assert list(lags)[int(np.argmax(match))] == 0


def test_part_of_the_original_is_kept(hush):
    """Whisper knows noise, not the artefacts of its removal: at most ~9 dB is taken away."""
    bed = in_babble(np.zeros(RATE * 2, np.float32), 0.0)  # babble alone
    assert db(hush.clean(bed)) > db(bed) + 20 * np.log10(hush.keep) - 1.5


def test_only_audio_with_a_bed_under_it_is_cleaned(hush):
    clean = voice()
    assert not noisy(clean), "speech with silence around its words"
    assert hush.enhance(clean) is clean, "passed as it came"
    for snr in (10.0, 5.0):
        assert noisy(in_babble(clean, snr))
    assert not noisy(clean[: RATE // 10]), "too short to judge"
    assert not noisy(np.zeros(RATE, np.float32)), "digital silence is even, and no bed"


def test_the_recogniser_decodes_what_the_enhancer_leaves(hush):
    calls: list[int] = []

    class Seen(Hush):
        def enhance(self, audio: np.ndarray) -> np.ndarray:
            calls.append(audio.size)
            return super().enhance(audio)

    rec = WhisperRecognizer("tiny.en", workers=1, enhancer=Seen())
    text = rec.transcribe_blocking(np.round(in_babble(voice(), 10.0) * 32768).astype(np.int16), RATE)
    assert calls, "the audio went through the enhancer"
    assert text, "and was heard"


def test_changed_weights_are_refused(tmp_path, monkeypatch):
    f = FILES["enc"]
    copy = tmp_path / "enc.onnx"
    copy.write_bytes(f.locate().read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(type(f), "locate", lambda self: copy)
    with pytest.raises(WeightsError, match="sha256"):
        Hush().load()
