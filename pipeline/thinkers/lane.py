"""One lane of the chat model's engine: a llama.cpp context of its own over the shared
weights, with a worker thread that decodes the slots given to it.

Each *slot* is a sequence of the lane's cache and remembers the tokens it holds, so a
request evaluates only what differs from the slot's last prompt (a conversation's prefix
stays read between turns). Every step decodes one batch: a token for each slot that is
writing, and the prompts still being read, as much of them as the step's plan allows
(:mod:`~duplex.pipeline.thinkers.schedule`: replies already speaking keep their pace, a
reply about to run dry writes before a prompt is read, a reply starting comes before one
far ahead of its voice).

Why lanes: on two cores, four conversations at once wrote a token each in ~183 ms on one
context at one thread, ~138 ms on each of two contexts at one thread each (two threads on
one context wait for each other at every layer, and lose whenever a recogniser or a voice
preempts one of them). The engine (:mod:`~duplex.pipeline.thinkers.engine`) spreads the
slots over its lanes.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplex.pipeline.thinkers.gbnf import allowed
from duplex.pipeline.thinkers.job import Chunk, Copied, Job, common_prefix, timings
from duplex.pipeline.thinkers.sampling import logprobs, sample
from duplex.pipeline.thinkers.schedule import plan

SHARED_S = 4.0
"""Requests in more than one slot within this: several conversations share the cores."""
BORROW = 16
"""A request starts from another slot's cache when that holds this many more of its
prompt's first tokens than its own slot does (a copy takes milliseconds; reading 300
tokens of a system prompt and tools took 5-8 s at one thread beside other replies)."""
BORROW_WAIT_S = 0.3
"""How long a lane waits for another lane's step to end to copy from its cache (else it
reads the prompt itself: its own replies wait meanwhile)."""
BATCH = 512


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
    clock: Callable[[], float] = time.monotonic
    lanes_made: list[Lane] = field(default_factory=list)
    """The lanes, once made (a new conversation's prompt may start as another slot's does)."""


class Lane:
    """A context of ``context`` tokens for each of ``slots`` (the engine's numbers for
    them), and the thread that decodes it."""

    def __init__(self, m: Shared, index: int, slots: list[int], context: int) -> None:
        self.m, self.index, self.slots = m, index, slots
        cp = m.C.llama_context_default_params()
        # (one sequence more than the slots: a prefix is copied out of it)
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = context * len(slots), BATCH, BATCH, len(slots) + 1
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
        self._lock = threading.Lock()
        """Held while the context is used: another lane copies from it between steps."""
        self._closed = False
        self._holes = False
        """Cells were taken out of a sequence since the cache was last compacted (see :meth:`_compact`)."""
        self._rng = np.random.default_rng()
        self.counters = {"prompt_tokens_total": 0.0, "tokens_predicted_total": 0.0}
        self.borrowed = 0
        """Prompt tokens that were not read but copied from another slot's cache."""
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
        with self._lock:
            self.m.C.llama_batch_free(self._batch)
            self.m.lib.llama_free(self._ctx)
            self._ctx = None

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
                starting = self._startable()
                for job in starting:
                    self._queue.remove(job)
            for job in starting:
                try:
                    copied = self._borrow(job)  # (holding no lock of its own: two lanes may borrow at once)
                    with self._lock:
                        self._start(job, copied)
                except Exception as exc:  # this request fails, not the engine
                    self._finish(job, f"llama.cpp failed: {exc}")
            try:
                with self._lock:
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

    def _start(self, job: Job, copied: Copied | None) -> None:
        assert job.slot is not None
        if copied is not None:
            self._adopt(job.slot, copied)
        cached = self._cached[job.slot]
        keep = 0 if job.cache_n < 0 else common_prefix(cached, job.tokens)
        if keep == len(job.tokens) and job.max_tokens > 0:
            keep -= 1  # the last token is read again for its logits
        self.m.lib.llama_kv_cache_seq_rm(self._ctx, job.slot, keep, -1)
        self._holes = True
        del cached[keep:]
        job.cache_n, job.pending, job.began = keep, job.tokens[keep:], self.m.clock()
        if job.grammar:
            job.grammar_state = self.m.lib.llama_sampler_init_grammar(self.m.vocab, job.grammar.encode(), b"root")
            if not job.grammar_state:
                self._finish(job, "the grammar does not parse")
                return
        self._active[job.slot] = job
        self.m.used[self.slots[job.slot]] = job.began

    # -- a prompt's start from another slot's cache ------------------------------

    def _borrow(self, job: Job) -> Copied | None:
        """The longest start of the job's prompt that another slot's cache holds, if it is
        :data:`BORROW` tokens more than its own slot's: a sequence of this lane (shared, not
        copied), or another lane's KV cells copied out between its steps."""
        if job.slot is None or job.cache_n < 0:
            return None
        own = common_prefix(self._cached[job.slot], job.tokens)
        best: tuple[Lane, int, int] | None = None
        for lane in self.m.lanes_made:
            for seq, cached in enumerate(lane._cached):
                if lane is self and seq == job.slot:
                    continue
                n = common_prefix(list(cached), job.tokens)  # (another lane's list: a copy, read between its appends)
                if n >= own + BORROW and (best is None or n > best[2]):
                    best = (lane, seq, n)
        if best is None:
            return None
        lane, seq, n = best
        if lane is self:
            return Copied(job.tokens[:n], seq=seq)
        return lane._export(seq, job.tokens)

    def _export(self, seq: int, tokens: list[int]) -> Copied | None:
        """(Called from another lane's thread.) The KV cells of the start ``tokens`` shares
        with sequence ``seq``, copied out once this lane's step ends; None if it does not
        end within :data:`BORROW_WAIT_S`."""
        if not self._lock.acquire(timeout=BORROW_WAIT_S):
            return None
        try:
            n = common_prefix(self._cached[seq], tokens)
            if self._ctx is None or n < BORROW:
                return None
            lib, scratch = self.m.lib, len(self.slots)
            lib.llama_kv_cache_seq_rm(self._ctx, scratch, 0, -1)
            lib.llama_kv_cache_seq_cp(self._ctx, seq, scratch, 0, n)  # (the cells are shared, not copied)
            size = lib.llama_state_seq_get_size(self._ctx, scratch, 0)
            data = (ctypes.c_uint8 * size)()
            got = lib.llama_state_seq_get_data(self._ctx, data, size, scratch, 0)
            lib.llama_kv_cache_seq_rm(self._ctx, scratch, 0, -1)
            self._holes = True
            return Copied(tokens[:n], data=data, size=got) if got else None
        finally:
            self._lock.release()

    def _adopt(self, slot: int, copied: Copied) -> None:
        """Put ``copied`` in ``slot``'s sequence in place of what it held."""
        lib = self.m.lib
        lib.llama_kv_cache_seq_rm(self._ctx, slot, 0, -1)
        self._holes = True
        self._cached[slot] = []
        if copied.seq is not None:
            n = common_prefix(self._cached[copied.seq], copied.tokens)
            lib.llama_kv_cache_seq_cp(self._ctx, copied.seq, slot, 0, n)
        else:
            # (cells for all of it in one run, else nothing: the prompt is then read)
            n = len(copied.tokens) if lib.llama_state_seq_set_data(self._ctx, copied.data, copied.size, slot, 0) else 0
        self._cached[slot] = copied.tokens[:n]
        self.borrowed += n

    def _step(self) -> None:
        """One decode: a token for each writer, then prompt tokens up to the plan's budget."""
        now = self.m.clock()
        for job in [j for j in self._active.values() if j.stop.is_set()]:
            self._finish(job)
        step = plan(self._active.values(), now)
        rows = [(job, job.last, True) for job in step.writers]  # (job, token, wants logits)
        budget = step.budget
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
        several = sum(now - t < SHARED_S for t in self.m.used) > 1
        self._use_threads(max(1, self.m.threads // max(self.m.lanes, 2)) if several else self._most())
        self._compact()
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
            self._holes = True
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

    def _compact(self) -> None:
        """Close the holes taken-out cells left before the next decode. ik_llama.cpp's cache
        with holes between two sequences' cells gave a step that wrote one reply's token
        and read another's prompt the wrong cells: both replies went wrong ("There eight.",
        " units as a person would say them.") and the second slot's cache with them; four
        conversations at once lost one answer in every run that way."""
        if self._holes:
            self.m.lib.llama_kv_cache_defrag(self._ctx)
            self.m.lib.llama_kv_cache_update(self._ctx)
            self._holes = False

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
            job.first_at = self.m.clock()
            job.prompt_ms = (job.first_at - job.began) * 1000
            if job.max_tokens <= 0:
                self._finish(job)
                return
        logits = np.ctypeslib.as_array(self.m.C.llama_get_logits_ith(self._ctx, row), (self.m.n_vocab,)).copy()
        if job.grammar_state:
            logits = allowed(self.m.C, self.m.lib, self._ctx, job.grammar_state, logits)
        temperature = 0.0 if job.grammar_state else job.temperature
        token = sample(logits, temperature, job.sampling, self._rng)
        while job.written < job.min_tokens and self.m.C.llama_token_is_eog(self.m.model, token):
            logits[token] = -np.inf  # not the end yet: the likeliest other token
            token = sample(logits, temperature, job.sampling, self._rng)
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
        job.words += job.written == 1 or piece[:1].isspace()
        if job.on_chunk is not None and job.on_chunk({"choices": [{"delta": {"content": piece}, **chunk}]}):
            job.stop.set()
        if job.written >= job.max_tokens:
            self._finish(job)  # (a forced call ends at its object's close: the grammar then allows only the end)

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.m.C.llama_token_to_piece(self.m.model, token, buf, 64, 0, False)
        return buf.raw[: max(n, 0)]

    def _text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", "replace")

    def _finish(self, job: Job, error: str | None = None) -> None:
        job.error = job.error or error
        job.ended = job.ended or self.m.clock()
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
