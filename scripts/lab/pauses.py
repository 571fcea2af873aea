"""Every pause the listener hears over the natural-voice set, with what ``semantic_vad``
weighs there (the candidate transcript, Smart Turn's answer at each silence it may be
asked at, the prosody), so an eagerness can be scored, and fitted, in a second.

Recording runs the real listener offline (:func:`lab.offline.hear`)
once per clip, made never to end a turn early so that it hears every pause; scoring
then replays each pause's evidence through the real
:class:`~duplex.app.core.listening.semantic.SemanticTurns` with the eagerness asked
for: the turn ends at the first pause whose required silence it had. Smart Turn hears
each ask as the server sends it (the audio to ``heard_ms`` after the speech, the rest
zeros). Against the whole listener (``scripts/bench_eot.py``): the shipped fit takes the
same pauses here (3/78 tune, 0/51 held out), the fit before it one more (6/78 against
5/78: a pause at the edge of its wait); end of turn here is to the required silence's
end, 0.04-0.06 s before the frame that ends it there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from unittest import mock

import numpy as np

from duplex.app.core.listening import EAGERNESS, Continued, Eagerness, SemanticTurns, SpeechPaused, Turn
from duplex.app.core.settings import TurnDetection
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.detectors.silero_vad import SileroVad
from lab.offline import EARS, Answers, hear
from lab.prosody import Prosody, prosody
from lab.voices import Clip, variant

RATE = 24000
ASKS_MS = (100, 150, 200, 250, 300, 400)
"""The silences Smart Turn is asked at for every pause (an eagerness may use any of them)."""
LEAD = np.zeros(RATE // 2, np.int16)
TAIL = np.zeros(3 * RATE, np.int16)
CONDITIONS = ("clean", "babble10", "tel", "low", "music10", "loud")
"""A turn's condition, by its place in its part (bench_eot's)."""
PAUSE_CONDITIONS = ("clean", "babble10", "tel")
"""Each paused sentence is heard in all of these."""
NEVER_MS = 1200
TD = TurnDetection(type="semantic_vad")


@dataclass(frozen=True, slots=True)
class Pause:
    """One pause in the speech, as the listener saw it (input samples)."""

    speech_end: int
    """Silero's end of the speech before it."""
    room: int | None
    """Silence there was before the speech went on (the true resumption for a paused
    sentence's own pause); None: the speech did not go on."""
    text: str
    """The candidate transcript of the turn to here."""
    p: dict[int, float]
    """Smart Turn's P(complete) asked at each of :data:`ASKS_MS` (ms after the speech)."""
    prosody: Prosody | None
    mid: bool = False
    """This is the paused sentence's own pause (ending the turn here is a take-over)."""


@dataclass(slots=True)
class Heard:
    """One clip under one condition: its pauses, in order."""

    clip: Clip
    condition: str
    true_end: int
    """Input sample where its speech truly ends (the corpus's mark)."""
    resumes: int | None
    """...and where a paused sentence's second part begins."""
    pauses: list[Pause] = field(default_factory=list)


def jobs(clips: list[Clip]) -> Iterator[tuple[Clip, str, int]]:
    """(clip, condition, seed): every turn in its condition, every paused sentence in each of three."""
    turns = [c for c in clips if c.kind == "turn"]
    for i, clip in enumerate(turns):
        yield clip, CONDITIONS[i % len(CONDITIONS)], i
    for i, clip in enumerate(c for c in clips if c.kind == "paused"):
        for j, condition in enumerate(PAUSE_CONDITIONS):
            yield clip, condition, i + j


def record(vad: SileroVad, answers: Answers, clip: Clip, condition: str, seed: int) -> Heard:
    """Every pause of ``clip`` under ``condition``, with its evidence."""
    pcm = np.concatenate([LEAD, variant(clip, condition, RATE, seed=seed), TAIL])

    def at(sample: int) -> int:
        return LEAD.size + sample * RATE // clip.rate

    resumes = at(clip.pause_end) if clip.pause_end is not None else None
    begins = at(clip.pause_start) if clip.pause_start is not None else None
    with mock.patch.object(SemanticTurns, "required_ms", lambda self: NEVER_MS):
        signals = hear(vad, answers, pcm, RATE, TD)
    out = Heard(clip, condition, at(clip.speech_end), resumes)
    heard = ms_to_samples(EAGERNESS["medium"].heard_ms, RATE)
    for k, s in enumerate(signals):
        if not isinstance(s.signal, SpeechPaused):
            continue
        paused = s.signal
        end = paused.speech_end
        after = next((x for x in signals[k + 1 :] if isinstance(x.signal, (Continued, Turn))), None)
        room = after.at - end if after is not None and isinstance(after.signal, Continued) else None
        mid = False
        if resumes is not None and begins is not None and begins <= end < resumes:
            mid, room = True, resumes - end
        p: dict[int, float] = {}
        for ms in ASKS_MS:
            upto = end + ms_to_samples(ms, RATE)
            have = min(upto, end + heard)
            p[ms] = answers.probability(np.pad(pcm[paused.start : have], (0, upto - have)), RATE)
        text = answers.text(paused.audio, RATE, partial=False)
        out.pauses.append(Pause(end, room, text, p, prosody(pcm[paused.start : end], RATE), mid))
    return out


@dataclass(frozen=True, slots=True)
class Score:
    """One eagerness over a part of the set."""

    takeovers: int
    pauses: int
    eot: list[float]
    """True end of speech -> end of the required silence, per turn (s)."""

    @property
    def tor(self) -> float:
        return self.takeovers / max(1, self.pauses)

    @property
    def mean(self) -> float:
        return float(np.mean(self.eot)) if self.eot else float("inf")


def ends_at(e: Eagerness, heard: Heard, slack: int = 0) -> tuple[int, Pause] | None:
    """Where the turn ends under eagerness ``e`` (input sample) and the pause it ends in,
    or None: it does not.
    ``slack``: every pause is that many samples longer (a fit that only holds at its edge
    does not hold: Silero's end of speech moves by tens of ms with the audio around it)."""
    turns = SemanticTurns("medium", RATE, EARS)
    turns.e = e
    for pause in heard.pauses:
        turns.on_transcript(pause.speech_end, pause.text)
        for ms in e.asks:
            turns.on_probability(pause.speech_end, pause.p[ms])
        required = ms_to_samples(turns.required_ms(), RATE)
        if pause.room is None or required <= pause.room + slack:
            return pause.speech_end + required, pause
        turns.resumed(pause.speech_end, pause.speech_end + pause.room)
    return None


def score(e: Eagerness, part: list[Heard], slack_ms: int = 0) -> Score:
    """Take-overs of the paused sentences' pauses and the turns' ends under ``e``."""
    slack = ms_to_samples(slack_ms, RATE)
    takeovers, pauses, eot = 0, 0, []
    for h in part:
        got = ends_at(e, h, slack)
        if h.resumes is not None:
            pauses += 1
            takeovers += got is not None and got[1].speech_end < h.resumes  # ended inside the sentence
        elif got is not None:
            eot.append((got[0] - h.true_end) / RATE)
    return Score(takeovers, pauses, eot)
