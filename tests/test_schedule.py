"""What a step of the chat model's lane serves (the rule alone, no model): a reply about to
run dry writes before another request's prompt is read; a reply starting comes before one
far ahead of its voice; nothing is held back for good."""

from __future__ import annotations

import threading

from duplex.pipeline.segmenter import VOICE_WORDS_PER_S
from duplex.pipeline.thinkers.job import Job
from duplex.pipeline.thinkers.schedule import PROMPT_BESIDE, PROMPT_CHUNK, PROMPT_TOKEN_S, RUNNING_DRY_S, STEP_S, plan


def job(
    *, written: int = 0, words: int = 0, first_at: float = 0.0, pending: int = 0, grammar: str | None = None
) -> Job:
    j = Job(0, [1] * 20, 64, 0.2, (40, 0.95, 0.05), 0, grammar, None, threading.Event())
    j.pending = [1] * pending
    j.written, j.words, j.first_at = written, words, first_at
    j.last = 7 if written else -1
    return j


def said_by(words: int, margin_s: float) -> float:
    """When a reply that began at 0 with ``words`` written is ``margin_s`` ahead of its voice."""
    return words / VOICE_WORDS_PER_S - margin_s


def test_a_reply_about_to_run_dry_writes_before_another_prompt_is_read():
    # "Adults typically need " spoken, then "7-9" a digit a step: 0.3 s of words left.
    speaking, reading = job(written=6, words=4), job(pending=14)
    step = plan([speaking, reading], said_by(4, RUNNING_DRY_S - 0.1))
    assert step.writers == [speaking] and step.budget == 0
    step = plan([speaking, reading], said_by(4, 2.0))
    assert step.writers == [speaking] and step.budget == PROMPT_BESIDE


def test_a_step_beside_a_reply_ends_before_its_words_are_said():
    # 0.5 s of words left: a step reading 14 prompt tokens (~0.48 s) would end as they do.
    speaking, reading = job(written=6, words=4), job(pending=14)
    for lead in (RUNNING_DRY_S + 0.02, 0.5, 0.7):
        budget = plan([speaking, reading], said_by(4, lead)).budget
        assert 0 < budget < PROMPT_BESIDE and STEP_S + budget * PROMPT_TOKEN_S <= lead
    leads = [0.45, 0.6, 0.8, 1.0]
    budgets = [plan([speaking, reading], said_by(4, lead)).budget for lead in leads]
    assert budgets == sorted(budgets) and budgets[-1] == PROMPT_BESIDE, "more read the further ahead it is"


def test_a_call_a_reply_behind_its_voice_or_not_yet_spoken_holds_no_prompt_back():
    reading = job(pending=14)
    call = job(written=6, words=4, grammar='root ::= "{}"')  # a call is not spoken
    assert plan([call, reading], said_by(4, 0.1)).budget == PROMPT_BESIDE
    behind = job(written=6, words=4)  # a model slower than its voice: it would hold them for good
    assert plan([behind, reading], said_by(4, -0.5)).budget == PROMPT_BESIDE
    fresh = job(written=2, words=2)  # its voice cannot have begun
    assert plan([fresh, reading], said_by(2, 0.1)).budget == PROMPT_BESIDE
    assert plan([reading], 0.0).budget == PROMPT_CHUNK  # nobody writing: a whole chunk


def test_a_reply_far_ahead_of_its_voice_sits_out_while_another_starts():
    now = 2.0
    far = job(written=60, words=40)  # ~13 s of words after 2 s
    new = job(written=3, words=2, first_at=now - 0.3)
    assert plan([far, new], now).writers == [new]
    done_starting = job(written=20, words=14, first_at=0.5)
    assert plan([far, done_starting], now).writers == [far, done_starting]
