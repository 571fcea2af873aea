"""A session's transcripts of its user's speech: partials while the user speaks, a
candidate when speech pauses, the final one when the turn is committed.

The candidate is the point: it transcribes exactly the audio the turn would commit
if it ended at that pause, while the turn detector is still deciding. When the turn
does end there, its transcript is already done or nearly so; when the user goes
on, the candidate is dropped and the next pause makes another.

Partial transcripts are re-decodes of the growing segment and may change their last
words; a word is sent (as a ``...transcription.delta``) only once two partials in a
row agree on it, so what was sent is never taken back.
"""

from __future__ import annotations

from dataclasses import dataclass


def capitalized(text: str) -> str:
    """``text`` with its first letter a capital. Whisper begins a turn in lower case now
    and then ("which ocean is the largest.": 6 of 44 held-out turns), while the
    partials the model reads ahead begin with a capital: the reply then read the whole
    turn again, not only its last words, before its first token."""
    start = len(text) - len(text.lstrip())
    return text[:start] + text[start : start + 1].upper() + text[start + 1 :]


@dataclass(slots=True)
class Candidate:
    """A transcript asked for at a pause: speech item ``speech_item``'s audio from
    ``start`` to ``upto`` (its speech ended at ``speech_end``)."""

    speech_item: str
    start: int
    upto: int
    speech_end: int
    text: str | None = None
    failure: str | None = None
    arrived: bool = False


@dataclass(slots=True)
class Waiting:
    """A committed item whose transcript is its candidate's, still on its way."""

    item_id: str
    committed_at: float


class Transcripts:
    """Partials, candidates and the items waiting for them."""

    def __init__(self) -> None:
        self.candidate: Candidate | None = None
        self.waiting: dict[tuple[str, int], Waiting] = {}
        """(speech item, upto) -> the committed item that takes that candidate's text."""
        self._sent: dict[str, list[str]] = {}  # words sent as deltas, per speech item
        self._last: dict[str, list[str]] = {}  # the latest partial's words

    def partial(self, speech_item: str, text: str) -> str:
        """The delta to send for a new partial transcript ("" if nothing new is stable)."""
        words, last = text.split(), self._last.get(speech_item, [])
        self._last[speech_item] = words
        stable = []
        for a, b in zip(words, last, strict=False):
            if a != b:
                break
            stable.append(a)
        sent = self._sent.setdefault(speech_item, [])
        if len(stable) <= len(sent) or stable[: len(sent)] != sent:
            return ""
        new = stable[len(sent) :]
        sent += new
        return (" " if len(sent) > len(new) else "") + " ".join(new)

    def words(self, speech_item: str) -> str:
        """The words of the speech item sent so far (those two partials agreed on)."""
        return " ".join(self._sent.get(speech_item, []))

    def paused(self, speech_item: str, start: int, upto: int, speech_end: int) -> Candidate:
        """A candidate was asked for (the previous one of this item is void now)."""
        self.candidate = Candidate(speech_item, start, upto, speech_end)
        return self.candidate

    def committed(self, speech_item: str | None, span: tuple[int, int], item_id: str, now: float) -> Candidate | None:
        """The turn ``item_id`` commits the speech item's audio ``span``: its candidate,
        if there is one for exactly that audio (else None: transcribe the turn)."""
        self.forget(speech_item)
        c, self.candidate = self.candidate, None
        if speech_item is None or c is None or (c.speech_item, c.start, c.upto) != (speech_item, *span):
            return None
        if not c.arrived:
            self.waiting[(c.speech_item, c.upto)] = Waiting(item_id, now)
        return c

    def arrived(self, speech_item: str, upto: int, text: str, failure: str | None) -> Waiting | Candidate | None:
        """A candidate's transcript: the committed item it completes, if one waits for
        it; else the candidate it completes, if that is still current."""
        waiting = self.waiting.pop((speech_item, upto), None)
        if waiting is not None:
            return waiting
        c = self.candidate
        if c is None or (c.speech_item, c.upto) != (speech_item, upto):
            return None
        c.text, c.failure, c.arrived = text, failure, True
        return c

    def wanted(self, speech_item: str, upto: int) -> bool:
        """Whether a candidate asked for is still of use: current, or awaited by a turn."""
        c = self.candidate
        return (speech_item, upto) in self.waiting or (c is not None and (c.speech_item, c.upto) == (speech_item, upto))

    def covers(self, speech_item: str, upto: int) -> bool:
        """Whether the current candidate hears the speech item's audio to ``upto`` (a
        partial of it adds nothing)."""
        c = self.candidate
        return c is not None and c.speech_item == speech_item and c.upto >= upto

    def forget(self, speech_item: str | None) -> None:
        """No more partials for this speech item."""
        if speech_item is not None:
            self._sent.pop(speech_item, None)
            self._last.pop(speech_item, None)
