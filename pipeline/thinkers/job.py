"""A request to the chat model's engine, as a lane works on it: its prompt, how it is
written, where it stands; and the start of a prompt copied from another slot's cache."""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplex.pipeline.segmenter import VOICE_WORDS_PER_S

Chunk = dict[str, Any]
OnChunk = Callable[[Chunk], bool]
"""Called with each streamed chunk (on the engine's thread); True stops the request."""


@dataclass
class Job:
    """One request: its prompt, how to write, and where it stands."""

    slot: int | None
    tokens: list[int]
    max_tokens: int
    temperature: float
    sampling: tuple[int, float, float]
    """top_k, top_p, min_p."""
    top_logprobs: int
    grammar: str | None
    on_chunk: OnChunk | None
    stop: threading.Event
    min_tokens: int = 0
    """Tokens it writes before its end is allowed (vLLM's ``min_tokens``)."""
    done: threading.Event = field(default_factory=threading.Event)
    pending: list[int] = field(default_factory=list)
    """Prompt tokens still to read."""
    written: int = 0
    text: list[str] = field(default_factory=list)
    cache_n: int = 0
    began: float = 0.0
    prompt_ms: float = 0.0
    error: str | None = None
    last: int = -1
    """The token written last (decoded in the next step)."""
    first_at: float = 0.0
    """When its first token was written."""
    words: int = 0
    """Words written (a piece that begins with a space begins one)."""
    ended: float = 0.0
    grammar_state: Any = None
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def ahead_s(self, now: float) -> float:
        """How much longer its words would take the voice to say than it has been writing
        (its voice cannot have begun before its first token)."""
        return self.words / VOICE_WORDS_PER_S - (now - self.first_at)


@dataclass
class Copied:
    """The start of a prompt another slot's cache holds: a sequence of the same lane
    (``seq``), or KV cells copied out of another lane's context (``data``)."""

    tokens: list[int]
    seq: int | None = None
    data: Any = None
    size: int = 0


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0])


def timings(job: Job) -> dict[str, Any]:
    """llama.cpp server's timings of a request."""
    predicted_ms = (job.ended - job.began) * 1000 - job.prompt_ms if job.began and job.ended else 0.0
    return {
        "prompt_n": len(job.tokens) - max(job.cache_n, 0),
        "cache_n": max(job.cache_n, 0),
        "prompt_ms": round(job.prompt_ms, 1),
        "predicted_n": job.written,
        "predicted_ms": round(predicted_ms, 1),
    }
