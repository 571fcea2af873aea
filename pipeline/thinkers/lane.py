"""One lane of the chat model's engine: a llama.cpp context of its own over the shared
weights, with a worker thread that decodes the slots given to it.

Each *slot* is a sequence of the lane's cache and remembers the tokens it holds, so a
request evaluates only what differs from the slot's last prompt (a conversation's prefix
stays read between turns). Every step decodes one batch: a token for each slot that is
writing, and the prompts still being read (at most :data:`PROMPT_CHUNK` of them a step,
so replies already speaking keep their pace).

Why lanes: on two cores, four conversations at once wrote a token each in ~183 ms on one
context at one thread, ~138 ms on each of two contexts at one thread each (two threads on
one context wait for each other at every layer, and lose whenever a recogniser or a voice
preempts one of them). The engine (:mod:`~duplex.pipeline.thinkers.engine`) spreads the
slots over its lanes.
"""

from __future__ import annotations

import codecs
import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplex.pipeline.thinkers.sampling import logprobs, sample

PROMPT_CHUNK = 128
"""Prompt tokens read in one step while no reply is being written..."""
PROMPT_BESIDE = 32
"""...and while one is: a step's time is a pause in every reply being written."""
SHARED_S = 4.0
"""Requests in more than one slot within this: several conversations share the cores."""
BATCH = 512
GRAMMAR_FIRST = 256
"""Candidates a grammar judges before the whole vocabulary (~150 k tokens: slow to judge each step)."""

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
    grammar_state: Any = None
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))


@dataclass
class Shared:
    """What an engine's lanes share: the loaded weights and their vocabulary, the thread
    budget, and when each slot (numbered across the lanes) last had a request."""

    C: Any
    lib: Any
    model: Any
    vocab: Any
    n_vocab: int
    threads: int
    lanes: int
    used: list[float]


