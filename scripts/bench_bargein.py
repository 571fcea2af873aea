"""Barge-in, offline and whole: every backchannel and 12 interruptions of each part of
the natural-voice set, spoken over a reply, through the real listener in process
(:mod:`lab.offline`: every model answer before the next 20 ms frame, as
the synced replay ``bench_hearing.py --fast`` gets them; decode time left out).
Also the short interruptions of :mod:`lab.commands` ("Stop.", "Wait.",
"Hold on." in voices of each part), which must cancel too. Whisper's answers are cached,
so the policy can be varied in one run in seconds (``--low-confidence``: the threshold
under which a short transcript is dropped as a guess). Take-over = the reply was
interrupted; cancel = from the true onset to the interruption, in input time.

    python scripts/bench_bargein.py [--split tune] [--low-confidence -1.0 -0.8] [--verbose]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np

from duplex.app.core.listening import Interrupt
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.recognizers.whisper import LOW_CONFIDENCE
from lab.commands import Command, commands
from lab.offline import Answers, hear
from lab.tables import header, spread
from lab.voices import Clip, load_corpus, variant

RATE = 24000
LEAD = np.zeros(RATE // 2, np.int16)
TAIL = np.zeros(int(2.5 * RATE), np.int16)


@dataclass
class Tally:
    takeovers: list[str] = field(default_factory=list)
    backchannels: int = 0
    cancel: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    short_cancel: list[float] = field(default_factory=list)
    short_missed: list[str] = field(default_factory=list)


def interrupted_at(vad: SileroVad, answers: Answers, speech: np.ndarray, name: str, verbose: bool) -> int | None:
    """Input sample at which ``speech`` (24 kHz), spoken over a reply, interrupted it (None: never)."""
    pcm = np.concatenate([LEAD, speech, TAIL])
    heard = hear(vad, answers, pcm, RATE, TurnDetection(type="semantic_vad"), replying=True)
    at = next((h.at for h in heard if isinstance(h.signal, Interrupt)), None)
    if verbose:
        print(f"  {name}: " + "; ".join(f"{h.at * 1000 // RATE} ms {h.source}" for h in heard if h.source))
    return at


def run(vad: SileroVad, answers: Answers, clips: list[Clip], short: list[Command], verbose: bool) -> Tally:
    t = Tally()
    for clip in (c for c in clips if c.kind == "backchannel"):
        if interrupted_at(vad, answers, variant(clip, "clean", RATE), clip.name, verbose) is not None:
            t.takeovers.append(clip.name)
        t.backchannels += 1
    for clip in [c for c in clips if c.kind == "turn"][1 : 2 * 12 : 2][:12]:
        at = interrupted_at(vad, answers, variant(clip, "clean", RATE), clip.name, verbose)
        if at is None:
            t.missed.append(clip.name)
        else:
            t.cancel.append((at - LEAD.size - clip.speech_start * RATE // clip.rate) / RATE)
    for command in short:
        at = interrupted_at(vad, answers, command.pcm, command.name, verbose)
        if at is None:
            t.short_missed.append(command.name)
        else:
            t.short_cancel.append((at - LEAD.size - command.speech_start) / RATE)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", choices=("tune", "heldout"), action="append", help="default: both")
    ap.add_argument("--low-confidence", type=float, nargs="+", default=[LOW_CONFIDENCE])
    ap.add_argument("--verbose", action="store_true", help="every partial and candidate that decided something")
    args = ap.parse_args()
    corpus, vad, answers = load_corpus(), SileroVad(), Answers()
    print(header("part", "low confidence", "backchannel TOR ↓", "interrupted ↑", "cancel after onset ↓",
                 "short interruptions ↑", "their cancel ↓", "taken over", "short ones missed"))  # fmt: skip
    for split in args.split or ["tune", "heldout"]:
        clips = [c for c in corpus.clips if getattr(c, "split", "tune") == split]
        short = commands(split)
        for low in args.low_confidence:
            answers.low = low
            t = run(vad, answers, clips, short, args.verbose)
            bc = f"{len(t.takeovers) / max(1, t.backchannels):.3f} ({len(t.takeovers)}/{t.backchannels})"
            n = len(t.cancel) + len(t.missed)
            cells = [
                split,
                f"{low:g}",
                bc,
                f"{len(t.cancel)}/{n}",
                spread(t.cancel, digits=2, q=0.9),
                f"{len(t.short_cancel)}/{len(short)}",
                spread(t.short_cancel, digits=2, q=0.9),
                ", ".join(t.takeovers) or "-",
                ", ".join(t.short_missed) or "-",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
