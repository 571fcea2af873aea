"""``semantic_vad``: end the turn when the speaker sounds finished, not after a fixed silence.

Once speech has paused for the eagerness's ``ask_ms``, the end-of-turn model hears
the end of the turn (with that much silence) and says how likely it is complete; at
the pause the recogniser transcribes the turn as it stands (both off the event loop;
their answers come back here). The silence the turn then needs depends on both:

* the model is sure and the words do not hang (no trailing "and", "to the", ",")
  -> the turn ends at ``quick_ms`` (~0.2-0.4 s after the speech);
* the model leans to complete -> a little more silence (``settle_ms``);
* the model says not complete but the words sound finished -> ``doubt_ms``;
* the words hang, or none were heard -> ``max_ms`` of silence.

The model alone is not enough: run as Pipecat runs it (P > 0.5 after 0.2 s), it
ends turns inside most 250-450 ms mid-sentence pauses of natural speech. So a
quick end needs a high probability and words that do not hang, and a mid-sentence
pause that fools the model still has to outlast ``settle_ms``. And the speaker's
own habits count: once this user has gone on after a pause of some length, a quick
end waits that long (and a little more) from then on. ``eagerness`` sets the trade
(``auto`` is ``medium``). With no model, the transcript and the silence decide; with
no recogniser, the model and the silence.

The turn ends at ``speech_end + required silence`` on the input clock, whenever the
answers arrived: the same audio gives the same turn boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from duplex.app.core.listening.ears import Ears
from duplex.app.core.settings import EagernessName
from duplex.app.core.units import ms_to_samples

OWN_PAUSE_MARGIN_MS = 100
"""A quick end waits this much longer than the longest pause this user went on after."""
OWN_PAUSE_MAX_MS = 800
"""...counting pauses up to this long (a longer one is a new thought, not a habit)."""


@dataclass(frozen=True, slots=True)
class Eagerness:
    """How readily a pause ends the turn."""

    ask_ms: int
    """Silence after the speech (Silero's end of speech is ~70 ms late already) when the
    end-of-turn model is first asked."""
    again_ms: int
    """...and asked again, with more of the silence: a sure answer both times ends the
    turn here (one answer alone is noisy: the same pause can score 0.1 and 0.9 50 ms apart).
    Not past ``ask_ms``: asked once, at ``ask_ms``."""
    quick_ms: int
    """Silence that ends a turn the model was sure of every time (and whose words do not
    hang): at the last ask or later. Later than the ask, so the answer is back (it is
    asked early, see ``heard_ms``) and a pause a little longer than the ask is outlasted."""
    sure: float
    """P(complete) that ends the turn at ``quick_ms`` (unless the words hang)."""
    likely: float
    """P(complete) that ends it after ``settle_ms``."""
    settle_ms: int
    doubt_ms: int
    """Silence that ends a turn whose words sound finished but the model does not: the
    model is unsure on voices it does not know (it said 0.01-0.03 to most complete
    questions of one held-out voice), so finished words wait longer than a pause inside a
    sentence, not as long as words that hang."""
    max_ms: int
    """Silence that ends any turn (words that hang, or none heard)."""
    heard_ms: int = 64
    """Silence (two VAD windows) after which the first ask is made, the rest of its
    silence heard as zeros (later asks keep their spacing): the answer is then back when
    its silence has passed instead of ~120-300 ms after it (it shared two cores with the
    candidate transcript and a partial). Not past ``ask_ms``."""

    def __post_init__(self) -> None:
        if not self.asks[-1] <= self.quick_ms <= self.settle_ms < self.doubt_ms <= self.max_ms:
            raise ValueError(f"eagerness waits out of order: {self}")

    @property
    def asks(self) -> tuple[int, ...]:
        """The silences (ms after the speech) at which the model is asked about a pause."""
        return (self.ask_ms, self.again_ms) if self.again_ms > self.ask_ms else (self.ask_ms,)


EAGERNESS: dict[EagernessName, Eagerness] = {
    "low": Eagerness(
        ask_ms=200, again_ms=400, quick_ms=400, sure=0.99, likely=0.7, settle_ms=900, doubt_ms=1400, max_ms=2000
    ),
    "medium": Eagerness(
        ask_ms=100, again_ms=100, quick_ms=250, sure=0.98, likely=0.2, settle_ms=420, doubt_ms=600, max_ms=1200
    ),
    "high": Eagerness(
        ask_ms=100, again_ms=200, quick_ms=200, sure=0.95, likely=0.3, settle_ms=400, doubt_ms=600, max_ms=800
    ),
}
"""``medium`` is fitted on the tune part of the natural-voice set (tests/voices: Kokoro,
Piper, flite kal/rms, festival kal, human prompts) by ``scripts/fit_eot.py``: every pause
the listener hears there (turns in six conditions, paused sentences in three) with base's
candidate transcripts (a quiet server's) and Smart Turn's answers, scored for each
eagerness of a grid; the fit is the lowest mean end of turn that takes over at most 4% of
the 250-450 ms mid-sentence pauses as heard and 5% with every pause 40 ms longer. Asked
once, at 100 ms (two VAD windows in, the rest as zeros: its answer is back well before
``quick_ms``); sure (0.98) with words that do not hang ends the turn at 250 ms (at real
time the candidate transcript is back about then); any lean to complete (0.2) at 420 ms,
outlasting the pauses (to ~400 ms from Silero's end of speech); finished words the model
doubts at 600 ms. Through the whole listener (``scripts/bench_eot.py``, 2026-12-03), the
old fit (one ask at 300 ms, p >= 0.97; settle 450, doubt 800, fitted on tiny.en's
candidates) -> this one: tune take-over 5/78 -> 3/78, end of turn 0.48 / 0.68 -> 0.52 /
0.64 s (median / p90); held out 1/51 -> 0/51, 0.50 / 0.92 -> 0.56 / 0.70 s. (Base's
candidates finish more of a cut sentence, "We should leave it.", so the old fit took 5/78
of the tune pauses with them.) A 0.35 s median costs take-overs on this set: the fewest at
that median, offline, are 9/78 tune and 10/51 held out. Neither final punctuation nor the
prosody of the end (:mod:`lab.prosody`) tells a finished turn from a
paused one here (the synthetic pauses join two separately spoken halves, the first
sounding finished), so neither is weighed. ``low`` and ``high`` are set around it (and
ask twice)."""
EAGERNESS["auto"] = EAGERNESS["medium"]

# Words a finished English sentence rarely ends on: the speaker is mid-phrase. Whisper
# puts a full stop on a cut sentence too ("I'd like to book a table for."), so a full
# stop proves nothing; a question mark does, except after the strongest of these.
_HANGING_ALWAYS = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "because", "if", "than", "my", "your", "his", "her", "its", "our",
    "their", "this", "these", "those", "um", "uh", "er", "hmm", "like", "very", "really", "just", "also", "maybe",
    "to", "of",
})  # fmt: skip
_HANGING = _HANGING_ALWAYS | frozenset({
    "then", "that", "which", "who", "whose", "whom", "to", "of", "in", "on", "at", "by", "for", "from", "with",
    "about", "into", "onto", "over", "under", "after", "before", "until", "while", "as", "some", "any", "each",
    "every", "no", "not", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "have",
    "has", "had", "can", "could", "will", "would", "shall", "should", "may", "might", "must", "i", "we", "he",
    "she", "they", "it's", "i'm", "let's",
})  # fmt: skip
# A sentence that opens with one of these and has no comma yet is a clause waiting for
# its main clause ("If it's not too much trouble", "When you get a chance").
_OPENS_CLAUSE = frozenset({
    "if", "when", "before", "after", "because", "although", "though", "while", "unless", "since", "once",
    "whenever", "until",
})  # fmt: skip
# The speaker holds the floor to think ("Let me think about it for a second, ...").
_HOLDING = ("let me think", "let me see", "give me a second", "give me a moment", "hold on", "hang on",
            "just a moment", "one moment", "one second", "wait a second")  # fmt: skip
# A turn that is only a discourse marker is a preface ("Wait, ...", "So, ...", "Okay, so
# ..."): Whisper writes "Wait." with a full stop, and a listener would not answer it.
# ("Yes." and "Okay." alone are answers.)
_PREFACES = frozenset({
    "wait", "so", "well", "actually", "and", "but", "hmm", "um", "uh", "er", "look", "listen", "hey", "anyway",
    "also",
})  # fmt: skip
_ACKS = frozenset({"okay", "ok", "alright", "right", "yes", "yeah", "no", "oh"})
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_WORD = re.compile(r"[a-z0-9']+")  # (a number is a word: "Set the lights to 50%." ends on it, not on "to")


def words_hang(text: str) -> bool:
    """Whether a transcript stops mid-phrase: on a comma or dash, on a word that needs
    more after it ("to", "the", "and", "um"), inside an opening clause ("If it's not too
    much trouble"), while the speaker holds the floor ("Let me think..."), or when all
    of it is a preface ("Wait.", "Okay, so.")."""
    t = text.strip().lower()
    if not t:
        return False
    if t[-1] in ",;:-–—" or t.endswith("..."):
        return True
    words = _WORD.findall(t)
    if not words:
        return False
    if words[-1] in (_HANGING_ALWAYS if t.endswith("?") else _HANGING):
        return True
    if len(words) <= 3 and words[-1] in _PREFACES and all(w in _PREFACES | _ACKS for w in words):
        return True  # the whole turn so far is "Wait." or "Okay, so."
    last = _SENTENCE_END.split(t)[-1]
    opening = _WORD.findall(last)[:1]
    return (bool(opening) and opening[0] in _OPENS_CLAUSE and "," not in last) or last.startswith(_HOLDING)


class SemanticTurns:
    """The ``semantic_vad`` policy for one listener."""

    def __init__(self, eagerness: EagernessName, rate: int, ears: Ears) -> None:
        self.e = EAGERNESS[eagerness]
        self.rate = rate
        self.ears = ears
        self._key: int | None = None  # the speech_end the answers below are about
        self._answers: list[float] = []
        self._text: str | None = None
        self._asks: tuple[int, int] | None = None  # (speech_end, asks made about it)
        self.own_pause_ms = 0
        """The longest pause (``ask_ms`` to :data:`OWN_PAUSE_MAX_MS`) this user went on after."""

    def _about(self, speech_end: int) -> None:
        if self._key != speech_end:
            self._key, self._answers, self._text = speech_end, [], None

    def quick_ms(self) -> int:
        """When sure answers end the turn: at ``quick_ms``, or later for a user who has
        gone on after longer pauses (never past ``settle_ms``)."""
        return min(self.e.settle_ms, max(self.e.quick_ms, self.own_pause_ms + OWN_PAUSE_MARGIN_MS))

    def required_ms(self) -> int:
        """Silence the current pause needs, given what is known of it so far."""
        e, text = self.e, self._text
        p = min(self._answers) if len(self._answers) >= len(self.e.asks) else None
        if (self.ears.turn_model and p is None) or (self.ears.transcripts and text is None):
            return e.max_ms  # not everything has answered yet: ask again when it has
        if text is not None and (words_hang(text) or not text.strip()):
            return e.max_ms  # the words go on, or the recogniser heard none: no way to tell
        if p is None:  # no model: finished-sounding words still wait a little
            return e.settle_ms
        if p >= e.sure:
            return self.quick_ms()
        return e.settle_ms if p >= e.likely else e.doubt_ms

    def ended(self, speech_end: int, now: int) -> int | None:
        self._about(speech_end)
        end = speech_end + ms_to_samples(self.required_ms(), self.rate)
        return end if now >= end else None

    def ask(self, speech_end: int, now: int) -> int | None:
        made = self._asks[1] if self._asks is not None and self._asks[0] == speech_end else 0
        offsets = self.e.asks
        if not self.ears.turn_model or made >= len(offsets):
            return None
        upto = speech_end + ms_to_samples(offsets[made], self.rate)
        if now < upto - ms_to_samples(offsets[0] - min(self.e.heard_ms, offsets[0]), self.rate):
            return None
        self._asks = (speech_end, made + 1)
        return upto

    def on_probability(self, speech_end: int, probability: float) -> None:
        self._about(speech_end)
        self._answers.append(probability)

    def on_transcript(self, speech_end: int, text: str) -> None:
        self._about(speech_end)
        self._text = text

    def resumed(self, speech_end: int, onset: int) -> None:
        """The user went on at input sample ``onset`` after the speech that ended at ``speech_end``."""
        pause = (onset - speech_end) * 1000 // self.rate
        if self.e.ask_ms <= pause <= OWN_PAUSE_MAX_MS:  # a pause the model was asked about: a habit
            self.own_pause_ms = max(self.own_pause_ms, pause)
