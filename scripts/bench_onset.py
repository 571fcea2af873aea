"""Where speech began: the listener's onset against each turn's true onset, in process.

Barge-in truncates a reply at what had played at the onset, so the onset's error is the
truncation's. Every turn of each part of the natural-voice set, a second of silence
either side, fed in 20 ms frames through the real listener (Silero), alone and over a
reply (where an onset must also reach the user's level), under five conditions (the
noise beds, each part's own, run through the second before the speech as a room's
would: mixed onto the clip alone, the bed began 150 ms before the words and the
windows before it were digital silence). The
baseline, measured in the same run, is the onset where Silero became sure of the speech
(before :mod:`duplex.app.core.listening.onset` took it back to where the speech rose).

    python scripts/bench_onset.py [--split heldout]
"""

from __future__ import annotations

import argparse
from functools import cache

import numpy as np

from duplex.app.core.listening import Listener, Started
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.voice_activity import VadWindow
from lab.tables import header
from lab.voices import TARGET_DBFS, Clip, load_corpus, mix, resample, set_level, variant

RATE = 24000
CONDITIONS = ("clean", "tel", "low", "babble10", "babble20", "music10")
BEDS = {
    "tune": {"babble": "babble", "music": "music"},
    "heldout": {"babble": "babble_heldout", "music": "music_heldout"},
}
"""Each part's noise beds (a held-out voice is heard in the held-out beds)."""


@cache
def track(name: str) -> np.ndarray:
    """A noise bed of the corpus at the bench's rate."""
    bed = load_corpus()[name]
    return resample(bed.pcm, bed.rate, RATE)


def decided(w: VadWindow) -> int:
    """The baseline: the onset is the first window sure of speech."""
    return w.start


def onset_error_ms(model: SileroVad, clip: Clip, condition: str, *, replying: bool, rise: bool) -> float | None:
    pad = np.zeros(RATE, np.int16)
    if condition in ("babble20", "music10"):  # the bed runs through the second before the speech
        speech = np.concatenate([pad, set_level(resample(clip.pcm, clip.rate, RATE), TARGET_DBFS, RATE), pad])
        pcm = mix(speech, track(BEDS[clip.split][condition[:-2]]), RATE, snr_db=float(condition[-2:]))
    else:
        pcm = np.concatenate([pad, variant(clip, condition, RATE), pad])
    ears = Listener(model, RATE, TurnDetection(type="semantic_vad"))
    if not rise:
        ears.trace.began = decided  # type: ignore[method-assign]
    for i in range(0, pcm.size, RATE // 50):
        for s in ears.push(pcm[i : i + RATE // 50], replying=replying):
            if isinstance(s, Started):
                return (s.onset - pad.size - clip.speech_start * RATE // clip.rate) * 1000 / RATE
    return None


def summary(errors: list[float]) -> str:
    e = np.array(errors)
    within = float(np.mean(np.abs(e) <= 50))
    return f"{np.median(e):+.0f} / {np.percentile(np.abs(e), 90):.0f} / {within:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("tune", "heldout"), action="append", help="default: both")
    args = ap.parse_args()
    model, corpus = SileroVad(), load_corpus()
    print("onset minus true onset, ms: median / p90 of |error| / share within 50 ms\n")
    print(header("part", "condition", "over a reply", "decided (baseline)", "where it rose"))
    for split in args.split or ("tune", "heldout"):
        turns = [c for c in corpus.split(split) if c.kind == "turn"]
        for condition in CONDITIONS:
            for replying in (False, True):
                cells = []
                for rise in (False, True):
                    errors = [onset_error_ms(model, c, condition, replying=replying, rise=rise) for c in turns]
                    cells.append(summary([e for e in errors if e is not None]))
                over = "yes" if replying else "no"
                print(f"| {split} ({len(turns)}) | {condition} | {over} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
