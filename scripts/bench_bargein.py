"""Barge-in, offline and whole: every backchannel and 12 interruptions of each part of
the natural-voice set, spoken over a reply, through the real listener in process.

Silero, Whisper tiny.en and Smart Turn run here, and every answer (partial, candidate,
end-of-turn probability) is handed back before the next 20 ms frame, as the synced
replay (``bench_hearing.py --fast``) gets them: the decisions are the server's, the
decode time is left out. Whisper's answers are cached by audio slice for the run, so
the policy can be varied in the same process in seconds (``--low-confidence``, the
threshold under which a short transcript is dropped as a guess). Take-over = the reply
was interrupted; cancel = from the true onset to the interruption, in input time.

    python scripts/bench_bargein.py [--split tune] [--low-confidence -1.0 -0.8] [--verbose]
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass, field

import numpy as np

from duplex.app.core.listening import AskTurn, Ears, Interrupt, Listener, Partial, Signal, SpeechPaused
from duplex.app.core.settings import TurnDetection
from duplex.app.harness.stats import median
from duplex.app.harness.tables import header
from duplex.app.harness.voices import Clip, load_corpus, variant
from duplex.pipeline.detectors.silero_vad import SileroVad
from duplex.pipeline.detectors.smart_turn import SmartTurn
from duplex.pipeline.recognizers import whisper as W

RATE = 24000
FRAME = RATE // 50
LEAD = np.zeros(RATE // 2, np.int16)
TAIL = np.zeros(int(2.5 * RATE), np.int16)
EARS = Ears(transcripts=True, partials=True, turn_model=True)


class Answers:
    """The models' raw answers, cached by audio; Whisper's filter applied per call."""

    def __init__(self) -> None:
        self.whisper = W.WhisperRecognizer()
        self.whisper.load()
        self.turns = SmartTurn()
        self.turns.load()
        self.low = W.LOW_CONFIDENCE
        self._cache: dict[tuple[str, str], object] = {}

    def _raw(self, pcm: np.ndarray, partial: bool) -> tuple[str, float, float, float]:
        import ctranslate2
        import soxr

        w = self.whisper
        x = soxr.resample(pcm.astype(np.float32) / 32768.0, RATE, W.RATE)
        frames = min(W.MAX_FRAMES, int(np.ceil(x.size / W.HOP)) + W.TAIL_FRAMES)
        result = w._model.generate(  # noqa: SLF001 (the decode of transcribe_blocking, with its scores kept)
            ctranslate2.StorageView.from_array(W.log_mel(x, frames)[None]),
            [w._prompt],  # noqa: SLF001
            beam_size=1 if partial else 5,
            suppress_blank=True,
            max_length=W.max_length(x.size / W.RATE),
            no_repeat_ngram_size=3,
            repetition_penalty=W.REPETITION_PENALTY,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        text = W.drop_echoes(W.detokenize(w._vocabulary, result.sequences_ids[0]))  # noqa: SLF001
        return text, result.scores[0], result.no_speech_prob, x.size / W.RATE

    def text(self, pcm: np.ndarray, *, partial: bool) -> str:
        key = ("partial" if partial else "final", hashlib.sha1(pcm.tobytes()).hexdigest())
        if key not in self._cache:
            self._cache[key] = self._raw(pcm, partial)
        text, score, no_speech, seconds = self._cache[key]  # type: ignore[misc]
        if score < self.low and (no_speech > W.NO_SPEECH or seconds < W.SHORT_S):
            return ""  # transcribe_blocking's rule, at this run's threshold
        return str(text)

    def probability(self, pcm: np.ndarray) -> float:
        key = ("turn", hashlib.sha1(pcm.tobytes()).hexdigest())
        if key not in self._cache:
            self._cache[key] = self.turns.complete_blocking(pcm, RATE)
        return float(self._cache[key])  # type: ignore[arg-type]


@dataclass
class Tally:
    takeovers: list[str] = field(default_factory=list)
    backchannels: int = 0
    cancel: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def over_reply(vad: SileroVad, answers: Answers, pcm: np.ndarray, verbose: bool) -> int | None:
    """Input sample at which speech over a reply interrupted it (None: it never did)."""
    ears = Listener(vad, RATE, TurnDetection(type="semantic_vad"), ears=EARS)
    interrupted: int | None = None

    def handle(signals: list[Signal]) -> None:
        nonlocal interrupted
        for s in signals:
            if isinstance(s, Interrupt) and interrupted is None:
                interrupted = ears.vad.samples
            elif isinstance(s, Partial):
                text = answers.text(s.audio, partial=True)
                if verbose:
                    print(f"    partial to {s.upto * 1000 // RATE} ms: {text!r}")
                handle(ears.on_partial(text, s.upto))
            elif isinstance(s, SpeechPaused):
                text = answers.text(s.audio, partial=False)
                if verbose:
                    print(f"    candidate to {s.upto * 1000 // RATE} ms: {text!r}")
                handle(ears.on_candidate(s.speech_end, text))
            elif isinstance(s, AskTurn):
                handle(ears.on_turn_probability(s.speech_end, answers.probability(s.audio)))

    for i in range(0, pcm.size, FRAME):
        handle(ears.push(pcm[i : i + FRAME], replying=True))
    return interrupted


def run(vad: SileroVad, answers: Answers, clips: list[Clip], verbose: bool) -> Tally:
    t = Tally()
    for clip in (c for c in clips if c.kind == "backchannel"):
        if verbose:
            print(f"  backchannel {clip.name}")
        if over_reply(vad, answers, np.concatenate([LEAD, variant(clip, "clean", RATE), TAIL]), verbose) is not None:
            t.takeovers.append(clip.name)
        t.backchannels += 1
    for clip in [c for c in clips if c.kind == "turn"][1 : 2 * 12 : 2][:12]:
        if verbose:
            print(f"  interruption {clip.name}")
        at = over_reply(vad, answers, np.concatenate([LEAD, variant(clip, "clean", RATE), TAIL]), verbose)
        onset = LEAD.size + clip.speech_start * RATE // clip.rate
        if at is None:
            t.missed.append(clip.name)
        else:
            t.cancel.append((at - onset) / RATE)
    return t


def p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", choices=("tune", "heldout"), action="append", help="default: both")
    ap.add_argument("--low-confidence", type=float, nargs="+", default=[W.LOW_CONFIDENCE])
    ap.add_argument("--verbose", action="store_true", help="every partial and candidate")
    args = ap.parse_args()
    corpus, vad, answers = load_corpus(), SileroVad(), Answers()
    cols = ["part", "low confidence", "backchannel TOR ↓", "interrupted ↑", "cancel after onset ↓", "taken over"]
    print(header(*cols))
    for split in args.split or ["tune", "heldout"]:
        clips = [c for c in corpus.clips if getattr(c, "split", "tune") == split]
        for low in args.low_confidence:
            answers.low = low
            t = run(vad, answers, clips, args.verbose)
            n = len(t.cancel) + len(t.missed)
            cancel = f"{median(t.cancel):.2f} / {p90(t.cancel):.2f}" if t.cancel else "-"
            cells = [
                split,
                f"{low:g}",
                f"{len(t.takeovers) / max(1, t.backchannels):.3f} ({len(t.takeovers)}/{t.backchannels})",
                f"{len(t.cancel)}/{n}",
                cancel,
                ", ".join(t.takeovers) or "-",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
