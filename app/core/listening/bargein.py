"""Speech over a reply (barge-in), as a policy with explicit states.

Speech that starts while a reply is being heard ducks it at once (or pauses it,
with ducking off): the user hears the reply fall away within ~100 ms, yet a
backchannel ("mhm", "okay") or a noise costs the reply nothing but a dip. What the
speech is, is then judged on what it says, as soon as the recogniser knows:

* words that are not a backchannel, at the user's own level -> interrupted: the
  reply is cancelled and truncated at what was heard when the speech began;
* only backchannel words -> the reply resumes as soon as the speech pauses, and
  the sound is not a turn, however long it was ("okay, I see, right");
* words that are only pronouns, auxiliaries, conjunctions and the like ("You had.",
  what a recogniser makes of many a short "yeah"), or thanks ("Thank you.", what it
  makes of many a noise) -> judged on more of the speech: a request goes on to say
  what it is about, or lasts;
* speech at the user's level lasting ``barge_in_min_ms`` that no transcript has
  called a backchannel -> interrupted (what a recogniser cannot make out yet is
  still the user talking: an echo gate chops the start of a real barge-in);
* sound well below the user's level (babble, music, a TV) never interrupts: after
  :data:`NOISE_MS` it is ignored and the reply plays on.

Speech at the user's level that goes on ``barge_in_hold_ms`` with no backchannel heard in
it silences the ducked reply (:class:`~duplex.app.core.listening.signals.Hold`: paused, not
cancelled) while its words are still awaited: a request is silenced ~0.37 s after it
began instead of when its words come (0.5-0.7 s at real time on a slow CPU), and speech
that ends as no turn (a backchannel, heard as one too late, or a noise) resumes the reply
where it stopped, with nothing lost, as LiveKit's agents resume a false interruption.

Shorter speech at the user's level resumes the reply when it ends. With no
recogniser, level and length decide alone.

A sound that *rises* well out of the quiet over a reply ducks it before voice activity
is sure it is speech (:meth:`BargeIn.rose`): a fricative ("Switch", "Send") or a soft
start is heard 100-200 ms before Silero becomes sure at the vowel, and a duck costs a
dip at most. If no speech is decided within :data:`RISE_MS`, the reply comes back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from duplex.app.core.listening.signals import Duck, Hold, Interrupt, Resume, Signal
from duplex.app.core.settings import TurnDetection
from duplex.app.core.states import Table
from duplex.app.core.units import ms_to_samples
from duplex.pipeline.recognizer import holds_command

NOISE_MS = 1500
"""Speech over a reply that says nothing for this long is noise: the reply resumes."""
UNHEARD_MS = 400
"""Speech the recogniser has heard as nothing so far must last this much longer than
``barge_in_min_ms`` to cancel the reply by its length alone (a slow "Okay" of 0.9 s that
Whisper drops as unsure is no interruption; a real one is heard as words by then)."""
FRAGMENT_MS = 400
"""A transcript of less speech than this is of a fragment (a word cut short is often
heard as another word: "Right" as "Ride"): one word of it that is not a backchannel
is not enough to cancel the reply; two are, and so is a command ("Stop.": see
:data:`~duplex.pipeline.recognizer.COMMANDS`). (600 ms was tried: on the tuning part it
took 5 -> 3 of 56 backchannels, held out none fewer (3/40), and at real time the held-out
cancel went 0.46 -> 0.51 s median: not kept.)"""
SETTLE_MS = 100
"""Silence after speech over a reply before its pause counts (Silero ends ~70 ms late)."""
RISE_MS = 300
"""How long a reply ducked for a rising sound waits for voice activity to call it speech
before it comes back (on the tune part's turns, clean, at -35 dBFS and in the phone band,
speech was decided up to ~220 ms after its rise)."""
LATE_MS = 600
"""Silence after short speech over a reply that ends it if its words have not (a blip, or
a recogniser too busy to say); then its length decides."""

BACKCHANNELS = frozenset({
    "mhm", "mm", "mmm", "hmm", "hm", "mhmm", "uh", "huh", "um", "ah", "oh", "okay", "ok", "yeah", "yes", "yep",
    "yup", "right", "sure", "alright", "all", "i", "see", "got", "it", "cool", "nice", "wow", "great", "gotcha",
    "true", "exactly", "indeed", "interesting", "really", "no", "nope", "ma'am", "mmhmm",
})  # fmt: skip
"""Words a listener says to keep the speaker going ("I see" and "got it" count word by word;
a lone "no" and "ma'am" are what Whisper makes of some "mhm"s)."""
_WORD = re.compile(r"[a-z']+")  # "uh-huh", "mm-hmm", "uh-uh": the parts are each backchannels
FUNCTION_WORDS = frozenset({
    "i", "me", "my", "you", "your", "he", "him", "his", "she", "her", "we", "us", "our", "they", "them", "their",
    "it", "its", "this", "that", "these", "those", "a", "an", "the", "m", "s", "re", "ve", "d", "ll",
    "am", "is", "are", "was", "were", "be", "been", "have", "has", "had", "do", "does", "did",
    "can", "could", "will", "would", "shall", "should", "may", "might", "must",
    "and", "but", "or", "so", "then", "of", "to", "in", "on", "at", "for", "with", "from", "by",
})  # fmt: skip
"""Closed-class words (pronouns, determiners, auxiliaries, conjunctions, prepositions;
a contraction's parts): words alone of these are no request. What a recogniser makes of
a short backchannel is often such ("You had." for "yeah", "I'm her." for "uh-huh"); a
request says what it is about. Not here: question words, negation ("don't"), commands."""
THANKS = frozenset({"thank", "thanks"})
"""...nor is thanks ("Thank you."): Whisper's commonest words for a sound that is no
speech (a noise bed with a reply's echo under it cancelled the reply at real time at
-15 dB), and said over a reply, an acknowledgement, not a request."""


def _content_words(text: str) -> list[str]:
    # Single letters are a recogniser spelling out a hum ("M-H-M"), not words.
    words = _WORD.findall(text.lower())
    content = [w for w in words if len(w) > 1 and w not in BACKCHANNELS]
    if content == ["you"] and len(words) > 1 and words[-1] == "you":
        return []  # "I see you": Whisper's commonest guess for the quiet after a word, not a word said
    return content


def only_function_words(text: str) -> bool:
    """Whether every word of ``text`` that is not a backchannel is a closed-class word
    (:data:`FUNCTION_WORDS`; a contraction by its parts) or thanks (:data:`THANKS`), and
    there is one."""
    content = _content_words(text)
    return bool(content) and all(
        part in FUNCTION_WORDS or part in THANKS for w in content for part in w.split("'") if part
    )


def says_something(text: str) -> bool:
    """Whether a transcript holds a word that is not a backchannel."""
    return bool(_content_words(text))


class BargeState(Enum):
    """Where the current speech stands with respect to the reply being heard."""

    IDLE = "idle"
    """No speech over a reply (none is being heard, barge-in is off, or no speech)."""
    ROSE = "rose"
    """A sound rose out of the quiet over the reply: it is ducked until voice activity
    decides it is speech (then it is judged) or :data:`RISE_MS` pass (it comes back)."""
    JUDGING = "judging"
    """The reply is ducked (or paused) while the speech over it is judged; no words of it yet."""
    HEARD_NOTHING = "heard_nothing"
    """...judged, and the recogniser heard it as nothing so far: only longer speech
    interrupts by its length (``UNHEARD_MS`` more)."""
    HEARD_BACKCHANNEL = "heard_backchannel"
    """...judged, and its words so far do not interrupt (backchannels, or words below the
    user's level): it is no turn, and the reply resumes as soon as it pauses."""
    INTERRUPTED = "interrupted"
    """The reply was interrupted: the speech is the user's turn."""
    IGNORED = "ignored"
    """The speech was judged noise: the reply plays on and this is not a turn."""


class BargeEvent(Enum):
    """What happens to speech, as barge-in sees it."""

    RISING = "rising"
    """A sound rose out of the quiet while a reply is being heard (and barge-in is on)."""
    LAPSED = "lapsed"
    """...and no speech was decided within :data:`RISE_MS`."""
    OVER_REPLY = "over_reply"
    """Speech began while a reply is being heard (and barge-in is on)."""
    ALONE = "alone"
    """Speech began with no reply to duck."""
    WORDS = "words"
    """Its words say something, at the user's level."""
    MINOR_WORDS = "minor_words"
    """Its words so far do not interrupt: backchannels, or words well below the user's level."""
    NO_WORDS = "no_words"
    """The recogniser heard it as nothing (so far)."""
    LONG = "long"
    """It lasted ``barge_in_min_ms`` at the user's level and is no backchannel."""
    NOISE = "noise"
    """It lasted :data:`NOISE_MS` well below the user's level."""
    ENDED = "ended"
    """The speech ended (a turn or not), was cleared, or listening stopped."""


_S, _E = BargeState, BargeEvent
_JUDGED = (_S.JUDGING, _S.HEARD_NOTHING, _S.HEARD_BACKCHANNEL)
MOVES: Table[BargeState, BargeEvent] = Table(
    "barge-in",
    {
        (_S.IDLE, _E.RISING): _S.ROSE,
        (_S.ROSE, _E.LAPSED): _S.IDLE,
        (_S.IDLE, _E.OVER_REPLY): _S.JUDGING,
        (_S.ROSE, _E.OVER_REPLY): _S.JUDGING,
        (_S.IDLE, _E.ALONE): _S.IDLE,
        (_S.ROSE, _E.ALONE): _S.IDLE,
        **{(state, _E.WORDS): _S.INTERRUPTED for state in _JUDGED},
        **{(state, _E.MINOR_WORDS): _S.HEARD_BACKCHANNEL for state in _JUDGED},
        **{(state, _E.NO_WORDS): _S.HEARD_NOTHING for state in _JUDGED},
        (_S.JUDGING, _E.LONG): _S.INTERRUPTED,
        (_S.HEARD_NOTHING, _E.LONG): _S.INTERRUPTED,  # (a backchannel is never long enough)
        **{(state, _E.NOISE): _S.IGNORED for state in _JUDGED},
        **{(state, _E.ENDED): _S.IDLE for state in BargeState},
    },
)
"""Barge-in's moves: a new speech starts from IDLE only (the one before it has ended), or
from ROSE (its rise ducked the reply already); only speech being judged can be judged,
and its latest words decide where it stands."""
JUDGED = frozenset(_JUDGED)
"""The states of speech over a ducked reply, still being judged."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How speech over (or not over) a reply ended, as barge-in judges it."""

    signals: list[Signal]
    turn: bool | None
    """Whether it is a turn; None: no reply was ducked for it (its length decides)."""
    noise: bool = False
    """It was judged noise over the reply: its level is the background's."""


class BargeIn:
    """One session's barge-in decisions, speech segment by speech segment."""

    def __init__(self, td: TurnDetection, rate: int, *, words: bool = False) -> None:
        self.retune(td, rate)
        self.rate = rate
        self.noise = ms_to_samples(NOISE_MS, rate)
        self.unheard = ms_to_samples(UNHEARD_MS, rate)
        self.settle = ms_to_samples(SETTLE_MS, rate)
        self.late = ms_to_samples(LATE_MS, rate)
        self.rise = ms_to_samples(RISE_MS, rate)
        self.words = words
        """Transcripts of the speech will come (:meth:`on_words`): they decide, not duration."""
        self.state = BargeState.IDLE
        self._began = 0  # the watermark of the speech being judged (where it began)
        self._rose = 0  # input sample where the sound that ducked the reply (ROSE) rose
        self._held = False  # the speech being judged has silenced the reply (Hold)

    def _move(self, event: BargeEvent) -> BargeState:
        was, self.state = self.state, MOVES.move(self.state, event)
        return was

    def retune(self, td: TurnDetection, rate: int) -> None:
        """New settings (from the next decision on)."""
        self.enabled = td.interrupt_response
        self.min_speech = ms_to_samples(td.barge_in_min_ms, rate)
        self.hold = None if td.barge_in_hold_ms is None else ms_to_samples(td.barge_in_hold_ms, rate)

    @property
    def judging(self) -> bool:
        """Whether a reply is ducked while the speech over it is judged."""
        return self.state in JUDGED

    def abandon(self) -> bool:
        """The speech (or rising sound) ended as no turn and no judgement (cleared, or
        listening stopped): whether a reply was ducked for it (it resumes)."""
        return self._move(BargeEvent.ENDED) in (*JUDGED, BargeState.ROSE)

    def rose(self, at: int, replying: bool) -> list[Signal]:
        """A sound rose out of the quiet at input sample ``at``, not (yet) decided to be
        speech; ``replying``: a reply is being heard. It ducks the reply at once."""
        if self.state is not BargeState.IDLE or not (replying and self.enabled):
            return []
        self._move(BargeEvent.RISING)
        self._rose = at
        return [Duck(at)]

    def quiet(self, now: int) -> list[Signal]:
        """A window to input sample ``now`` with no speech decided: a reply ducked for a
        rising sound comes back once :data:`RISE_MS` have passed."""
        if self.state is not BargeState.ROSE or now - self._rose < self.rise:
            return []
        self._move(BargeEvent.LAPSED)
        return [Resume()]

    def started(self, onset: int, replying: bool, *, began: int | None = None) -> list[Signal]:
        """Speech was decided at input sample ``onset`` and began at ``began`` (the
        watermark of every :class:`Duck` and :class:`Interrupt` for it; default
        ``onset``); ``replying``: a reply is being heard."""
        rose = self._move(BargeEvent.OVER_REPLY if replying and self.enabled else BargeEvent.ALONE) is BargeState.ROSE
        self._began = onset if began is None else began
        self._held = False
        if self.judging:
            return [Duck(self._began)]  # (a reply ducked already stays so)
        return [Resume()] if rose else []

    def on_words(self, text: str, *, loud: bool, heard_ms: int | None = None) -> list[Signal]:
        """A transcript of the speech so far (``heard_ms`` of it, if known); ``loud``: it is at
        the user's own level (speech well below it is someone else, or a loudspeaker)."""
        if not self.judging:
            return []  # (words come when they come: only speech being judged takes them)
        fragment = heard_ms is not None and heard_ms < FRAGMENT_MS
        if fragment and says_something(text) and len(_content_words(text)) < 2 and not holds_command(text):
            return []  # judged on more of it (the next transcript)
        if loud and only_function_words(text):
            return []  # ...likewise ("You had."): a request goes on to what it is about, or lasts
        if loud and says_something(text):
            self._move(BargeEvent.WORDS)
            return [Interrupt(self._began)]
        self._move(BargeEvent.MINOR_WORDS if _WORD.findall(text.lower()) else BargeEvent.NO_WORDS)
        return []

    def speaking(self, onset: int, speech_end: int, *, loud: bool = True) -> list[Signal]:
        """Speech goes on (to ``speech_end`` so far; the silence after it is not speech);
        ``loud``: at the user's own level."""
        if not self.judging:
            return []
        spoken = speech_end - onset
        if loud and self.state is not BargeState.HEARD_BACKCHANNEL and spoken >= self._long(self.state):
            self._move(BargeEvent.LONG)  # the user's voice, long, and not a backchannel
            return [Interrupt(self._began)]
        if not loud and spoken >= self.noise:
            self._move(BargeEvent.NOISE)  # someone else, a loudspeaker: let the reply play on
            return [Resume()]
        if loud and self._holds(spoken):
            self._held = True  # the user's voice, going on, and no backchannel heard: silence it
            return [Hold(self._began)]
        return []

    @property
    def judged(self) -> bool:
        """Whether the speech over the reply is known to be a backchannel (it resumes once
        the speech pauses). Heard as nothing is not enough: the start of a real barge-in,
        chopped by an echo gate, often is."""
        return self.state is BargeState.HEARD_BACKCHANNEL

    def settled(self, onset: int, speech_end: int, now: int) -> bool:
        """Whether speech over the reply that has paused (silent from ``speech_end`` to
        ``now``) should end here, so the reply resumes: as soon as it is known to be no
        turn (by its words), or once short speech has been quiet :data:`LATE_MS` (a blip,
        a click, a recogniser too busy to say). Not sooner: an echo gate chops the start of
        a real barge-in into blips, and they must stay one segment."""
        if not self.judging or now < speech_end + self.settle:
            return False
        short = speech_end - onset < self.min_speech
        return self.judged or (short and now >= speech_end + self.late)

    def stopped(self, onset: int, speech_end: int, *, loud: bool = True) -> Ending:
        """The speech ended: a ducked reply resumes unless the speech was a turn (by its
        words if they say so, else by its level and length)."""
        was = self._move(BargeEvent.ENDED)
        if was is BargeState.IGNORED:
            return Ending([], turn=False, noise=True)
        if was is BargeState.INTERRUPTED:
            return Ending([], turn=True)
        if was is BargeState.IDLE:
            return Ending([], turn=None)
        if was is BargeState.HEARD_BACKCHANNEL or not loud or speech_end - onset < self._long(was):
            return Ending([Resume()], turn=False)
        return Ending([Interrupt(self._began)], turn=True)

    def _holds(self, spoken: int) -> bool:
        """Whether speech at the user's level, ``spoken`` long so far, silences the ducked
        reply now: once, at ``barge_in_hold_ms``, if no transcript has called it a
        backchannel (at 300 ms Whisper hears many a request's first words only as a
        low-confidence guess, dropped: "Turn", "Send")."""
        if self.hold is None or self._held:
            return False
        return self.state is not BargeState.HEARD_BACKCHANNEL and spoken >= self.hold

    def _long(self, state: BargeState) -> int:
        """How long speech at the user's level must be to be a turn by its length alone."""
        return self.min_speech + (self.unheard if state is BargeState.HEARD_NOTHING else 0)
