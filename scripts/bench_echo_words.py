"""When the words of an interruption over an echoed reply first cancel it, offline.

At real time the held-out interruptions are cancelled ~0.1 s later over a reply echoed at
-15 dB than with no echo (docs/benchmarks.md), and the real-time bench measures it on 12
interruptions, with the CPU's timing in every figure. This measures the words alone,
exactly: every turn of each part said 1.65 s into a reply (three corpus voices at -20 dBFS)
that is echoed through the bench's room into the microphone and paused 0.40 s after the
turn's onset (the hold: ``barge_in_hold_ms``, 300 ms, and the room's delay); the
microphone through the server's canceller (AEC3 behind the near-end judge, the linear
canceller); then Whisper tiny.en through Hush (the server's partials) on the speech so
far from 100 ms before the onset, every 100 ms from 200 ms on (the server judges every
100 ms from 200 ms), each transcript given to the real barge-in policy
(:class:`~duplex.app.core.listening.bargein.BargeIn`, at the user's level). The figure
is the first prefix whose words cancel the reply (1100 ms: none by 1 s); ``--words``
adds the WER of the turn's transcript (Whisper base, as the server decodes a turn).

    python scripts/bench_echo_words.py [--split heldout] [--echo none --echo -15]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from duplex.app.clients.room import Echo, Room
from duplex.app.core.listening.bargein import BargeIn
from duplex.app.core.listening.signals import Interrupt
from duplex.app.core.settings import TurnDetection
from duplex.pipeline.enhancer import Hush
from duplex.pipeline.recognizers.whisper import WhisperRecognizer
from duplex.pipeline.webrtc_apm import WebRtcCleaner
from lab.tables import header
from lab.voices import Clip, load_corpus, resample, set_level, variant, wer

RATE = 24000
FRAME = RATE // 100
REPLY = ("turn_05_am_michael", "turn_13_bm_george", "turn_07_am_michael", "turn_05_am_michael")
"""The reply: tune-part neural voices (what the server's voice sounds like), at -20 dBFS."""
LEAD_S = 1.65
"""The user begins this far into the reply (the echo's delay is found and the room learned)."""
PAUSED_S = 0.40
"""The reply stops this long after the onset (the hold, and the room's first reflection)."""
PRE_S = 0.1
"""Audio before the onset in each partial (the listener's segment starts before its onset)."""
PREFIXES_MS = range(200, 1001, 100)
NEVER_MS = 1100


def microphone(clip: Clip, reply: np.ndarray, level_db: float | None) -> tuple[np.ndarray, int, int]:
    """What the server hears of ``clip`` said over ``reply`` (echoed at ``level_db``; None:
    no echo, the microphone's floor alone), cleaned as the server cleans it; the onset and
    the end of speech in it."""
    user = variant(clip, "clean", RATE).astype(np.float32)
    lead = int(LEAD_S * RATE)
    onset = lead + clip.speech_start * RATE // clip.rate
    end = lead + clip.speech_end * RATE // clip.rate
    n = lead + user.size + RATE // 2
    far = np.zeros(n, np.int16)
    paused = onset + int(PAUSED_S * RATE)
    far[:paused] = reply[:paused]
    talk = np.zeros(n, np.float32)
    talk[lead : lead + user.size] = user[: n - lead]
    room = Echo(replace(Room(), level_db=-200.0 if level_db is None else level_db), RATE)
    cleaner = WebRtcCleaner(RATE, echo=True, noise=False)
    out = []
    for i in range(0, n, FRAME):
        echo = room(far[i : i + FRAME])
        near = np.clip(talk[i : i + FRAME] + echo, -32768, 32767).astype(np.int16)
        out.append(cleaner.process(near, far[i : i + FRAME]))
    return np.concatenate(out), onset, end


def cancels_at(fast: WhisperRecognizer, audio: np.ndarray, onset: int) -> int:
    """The first prefix (ms after the onset) whose partial transcript cancels the reply."""
    barge = BargeIn(TurnDetection(type="semantic_vad"), RATE, words=True)
    barge.started(onset, replying=True)
    start = onset - int(PRE_S * RATE)
    for ms in PREFIXES_MS:
        text = fast.transcribe_blocking(audio[start : onset + ms * RATE // 1000], RATE, partial=True)
        heard_ms = ms + int(PRE_S * 1000)  # (the listener counts from its segment's start)
        if any(isinstance(s, Interrupt) for s in barge.on_words(text, loud=True, heard_ms=heard_ms)):
            return ms
    return NEVER_MS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("tune", "heldout"), action="append", help="default: both")
    ap.add_argument("--echo", action="append", help="the echo's level in dB, or none (default: none, -30, -15)")
    ap.add_argument("--words", action="store_true", help="also the turn transcript's WER (Whisper base)")
    args = ap.parse_args()
    corpus = load_corpus()
    reply = set_level(np.concatenate([resample(corpus[n].pcm, corpus[n].rate, RATE) for n in REPLY]), -20.0, RATE)
    fast = WhisperRecognizer("tiny.en", enhancer=Hush())
    turn = WhisperRecognizer("base", enhancer=Hush()) if args.words else None
    levels = [None if e == "none" else float(e) for e in args.echo or ("none", "-30", "-15")]
    rows = []
    for split in args.split or ("tune", "heldout"):
        clips = [c for c in corpus.split(split) if c.kind == "turn"]
        for level in levels:
            hits, errors, words = [], 0, 0
            for clip in clips:
                audio, onset, end = microphone(clip, reply, level)
                hits.append(cancels_at(fast, audio, onset))
                if turn is not None and clip.text is not None:
                    text = turn.transcribe_blocking(audio[onset - int(PRE_S * RATE) : end + RATE * 3 // 10], RATE)
                    e, n = wer(clip.text, text)
                    errors, words = errors + e, words + n
            h = np.array(hits)
            name = "no echo" if level is None else f"{level:g} dB"
            cells = [
                split,
                name,
                str(len(h)),
                f"{np.median(h):.0f} / {h.mean():.0f} / {np.percentile(h, 90):.0f}",
                str(int((h == NEVER_MS).sum())),
                f"{errors / words:.3f}" if words else "-",
            ]
            rows.append("| " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    print()
    print(
        header(
            "part",
            "echo",
            "turns",
            "words cancel the reply, ms after the onset: median / mean / p90",
            "not by 1 s",
            "turn WER",
        )
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
