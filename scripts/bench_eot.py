"""End of turn, offline and whole: every turn of each part of the natural-voice set
(under its condition: clean, babble and music at 10 dB, phone band, -35 and -15
dBFS) and every sentence with a 250-450 ms pause inside (clean, babble, phone band),
through the real listener in process with ``semantic_vad``
(:mod:`lab.offline`: every model answer before the next 20 ms frame,
decode time left out; answers cached, so eagerness variants cost seconds).

End of turn = from the true end of speech to the frame the turn ended at; silence =
to the turn's ``audio_end``; take-over = a turn that ended inside the pause.

    python scripts/bench_eot.py [--split heldout] [--variant settle_ms=350,doubt_ms=700 ...] [--asr-model tiny.en]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from duplex.app.core.listening import Stopped, Turn
from duplex.app.core.listening import semantic as S
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.offline import Answers, hear
from lab.pauses import LEAD, RATE, TAIL, TD, jobs
from lab.tables import header, spread
from lab.voices import Clip, load_corpus, variant


def ended(vad: SileroVad, answers: Answers, pcm: np.ndarray) -> tuple[int, int] | None:
    """(input sample the turn ended at, its audio_end), or None: no turn."""
    heard = hear(vad, answers, np.concatenate([LEAD, pcm, TAIL]), RATE, TD)
    turns = [i for i, h in enumerate(heard) if isinstance(h.signal, Turn)]
    if not turns:
        return None
    stopped = next(h for h in reversed(heard[: turns[0]]) if isinstance(h.signal, Stopped))
    assert isinstance(stopped.signal, Stopped)
    return stopped.at, stopped.signal.audio_end


def run(vad: SileroVad, answers: Answers, clips: list[Clip]) -> list[str]:
    eot, silence, missed, takeovers, pauses = [], [], 0, 0, 0
    for clip, condition, seed in jobs(clips):
        got = ended(vad, answers, variant(clip, condition, RATE, seed=seed))
        if clip.pause_end is not None:  # a paused sentence: did it end inside the pause?
            takeovers += got is not None and got[1] < LEAD.size + clip.pause_end * RATE // clip.rate
            pauses += 1
            continue
        end = LEAD.size + clip.speech_end * RATE // clip.rate
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
    args = ap.parse_args()
    corpus, vad, answers = load_corpus(), SileroVad(), Answers(args.asr_model)
    medium = S.EAGERNESS["medium"]
    print(header("part", "medium eagerness", "pause TOR ↓", "turns ended", "end of turn ↓", "silence required"))
    for split in args.split or ["tune", "heldout"]:
        clips = [c for c in corpus.clips if getattr(c, "split", "tune") == split]
        for spec in ["", *args.variant]:
            changes = {k: type(getattr(medium, k))(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)}
            S.EAGERNESS["medium"] = S.EAGERNESS["auto"] = replace(medium, **changes)
            cells = [split, spec or "as shipped", *run(vad, answers, clips)]
            print("| " + " | ".join(cells) + " |", flush=True)
    S.EAGERNESS["medium"] = S.EAGERNESS["auto"] = medium


if __name__ == "__main__":
    main()
