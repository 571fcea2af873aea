"""Cutting a reply's text stream into pieces worth speaking.

The first pieces end at clause boundaries, so speech starts long before the model has
finished and stays ahead of it; later ones at sentence ends, so the voice flows. When the model
writes well ahead of the voice, the first piece is only its first few words (the
voices make those alone anyway) and the next one ends at the clause boundary: the
listener waits for three words, not a clause, and the clause is written while they
play. A model that writes slower than that would run dry after so few words: it waits
for as many as keep the voice going while it writes the rest of a clause (more, the
slower it is; held out, four at once, "There are 8 planets in our solar system." had
waited 1.5-2.3 s after its first token for its full stop), or for the clause. How fast
the model writes is judged by its tokens (a stream's pieces), not its words: a number's
digits are a token each, so "There are 16" took five steps to its third word and looked
slower than the model was. How long what is queued plays is judged by the words the voice
says: a number's digit groups a word each at least ("7-9" had counted as one word, so a
reply that had run out waited for the next word too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIRST_WORDS = 3
"""Words a fast model's first piece may be (the voices make a reply's first three
words alone: ``pipeline.talkers.segments.FIRST_WORDS``)."""
VOICE_WORDS_PER_S = 3.1
"""How fast the voice speaks (hibari at speed 1 said six sentences at 2.8–3.5 words a
second, median 3.1)."""
CLAUSE_WORDS = 12
"""Segments end at clauses, not sentences, until this many words are out (~4 s of
speech): each is soon written, so what plays stays ahead of a model that has only just
begun (a long second sentence ran a reply dry for 220 ms)."""
MARGIN_S = 0.5
"""Once what is queued to play would run out within this, the words written so far go at
once, whether or not their clause is complete (a long clause after the first words ran
a reply dry for half a second)."""
TOKENS_PER_WORD = 1.3
"""Tokens a model writes for a spoken word, on the whole (a word, or part of one, with
its leading space; punctuation; a digit each): the rest of a reply is mostly words, so a
model's token rate over this is the word rate its voice can count on."""
AHEAD = 1.0
"""How many times faster than the voice the model must write for its first words to go
alone: the rest of the clause is then written while those words play (and what is
written goes anyway before the voice would run out: ``MARGIN_S``). At 2.0 the first words
of four conversations answered at once (~5 words a second each) waited for their
clause; at 1.3 their first audio came 0.5-0.7 s sooner at the median, no reply ran dry,
and one conversation alone (~10 words a second) is unchanged. 1.0 was no faster then;
on the 2-core Xeon, where four at once write ~3.5-4 words a second each (a number's
digits a token each), 1.3 held "There are 16 ounces in a pound." for its clause, 1.6 s
after its first token, and 1.0 cut the four-at-once first audio p95 2.03 -> 1.69 s on the
tune part, 2.06-2.21 -> 1.81 s held out, no reply dry (scripts/bench_conversation.py
--parallel 4, docs/benchmarks.md). Since then the pace is the model's tokens (see the module)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A speakable piece of the reply and where it sits in the reply's text."""

    offset: int
    text: str


_CLAUSE = re.compile(r"(?<!\d)[,;:]|[,;:.!?](?=\s)|(?<!\d)\.$|[!?]$")
"""A clause's end: a comma (or ``;``, ``:``) after a word as soon as it is written (it
cannot be a number's, as in "1,000", so its next token is not waited for); after a
digit, only once a space follows; a full stop likewise ("about 6." may be "6.4")."""
_SENTENCE = re.compile(r"[.!?;](?=\s)")
_WORD_END = re.compile(r"\S(?=\s)")
_SPOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?|\d+")
"""A word as the voice says it: a number's digit groups are a word each at least ("7-9" is
two, said "seven to nine"), where a space-separated count took it for one."""


def spoken_words(text: str) -> int:
    """How many words the voice says for ``text``, at the least."""
    return len(_SPOKEN.findall(text))


