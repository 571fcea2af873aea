"""The natural-voice corpus (tests/voices) is whole and its held-out part is honest: split by
voice, every family and kind in it, no sentence or voice shared with the part tuned on."""

from __future__ import annotations

import json
import wave
from collections import Counter

import numpy as np
import pytest

from lab.voices import DEFAULT_ROOT, KINDS, SPLITS, Corpus, load_corpus, speech_level_dbfs

MANIFEST = json.loads((DEFAULT_ROOT / "manifest.json").read_text())
CLIPS = MANIFEST["clips"]
SPEECH = [e for e in CLIPS if e["kind"] != "noise"]


def voices(entry: dict[str, object]) -> set[str]:
    """The voices in a clip (a noise bed names several, joined with "+")."""
    return set(str(entry["voice"]).split("+"))


def test_every_file_is_there_and_matches_its_entry():
    files = [e["file"] for e in CLIPS]
    assert len(files) == len(set(files))
    assert {p.name for p in DEFAULT_ROOT.glob("*.wav")} == set(files), "a WAV without an entry, or the reverse"
    for e in CLIPS:
        with wave.open(str(DEFAULT_ROOT / e["file"]), "rb") as w:
            assert (w.getnchannels(), w.getsampwidth()) == (1, 2), e["file"]
            assert w.getframerate() == e["rate"] == MANIFEST["rate"] == 16000, e["file"]
            assert w.getnframes() == e["samples"], e["file"]
        assert e["kind"] in KINDS
        assert 0 <= e["speech_start"] < e["speech_end"] <= e["samples"], e["file"]
        assert e["license"] and e["source"] and e["family"], e["file"]
        assert (e["text"] is None) == (e["kind"] == "noise"), e["file"]


def test_the_corpus_stays_small():
    assert sum((DEFAULT_ROOT / e["file"]).stat().st_size for e in CLIPS) < 26e6


def test_every_clip_has_a_split_and_no_voice_is_in_both():
    assert {e["split"] for e in CLIPS} == set(SPLITS)
    parts = {s: set().union(*(voices(e) for e in CLIPS if e["split"] == s)) for s in SPLITS}
    assert not parts["tune"] & parts["heldout"]


def test_what_the_project_tuned_on_stays_in_tune():
    tuned = {"kokoro", "piper", "synth"}
    assert all(e["split"] == "tune" for e in CLIPS if e["source"] in tuned)
    for name in ("turn_05_am_michael", "bc_okay_am_michael", "paused_03_bm_george", "human_allison_vm-nobodyavail",
                 "babble", "music"):  # fmt: skip
        assert next(e for e in CLIPS if e["file"] == f"{name}.wav")["split"] == "tune", name
    first_humans = {"allison", "librivox_reader", "cmu_goforward", "cmu_cards", "jfk"}
    assert all(e["split"] == "tune" for e in CLIPS if voices(e) & first_humans)


def test_the_held_out_part_has_every_family_and_kind():
    held = [e for e in SPEECH if e["split"] == "heldout"]
    families = {e["family"] for e in held}
    assert len(families) >= 4, families
    assert {"diphone", "clustergen", "hts", "neural", "human"} <= families
    kinds = Counter(e["kind"] for e in held)
    assert set(kinds) == set(KINDS) - {"noise"} and min(kinds.values()) >= 10, kinds
    assert [e["kind"] for e in CLIPS if e["split"] == "heldout"].count("noise") >= 2, "its own noise beds"
    assert {e["kind"] for e in held if e["family"] == "human"} >= {"turn", "paused"}


def test_no_sentence_is_said_twice_nor_in_both_parts():
    sentences = [e for e in SPEECH if e["kind"] != "backchannel"]
    said = Counter(str(e["text"]).lower() for e in sentences)
    assert max(said.values()) == 1, [t for t, n in said.items() if n > 1]
    parts = {s: {str(e["text"]).lower() for e in sentences if e["split"] == s} for s in SPLITS}
    assert not parts["tune"] & parts["heldout"]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


@pytest.mark.parametrize("entry", [e for e in CLIPS if e["kind"] == "paused"], ids=lambda e: e["file"])
def test_a_paused_clip_pauses_250_to_450_ms_in_quiet(entry, corpus):
    start, end = entry["pause_start"], entry["pause_end"]
    assert 0.25 <= (end - start) / entry["rate"] <= 0.45
    assert entry["speech_start"] < start < end < entry["speech_end"]
    clip = corpus[entry["file"]]
    gap = clip.pcm[start:end].astype(np.float64) / 32768.0
    gap_db = 10 * np.log10(np.mean(gap**2) + 1e-12)
    assert gap_db < speech_level_dbfs(clip.pcm) - 20, "the pause is digital silence or room tone"


def test_corpus_split_returns_each_part(corpus):
    tune, held = corpus.split("tune"), corpus.split("heldout")
    assert len(tune) + len(held) == len(corpus) == len(CLIPS)
    assert {c.split for c in tune} == {"tune"} and {c.split for c in held} == {"heldout"}
    assert corpus["turn_05_am_michael"].family == "neural"
    with pytest.raises(ValueError):
        corpus.split("test")