class Lane:
    """A context of ``context`` tokens for each of ``slots`` (the engine's numbers for
    them), and the thread that decodes it."""

    def __init__(self, m: Shared, index: int, slots: list[int], context: int) -> None:
        self.m, self.index, self.slots = m, index, slots
        cp = m.C.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = context * len(slots), BATCH, BATCH, len(slots)
        cp.n_threads = cp.n_threads_batch = self._threads_now = self._most()
        cp.flash_attn = False  # ik's flash attention asserts on long prompts without AVX-VNNI
        self._ctx = m.lib.llama_init_from_model(m.model, cp)
        if not self._ctx:
            raise RuntimeError("llama.cpp could not make a context")
        self._batch = m.C.llama_batch_init(BATCH, 0, 1)
        self._cached: list[list[int]] = [[] for _ in slots]
        self._active: dict[int, Job] = {}
        self._queue: list[Job] = []
        self._wake = threading.Condition()
        self._closed = False
        self._rng = np.random.default_rng()
        self.counters = {"prompt_tokens_total": 0.0, "tokens_predicted_total": 0.0}
        self._thread = threading.Thread(target=self._run, name=f"llama-lane-{index}", daemon=True)
        self._thread.start()

    @property
    def load(self) -> int:
        """Requests running or waiting here."""
        return len(self._active) + len(self._queue)

    @property
    def running(self) -> int:
        """Requests running here."""
        return len(self._active)

    @property
    def threads_now(self) -> int:
        """The threads its steps use now."""
        return self._threads_now

    def submit(self, job: Job) -> bool:
        """Queue ``job`` (its slot is this lane's index, or None for any); False once closed."""
        with self._wake:
            if self._closed:
                return False
            self._queue.append(job)
            self._wake.notify()
        return True

    def close(self) -> None:
        """Stop the worker (requests in flight end with an error) and free the context."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()
        self.m.C.llama_batch_free(self._batch)
        self.m.lib.llama_free(self._ctx)

    # -- the worker ------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        finally:  # closed (or broken): nothing waits for ever
            with self._wake:
                self._closed = True
                for job in [*self._active.values(), *self._queue]:
                    self._finish(job, "the model was closed")
                self._queue.clear()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._active and not self._startable():
                    self._wake.wait()
                if self._closed:
                    return
                for job in self._startable():
                    self._queue.remove(job)
                    try:
                        self._start(job)
                    except Exception as exc:  # this request fails, not the engine
                        self._finish(job, f"llama.cpp failed: {exc}")
            try:
                self._step()
            except Exception as exc:  # a failed decode fails what was in it, not the engine
                for job in list(self._active.values()):
                    self._finish(job, f"llama.cpp failed: {exc}")

    def _startable(self) -> list[Job]:
        """Queued requests whose slot is free (the first free one for a request with none)."""
        out, taken = [], set(self._active)
        for job in self._queue:
            if job.slot is None:
                free = [s for s in range(len(self._cached)) if s not in taken]
                if free:
                    job.slot = min(free, key=lambda s: self.m.used[self.slots[s]])
            if job.slot is not None and job.slot not in taken:
                taken.add(job.slot)
                out.append(job)
        return out

    def _start(self, job: Job) -> None:
        assert job.slot is not None
        cached = self._cached[job.slot]
        keep = 0 if job.cache_n < 0 else _common(cached, job.tokens)
        if keep == len(job.tokens) and job.max_tokens > 0:
            keep -= 1  # the last token is read again for its logits
        self.m.lib.llama_kv_cache_seq_rm(self._ctx, job.slot, keep, -1)
        del cached[keep:]
        job.cache_n, job.pending, job.began = keep, job.tokens[keep:], time.monotonic()
        if job.grammar:
            job.grammar_state = self.m.lib.llama_sampler_init_grammar(self.m.vocab, job.grammar.encode(), b"root")
            if not job.grammar_state:
                self._finish(job, "the grammar does not parse")
                return
        self._active[job.slot] = job
        self.m.used[self.slots[job.slot]] = time.monotonic()

    def _step(self) -> None:
        """One decode: a token for each writer, then prompt tokens up to the chunk."""
        rows: list[tuple[Job, int, bool]] = []  # (job, token, wants logits)
        for job in list(self._active.values()):
            if job.stop.is_set():
                self._finish(job)
            elif not job.pending and job.last >= 0:
                rows.append((job, job.last, True))
        budget = PROMPT_BESIDE if rows else PROMPT_CHUNK
        for job in self._active.values():
            if job.pending and budget > 0:
                take, job.pending = job.pending[:budget], job.pending[budget:]
                budget -= len(take)
                last = not job.pending
                rows += [(job, t, last and i == len(take) - 1) for i, t in enumerate(take)]
        if not rows:
            for job in [j for j in self._active.values() if not j.pending and j.last < 0]:
                self._finish(job)  # a prompt read with nothing to write (a read-ahead)
            return
        now = time.monotonic()
        several = sum(now - t < SHARED_S for t in self.m.used) > 1
        self._use_threads(max(1, self.m.threads // max(self.m.lanes, 2)) if several else self._most())
        b = self._batch
        b.n_tokens = len(rows)
        for i, (job, token, logits) in enumerate(rows):
            assert job.slot is not None
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, len(self._cached[job.slot]), 1, logits
            b.seq_id[i][0] = job.slot
            self._cached[job.slot].append(token)
        if (ret := self.m.C.llama_decode(self._ctx, b)) != 0:
            for job in {id(j): j for j, _, _ in rows}.values():  # what it held is not in the cache
                assert job.slot is not None
                self._cached[job.slot].clear()
                self.m.lib.llama_kv_cache_seq_rm(self._ctx, job.slot, 0, -1)
            raise RuntimeError(f"decode returned {ret} (the cache is full?)")
        self.counters["prompt_tokens_total"] += sum(1 for job, _, _ in rows if job.last < 0)
        for i, (job, _, logits) in enumerate(rows):
            if job.slot is None or self._active.get(job.slot) is not job:
                continue  # finished in this step
            if job.stop.is_set():
                self._finish(job)
            elif logits:
                try:
                    self._write(job, i)
                except Exception as exc:  # (its grammar allowed nothing): this request fails, not the others
                    self._finish(job, f"llama.cpp failed: {exc}")

    def _most(self) -> int:
        """The threads this lane may use while one conversation is talking: all of them in
        the first lane, one in the others. OpenMP (the model's threads) stops spinning at
        its barriers once it manages more threads than there are cores: after a second lane
        had run two threads too, one stream at two threads took 76 ms a token, not 57."""
        return self.m.threads if self.index == 0 else max(1, self.m.threads // max(self.m.lanes, 2))

    def _use_threads(self, n: int) -> None:
        """All the threads while one conversation is talking (in the first lane, where a
        conversation talking alone is put); while several are (requests in more than one
        slot within :data:`SHARED_S`) a lane takes its share of them, one each on two cores.
        One lane with two threads that wait for each other at every layer lost more than it
        won against the conversations' recognisers and voices; two lanes of one thread each
        never wait for each other (docs/benchmarks-history.md, 2026-12-06, "Two lanes")."""
        if n != self._threads_now:
            self.m.lib.llama_set_n_threads(self._ctx, n, n)
            self._threads_now = n

    def _write(self, job: Job, row: int) -> None:
        """Sample the job's next token from row ``row``'s logits and stream it."""
        if job.last < 0:
            job.prompt_ms = (time.monotonic() - job.began) * 1000
            if job.max_tokens <= 0:
                self._finish(job)
                return
        logits = np.ctypeslib.as_array(self.m.C.llama_get_logits_ith(self._ctx, row), (self.m.n_vocab,)).copy()
        if job.grammar_state:
            logits = self._constrain(job, logits)
        token = sample(logits, 0.0 if job.grammar_state else job.temperature, job.sampling, self._rng)
        chunk: Chunk = {}
        if job.top_logprobs and job.written == 0:
            chunk = {"logprobs": {"content": [logprobs(logits, token, job.top_logprobs, self._text)]}}
        if self.m.C.llama_token_is_eog(self.m.model, token):
            self._finish(job)
            return
        if job.grammar_state:
            self.m.lib.llama_grammar_accept_token(job.grammar_state, self._ctx, token)
        job.last, job.written = token, job.written + 1
        self.counters["tokens_predicted_total"] += 1
        piece = job.decoder.decode(self._piece(token))
        job.text.append(piece)
        if job.on_chunk is not None and job.on_chunk({"choices": [{"delta": {"content": piece}, **chunk}]}):
            job.stop.set()
        if job.written >= job.max_tokens:
            self._finish(job)  # (a forced call ends at its object's close: the grammar then allows only the end)

    def _constrain(self, job: Job, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the tokens the grammar forbids at -inf: the likeliest
        :data:`GRAMMAR_FIRST` are judged first, the whole vocabulary only if none of them may follow."""
        first = np.argpartition(-logits, GRAMMAR_FIRST)[:GRAMMAR_FIRST]
        for ids in (first, np.arange(self.m.n_vocab)):
            data = np.zeros(ids.size, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            data["id"], data["logit"] = ids, logits[ids]
            arr = self.m.C.llama_token_data_array(
                data.ctypes.data_as(ctypes.POINTER(self.m.C.llama_token_data)), ids.size, -1, False
            )
            self.m.lib.llama_grammar_sample(job.grammar_state, self._ctx, ctypes.byref(arr))
            kept = data[: int(arr.size)]
            kept = kept[np.isfinite(kept["logit"])]
            if kept.size:
                out = np.full(self.m.n_vocab, -np.inf, np.float32)
                out[kept["id"]] = kept["logit"]
                return out
        raise RuntimeError("the grammar allows no token")

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.m.C.llama_token_to_piece(self.m.model, token, buf, 64, 0, False)
        return buf.raw[: max(n, 0)]

    def _text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", "replace")

    def _finish(self, job: Job, error: str | None = None) -> None:
        job.error = job.error or error
        if job.slot is not None and self._active.get(job.slot) is job:
            del self._active[job.slot]  # (a prompt left half read: the cache holds what was read)
        if job.grammar_state:
            self.m.lib.llama_grammar_free(job.grammar_state)
            job.grammar_state = None
        try:
            if job.on_chunk is not None and job.error is None:
                job.on_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": timings(job)})
        except Exception:  # noqa: S110 (whoever streamed it is gone, its loop closed: it still ends)
            pass
        finally:
            job.done.set()  # (else the caller waits for ever: a test's thread hung at exit once)


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0])


def timings(job: Job) -> dict[str, Any]:
    predicted_ms = (time.monotonic() - job.began) * 1000 - job.prompt_ms if job.began else 0.0
    return {
        "prompt_n": len(job.tokens) - max(job.cache_n, 0),
        "cache_n": max(job.cache_n, 0),
        "prompt_ms": round(job.prompt_ms, 1),
        "predicted_n": job.written,
        "predicted_ms": round(predicted_ms, 1),
    }