class Segmenter:
    """Cuts a stream of text deltas into segments worth speaking.

    The first segments end at clause boundaries (or a space before ``first_max``
    characters) until ``CLAUSE_WORDS`` words are out, so the talker starts early and
    stays ahead; later ones at sentence ends (or a space before ``max_chars``), so the
    voice flows. While the first clause
    is still being written, its first ``first_words`` words (or more) go alone if the text
    came at least ``ahead`` times as fast as the voice speaks, less the share of a
    ``CLAUSE_WORDS`` clause already written (a delta a token, at :data:`TOKENS_PER_WORD`;
    ``feed``'s ``now`` says when);
    the clause's rest is then the next segment. And whenever what has been cut would
    have been said (at the voice's pace) within ``MARGIN_S``, the words written so far
    go, clause or not. Linear in the text: each cut looks
    only at the next ``max_chars`` characters, and consumed text is dropped from the
    buffer in halves, never re-sliced per segment.
    """

    def __init__(
        self, *, first_max: int = 48, max_chars: int = 240, first_words: int = FIRST_WORDS, ahead: float = AHEAD
    ) -> None:
        self.first_max = first_max
        self.max_chars = max_chars
        self.first_words = first_words
        self.ahead = ahead
        self._buffer = ""
        self._pos = 0  # start of the text not yet cut, in the buffer
        self._offset = 0  # reply offset of self._buffer[0]
        self._count = 0
        self._words_out = 0  # words in the segments cut so far
        self._began: float | None = None  # when the first text came
        self._deltas = 0  # deltas since (a model streams a token each)
        self._queued_until: float | None = None  # when what has been cut will have been said

    def feed(self, delta: str, now: float = 0.0) -> list[Segment]:
        """Segments that ``delta``, arriving at ``now`` (seconds, any origin), completes."""
        if self._pos and self._pos * 2 >= len(self._buffer):
            self._buffer = self._buffer[self._pos :]
            self._offset += self._pos
            self._pos = 0
        if self._began is None and delta.strip():
            self._began = now
        if self._began is not None and delta:
            self._deltas += 1
        self._buffer += delta
        out = []
        while (cut := self._cut(now)) is not None:
            out.append(self._take(cut, now))
        return out

    def finish(self) -> list[Segment]:
        """The rest, at the end of the text."""
        return [self._take(len(self._buffer))] if self._buffer[self._pos :].strip() else []

    def _cut(self, now: float) -> int | None:
        b, pos = self._buffer, self._pos
        early = self._words_out < CLAUSE_WORDS
        pattern, limit = (_CLAUSE, self.first_max) if early else (_SENTENCE, self.max_chars)
        end = min(len(b), pos + limit + 1)  # a boundary further on would make the segment too long
        m = pattern.search(b, pos, end)
        if m and (end == len(b) or m.end() < end):  # not a "$" that only matched at the window's end
            return m.end()
        if len(b) - pos > limit:
            space = b.rfind(" ", pos, pos + limit)
            return space + 1 if space > pos else pos + limit
        if self._count == 0:
            return self._first_words(now)
        return self._before_running_dry(now)

    def _before_running_dry(self, now: float) -> int | None:
        """Where the words written so far end, if what is queued would otherwise run out
        (once it has, two words at least: a phrase after a gap, not word by word)."""
        if self._queued_until is None:
            return None
        slack = self._queued_until - now
        if slack >= MARGIN_S:
            return None
        ends = [m.end() for m in _WORD_END.finditer(self._buffer, self._pos)]
        if not ends or spoken_words(self._buffer[self._pos : ends[-1]]) < (1 if slack > 0 else 2):
            return None
        return ends[-1] + 1

    def _first_words(self, now: float) -> int | None:
        """Where the first words end, if they may go alone now (the model is far ahead)."""
        if self.first_words <= 0 or self._began is None:
            return None
        ends = [m.end() for m in _WORD_END.finditer(self._buffer, self._pos)]
        if len(ends) < self.first_words:
            return None
        elapsed = now - self._began
        # The more words are written, the slower the model may be: ``k`` words said while it
        # writes the rest of a ``CLAUSE_WORDS`` clause at ``w`` keep the voice going if
        # k >= CLAUSE_WORDS * (1 - w / voice), as the words written go before what plays runs out.
        needed = self.ahead * VOICE_WORDS_PER_S * TOKENS_PER_WORD * max(0.0, 1 - len(ends) / CLAUSE_WORDS)
        if elapsed > 0 and (self._deltas - 1) / elapsed < needed:
            return None  # (tokens written since the first, over the time they took)
        return ends[-1] + 1  # every complete word, and the space after the last

    def _take(self, cut: int, now: float | None = None) -> Segment:
        seg = Segment(self._offset + self._pos, self._buffer[self._pos : cut])
        self._pos = cut
        self._count += 1
        self._words_out += len(seg.text.split())
        if now is not None:  # said at the voice's pace, after what is queued (or now, if that ran out)
            self._queued_until = max(self._queued_until or now, now) + spoken_words(seg.text) / VOICE_WORDS_PER_S
        return seg
