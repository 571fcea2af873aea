"""What one step of a lane serves: which replies write a token, and how many prompt tokens
are read beside them. The rule alone (requests and a clock in, a plan out), apart from
llama.cpp, so it can be read and tested on its own; :mod:`~duplex.pipeline.thinkers.lane`
carries it out.

A step's time is a pause in every reply it writes (one to four writers took 115-183 ms a
step at one thread, and each prompt token read beside them ~20 ms more), so what a
listener would hear first comes first: a reply about to run out of words before another
request's prompt, a reply starting before one far ahead of its voice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from duplex.pipeline.thinkers.job import Job

PROMPT_CHUNK = 128
"""Prompt tokens read in one step while no reply is being written..."""
PROMPT_BESIDE = 32
"""...and while one is: a step's time is a pause in every reply being written."""
STARTING = 12
"""A reply is *starting* while its prompt is read and until it has written this many
tokens (its first words go to the voice alone only if they come fast, else its first clause)."""
AHEAD_S = 1.0
"""A reply whose words, at the voice's pace, would last this much longer than it has
been writing sits out the steps of its lane while another reply there is starting: a step
costs more the more it writes, and the one starting is what a user waits for. Its voice
cannot have begun before its first token, so the margin is at least this."""
RUNNING_DRY_S = 0.4
"""A reply whose words would be said within this of the time it has been writing is
about to run dry: no prompt is read beside it until its next words are out. Four
conversations at once, its first words spoken, a number after them ("Adults typically
need 7-9 hours", "There are 366 days") written a digit a step, and a step that also
read another turn's 14 prompt tokens (~450 ms): the voice ran out for 100-120 ms, in
three of five held-out runs; with this rule for 20-60 ms in three of nine (20 ms in three
of seven before the first words were judged by tokens; scripts/bench_conversation.py
--parallel 4, docs/benchmarks-history.md, "2026-12-06 (the Xeon, evening)"). Beyond
it, a step reads only what it can and still end before those words are said
(:func:`beside`): four runs in turn with the rule above alone, 7 replies ran dry for
60-520 ms (every run); with both, 3 for 20-160 ms ("2026-12-06 (the Xeon, 18:00)")."""
STEP_S = 0.2
"""What a step that writes costs before the prompt tokens it reads (one to four writers:
115-183 ms at one thread)..."""
PROMPT_TOKEN_S = 0.02
"""...and each prompt token read beside them (a writer and 8-15 prompt tokens: 355 ms,
the median of 103 such steps, four conversations at once on the 2-core Xeon)."""
SPOKEN_AFTER = 4
"""Tokens a reply writes before its voice can have begun (three words and the start of
the next, at the least): before that it cannot run dry, only start late."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One step: the replies that write a token in it, and the prompt tokens read beside them."""

    writers: list[Job]
    budget: int


def plan(active: Iterable[Job], now: float) -> Plan:
    """The step for a lane's ``active`` requests at ``now`` (the lane's clock)."""
    jobs = list(active)
    writing = [j for j in jobs if not j.pending and j.last >= 0]
    anyone_starting = any(starting(j) for j in jobs)
    writers = [j for j in writing if not (anyone_starting and not starting(j) and j.ahead_s(now) > AHEAD_S)]
    if not writing:
        return Plan(writers, PROMPT_CHUNK)
    return Plan(writers, min([PROMPT_BESIDE, *(beside(j, now) for j in writers)]))


def beside(job: Job, now: float) -> int:
    """Prompt tokens a step at ``now`` may read beside ``job`` writing: none while its
    voice may be about to run out of words (its words would be said within
    :data:`RUNNING_DRY_S` of the time it has been writing), and beyond that no more than a
    step can read and still end before they are said (:data:`STEP_S`,
    :data:`PROMPT_TOKEN_S`). A call is not spoken, and a reply's voice cannot have begun
    before :data:`SPOKEN_AFTER` tokens. Nor once it is behind its voice: a model slower
    than its voice would otherwise hold every other prompt back for good, and a step
    alone writes ~0.8 words in ~0.12 s, so a reply that keeps up is out of the window
    within a step or two."""
    lead = job.ahead_s(now)
    if job.grammar is not None or job.written < SPOKEN_AFTER or lead <= 0.0:
        return PROMPT_BESIDE
    if lead < RUNNING_DRY_S:
        return 0
    return min(PROMPT_BESIDE, int((lead - STEP_S) / PROMPT_TOKEN_S))


def starting(job: Job) -> bool:
    """Whether ``job`` is reading its prompt or writing its first :data:`STARTING` tokens."""
    return bool(job.pending) or job.written < STARTING
