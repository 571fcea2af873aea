"""Fit ``semantic_vad``'s ``medium`` eagerness on the tune part, and score it on both.

Every pause of the natural-voice set is recorded once with its evidence
(:mod:`lab.pauses`: ~6 min on two cores, base's candidates as a quiet
server reads them), then every eagerness of a grid is scored on it in seconds. The
choice is made on the tune part alone: at most :data:`TOR` of its mid-sentence pauses
taken over as heard and :data:`SLACK_TOR` with every pause :data:`SLACK_MS` longer (a
fit that holds only at its edge does not hold: Silero's end of speech moves by tens of
ms), then
the lowest mean end of turn (median and tail both count), then fewer asks. The held-out
part is only reported.

First, how well each piece of evidence tells a finished turn from the
first part of a paused sentence whose words do not hang (the cases the words leave to
the rest), as the area under the ROC curve (0.5: chance) per part.

    python scripts/fit_eot.py [--asr-model tiny.en] [--cache /tmp/pauses.pickle]
"""

from __future__ import annotations

import argparse
import itertools
import pickle
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from duplex.app.core.listening import EAGERNESS, Eagerness, words_hang
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.offline import Answers
from lab.pauses import RATE, Heard, Pause, Score, jobs, record, score
from lab.tables import header, spread
from lab.voices import load_corpus

TOR = 0.04
"""Take-overs allowed on the tune part as heard (the target is 0.05 held out: a margin)..."""
SLACK_MS = 40
SLACK_TOR = 0.05
"""...and with every pause :data:`SLACK_MS` longer."""
FAST_S = 0.31
"""A median end of turn here that is 0.35 s through the whole listener (its frame adds ~0.04 s)."""
GRID = {
    # Not sooner than 250 ms: at real time the turn waits for base's candidate transcript,
    # asked ~100 ms after the speech and ~150-250 ms to decode on two cores; an end placed
    # sooner on the sample clock is not sooner on the wire, and offline (every answer at
    # once) it takes pauses the server would not.
    "quick_ms": (250, 280, 300),
    "asks": ((100,), (150,), (200,), (250,), (300,), (150, 250), (200, 300)),
    "sure": (0.95, 0.97, 0.98),
    "likely": (0.2, 0.3, 0.5),
    "settle_ms": (350, 380, 400, 420, 450),
    "doubt_ms": (600, 700, 800),
}


def eagernesses(quick_ms: tuple[int, ...] = GRID["quick_ms"]) -> list[Eagerness]:
    medium, out = EAGERNESS["medium"], []
    for quick, asks, sure, likely, settle, doubt in itertools.product(quick_ms, *list(GRID.values())[1:]):
        if asks[-1] > quick:
            continue
        out.append(replace(medium, ask_ms=asks[0], again_ms=asks[-1], quick_ms=quick, sure=sure, likely=likely,
                           settle_ms=settle, doubt_ms=doubt))  # fmt: skip
    return out


def cells(s: Score) -> list[str]:
    return [f"{s.tor:.3f} ({s.takeovers}/{s.pauses})", spread(s.eot, digits=2, q=0.9), f"{s.mean:.3f}"]


def name(e: Eagerness) -> str:
    return (f"asks {'+'.join(map(str, e.asks))}, quick {e.quick_ms} (p ≥ {e.sure}), settle {e.settle_ms} "
            f"(p ≥ {e.likely}), doubt {e.doubt_ms}")  # fmt: skip


def fit(tune: list[Heard], heldout: list[Heard]) -> None:
    shipped = EAGERNESS["medium"]
    scored, fast = [], []
    for e in eagernesses():
        s = score(e, tune)
        if s.tor <= TOR and score(e, tune, SLACK_MS).tor <= SLACK_TOR:
            scored.append((round(s.mean, 3), len(e.asks), e, s))
    for e in eagernesses((150, 200)):  # quicker than the server can be, for the trade-off alone
        s = score(e, tune)
        if s.eot and float(np.median(s.eot)) <= FAST_S:
            fast.append((s.takeovers, e, s))
    scored.sort(key=lambda x: x[:2])
    print(header("eagerness", "tune: pause TOR", "tune: end of turn", "tune: mean", "held out: pause TOR",
                 "held out: end of turn", "held out: mean"))  # fmt: skip
    for label, e, s in [("as shipped: " + name(shipped), shipped, score(shipped, tune))] + [
        (name(e), e, s) for *_, e, s in scored[:8]
    ]:
        print("| " + " | ".join([label, *cells(s), *cells(score(e, heldout))]) + " |")
    print(f"\n{len(scored)} of {len(eagernesses())} eagernesses hold on the tune part; the first is the fit.")
    if fast:
        _, e, s = min(fast, key=lambda x: x[0])
        at = f"The fewest tune take-overs at a median end of turn ≤ {FAST_S} s (answers at once): {name(e)}:"
        print(at, *cells(s), "tune;", *cells(score(e, heldout)), "held out.")


def auc(yes: list[float], no: list[float]) -> float:
    """P(a finished turn's value > a pause's), ties half."""
    a, b = np.asarray(yes)[:, None], np.asarray(no)[None, :]
    return float(np.mean((a > b) + 0.5 * (a == b)))


EVIDENCE: dict[str, Callable[[Pause], float]] = {
    **{f"Smart Turn at {ms} ms": (lambda p, ms=ms: p.p[ms]) for ms in (100, 200, 300)},
    "final punctuation": lambda p: float(p.text.strip()[-1:] in ".?!"),
    "final pitch (st)": lambda p: p.prosody.final_st if p.prosody else 0.0,
    "final pitch slope (st/s)": lambda p: p.prosody.slope_st_s if p.prosody else 0.0,
    "final energy (dB)": lambda p: p.prosody.end_db if p.prosody else 0.0,
    "final lengthening": lambda p: p.prosody.last_run_ratio if p.prosody else 0.0,
}


def evidence(parts: dict[str, list[Heard]]) -> None:
    def open_(p: Pause) -> bool:  # words that leave it open
        return bool(p.text.strip()) and not words_hang(p.text)

    print(header("evidence", *(f"{k}: AUC" for k in parts)))
    sets = {}
    for k, part in parts.items():
        finals = [h.pauses[-1] for h in part if h.resumes is None and h.pauses and open_(h.pauses[-1])]
        mids = [
            p
            for h in part
            for p in h.pauses
            if p.mid and open_(p) and p.room is not None and p.room > ms_to_samples(200, RATE)
        ]
        sets[k] = finals, mids
    print("| " + " | ".join(["(finished turns / pauses)", *(f"{len(f)} / {len(m)}" for f, m in sets.values())]) + " |")
    for label, get in EVIDENCE.items():
        print(
            "| "
            + " | ".join([label, *(f"{auc([get(p) for p in f], [get(p) for p in m]):.2f}" for f, m in sets.values())])
            + " |"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--asr-model", default="base", help="the Whisper model whose candidates the policy reads")
    ap.add_argument("--cache", type=Path, help="keep the recorded pauses in this file (and read them from it)")
    args = ap.parse_args()
    if args.cache is not None and args.cache.exists():
        parts = pickle.loads(args.cache.read_bytes())
    else:
        corpus, vad, answers = load_corpus(), SileroVad(), Answers(args.asr_model)
        parts = {k: [record(vad, answers, *job) for job in jobs(corpus.split(k))] for k in ("tune", "heldout")}
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps(parts))
    evidence(parts)
    print()
    fit(parts["tune"], parts["heldout"])


if __name__ == "__main__":
    main()
