"""End of turn, offline and whole: every turn of each part of the natural-voice set
(under its condition: clean, babble and music at 10 dB, phone band, -35 and -15
dBFS) and every sentence with a 250-450 ms pause inside (clean, babble, phone band),
and (``--babble``) each of them again inside babble that goes on before and after the
speech (a café: the turn must end while the babble does not), through the real listener
in process with ``semantic_vad`` (:mod:`lab.offline`: every model answer before the next 20 ms frame,
decode time left out; answers cached, so eagerness variants cost seconds). Whisper hears through
the server's default enhancer (``--asr-enhancer none``: without it).

End of turn = from the true end of speech to the frame the turn ended at; silence =
to the turn's ``audio_end``; take-over = a turn that ended inside the pause.

    python scripts/bench_eot.py [--split heldout] [--variant settle_ms=350,doubt_ms=700 ...] [--asr-model tiny.en]
        [--babble 10 --babble 5] [--asr-enhancer hush|none] [--by]

``--by`` adds each row's end of turn by the voice's family and by condition.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from unittest import mock

import numpy as np

from duplex.app.core.listening import Stopped, Turn
from duplex.app.core.listening import semantic as S
from duplex.app.core.listening.floor import Floor
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.enhancer import Hush
from lab.offline import Answers, hear
from lab.pauses import LEAD, RATE, TAIL, TD, jobs
from lab.tables import header, spread
from lab.voices import Clip, in_bed, load_corpus, variant

BED_LEAD_S, BED_TAIL_S = 1.0, 4.0
"""Babble alone before the speech and after it (``--babble``)."""


def ended(vad: SileroVad, answers: Answers, pcm: np.ndarray) -> tuple[int, int] | None:
    """(input sample the turn ended at, its audio_end), or None: no turn."""
    heard = hear(vad, answers, np.concatenate([LEAD, pcm, TAIL]), RATE, TD)
    turns = [i for i, h in enumerate(heard) if isinstance(h.signal, Turn)]
    if not turns:
        return None
    stopped = next(h for h in reversed(heard[: turns[0]]) if isinstance(h.signal, Stopped))
    assert isinstance(stopped.signal, Stopped)
    return stopped.at, stopped.signal.audio_end


def run(
    vad: SileroVad,
    answers: Answers,
    clips: list[Clip],
    babble: float | None = None,
    by: dict[str, list[float | None]] | None = None,
) -> list[str]:
    """The row's cells; ``by``, if given, collects each turn's end of turn (None: no turn)
    under its family and its condition."""
    eot, silence, missed, takeovers, pauses = [], [], 0, 0, 0
    track = "babble_heldout" if clips and getattr(clips[0], "split", "tune") == "heldout" else "babble"
    each = [(c, "clean", i) for i, c in enumerate(c for c in clips if c.kind in ("turn", "paused"))]
    for clip, condition, seed in jobs(clips) if babble is None else each:
        if babble is None:
            pcm, start = variant(clip, condition, RATE, seed=seed), LEAD.size
        else:
            pcm, lead = in_bed(clip, babble, RATE, lead_s=BED_LEAD_S, tail_s=BED_TAIL_S, seed=seed, track=track)
            start = LEAD.size + lead
        got = ended(vad, answers, pcm)
        if clip.pause_end is not None:  # a paused sentence: did it end inside the pause?
            takeovers += got is not None and got[1] < start + clip.pause_end * RATE // clip.rate
            pauses += 1
            continue
        end = start + clip.speech_end * RATE // clip.rate
        if by is not None:
            # (in a bed, every clip is the clean one: the row names the condition)
            for group in (f"family {clip.family}", *((f"condition {condition}",) if babble is None else ())):
                by.setdefault(group, []).append(None if got is None else (got[0] - end) / RATE)
        if got is None:
            missed += 1
        else:
            eot.append((got[0] - end) / RATE)
            silence.append((got[1] - end) / RATE)
    return [
        f"{takeovers / max(1, pauses):.3f} ({takeovers}/{pauses})",
        f"{len(eot)}/{len(eot) + missed}",
        spread(eot, digits=2, q=0.9),
        spread(silence, digits=2, q=0.9),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", choices=("tune", "heldout"), action="append", help="default: both")
    ap.add_argument("--variant", action="append", default=[], help="medium eagerness fields, e.g. settle_ms=350")
    ap.add_argument(
        "--asr-model",
        default="base",
        help="the Whisper model whose candidates the policy reads (a quiet server's: base)",
    )
    ap.add_argument(
        "--babble", type=float, action="append", default=[], help="also inside babble at this SNR (dB), e.g. 10"
    )
    ap.add_argument("--no-floor", action="store_true", help="also without the floor's end of words (the baseline)")
    ap.add_argument("--skip-clean", action="store_true", help="only the babble rows")
    ap.add_argument("--by", action="store_true", help="also each row's end of turn by family and by condition")
    ap.add_argument(
        "--asr-enhancer",
        choices=("hush", "none"),
        default="hush",
        help="what cleans Whisper's audio (the server's default)",
    )
    args = ap.parse_args()
    enhancer = Hush() if args.asr_enhancer == "hush" else None
    corpus, vad = load_corpus(), SileroVad()
    answers = Answers(args.asr_model, enhancer=enhancer)
    medium = S.EAGERNESS["medium"]
    groups: dict[str, dict[str, list[float | None]]] = {}
    print(header("part", "medium eagerness", "pause TOR ↓", "turns ended", "end of turn ↓", "silence required"))
    for split in args.split or ["tune", "heldout"]:
        clips = [c for c in corpus.clips if getattr(c, "split", "tune") == split]
        for spec in ["", *args.variant]:
            changes = {k: type(getattr(medium, k))(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
            S.EAGERNESS["medium"] = S.EAGERNESS["auto"] = replace(medium, **changes)
            if not args.skip_clean:
                cells = [split, spec or "as shipped"]
                by = groups.setdefault(" ".join(cells), {}) if args.by else None
                print("| " + " | ".join(cells + run(vad, answers, clips, by=by)) + " |", flush=True)
            for snr in args.babble:
                for floor in (True, False) if args.no_floor else (True,):
                    with mock.patch.object(Floor, "ended", Floor.ended if floor else lambda *_, **__: None):
                        cells = [f"{split}, in babble {snr:g} dB{'' if floor else ', no floor'}", spec or "as shipped"]
                        by = groups.setdefault(" ".join(cells), {}) if args.by else None
                        print("| " + " | ".join(cells + run(vad, answers, clips, snr, by)) + " |", flush=True)
    S.EAGERNESS["medium"] = S.EAGERNESS["auto"] = medium
    if groups:
        print("\nBy family and by condition: turns ended, end of turn (median / p90 s)\n")
        print(header("row", "group", "turns ended", "end of turn ↓"))
        for name, by in groups.items():
            for group, ends in sorted(by.items()):
                got = [e for e in ends if e is not None]
                print(f"| {name} | {group} | {len(got)}/{len(ends)} | {spread(got, digits=2, q=0.9)} |")


if __name__ == "__main__":
    main()
