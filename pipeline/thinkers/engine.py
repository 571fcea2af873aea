"""The chat model's engine: ik_llama.cpp's C API in this process, driven from Python.

One worker thread owns the model's context. Each *slot* is a sequence of the context's
cache and remembers the tokens it holds, so a request evaluates only what differs from
the slot's last prompt (a conversation's prefix stays read between turns). Every step
decodes one batch: a token for each slot that is writing, and the prompts still being
read (at most :data:`PROMPT_CHUNK` of them a step, so replies already speaking keep
their pace). Requests and streamed chunks are llama.cpp server's OpenAI-style shapes
(``handle_chat_completions``), so the thinker reads them as it read llama.cpp's own server.

Why ik_llama.cpp and not llama.cpp's own server (``xllamacpp``, the engine before): on
this project's 2-core AVX2 CPUs its kernels, the weights repacked at load, read a prompt
twice as fast (8 tokens after a cached prefix 199 -> 85 ms, 164 tokens cold 2.38 -> 1.25 s)
and write a token ~8% faster; the prompt still to read when a turn is confirmed is what
stands between the turn and the reply's first token. The parts of a server this needs
are small: the chat template (:mod:`~duplex.pipeline.thinkers.chatml`), sampling
(numpy, llama.cpp server's defaults), a GBNF grammar for a forced call.
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

from duplex.pipeline.thinkers.chatml import render
from duplex.pipeline.thinkers.llama_api import QUIET, api, apply_template
from duplex.pipeline.thinkers.sampling import MIN_P, TOP_K, TOP_P, logprobs, sample

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
class _Job:
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


class Engine:
    """A GGUF chat model with ``slots`` cached sequences of ``context`` tokens each."""

    def __init__(self, path: str, *, slots: int, context: int, threads: int) -> None:
        C, lib = self._C, self._lib = api()
        lib.llama_log_set(QUIET, None)
        C.llama_backend_init()
        mp = C.llama_model_default_params()
        mp.use_mmap = False  # the weights are repacked for the CPU's kernels: a mapping would stay resident too
        mp.repack_tensors = True
        self._model = C.llama_model_load_from_file(path.encode(), mp)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = C.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = context * slots, BATCH, BATCH, slots
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn = False  # ik's flash attention asserts on long prompts without AVX-VNNI
        self._ctx = lib.llama_init_from_model(self._model, cp)
        if not self._ctx:
            raise RuntimeError("llama.cpp could not make a context")
        self.slots, self.context, self.threads = slots, context, threads
        self._threads_now = threads
        self.n_vocab = C.llama_vocab_n_tokens(C.llama_model_get_vocab(self._model))
        self._vocab = C.llama_model_get_vocab(self._model)
        template = lib.llama_model_chat_template(self._model, None)
        self._template: bytes | None = None if template is None or b"<|im_start|>" in template else template
        """A template other than ChatML (llama.cpp's own renderer knows the common ones)."""
        self._batch = C.llama_batch_init(BATCH, 0, 1)
        self._cached: list[list[int]] = [[] for _ in range(slots)]
        self._used = [0.0] * slots
        self._active: dict[int, _Job] = {}
        self._queue: list[_Job] = []
        self._wake = threading.Condition()
        self._closed = False
        self._rng = np.random.default_rng()
        self.counters = {"prompt_tokens_total": 0.0, "tokens_predicted_total": 0.0, "requests_processing": 0.0}
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._thread.start()

    # -- the server's surface -------------------------------------------------

    def handle_chat_completions(
        self, body: dict[str, Any], on_chunk: OnChunk | None = None, stop: threading.Event | None = None
    ) -> dict[str, Any]:
        """A chat completion (llama.cpp server's fields); with ``on_chunk`` streamed to it.
        Blocks until the request ends (or ``stop`` is set: at the next step, a prompt being
        read included); returns the whole answer (or ``{"error": ...}``)."""
        prompt = self.prompt(body["messages"], add_generation_prompt=body.get("add_generation_prompt", True))
        job = _Job(
            slot=body.get("id_slot"),
            tokens=self.tokenize(prompt),
            max_tokens=int(body.get("max_tokens", body.get("n_predict", 256)) or 0),
            temperature=float(body.get("temperature", 0.8)),
            sampling=(int(body.get("top_k", TOP_K)), float(body.get("top_p", TOP_P)), float(body.get("min_p", MIN_P))),
            top_logprobs=int(body.get("top_logprobs", 0)) if body.get("logprobs") else 0,
            grammar=body.get("grammar"),
            on_chunk=on_chunk if body.get("stream") else None,
            stop=stop or threading.Event(),
        )
        if job.slot is not None and not 0 <= job.slot < self.slots:
            return {"error": {"message": f"no slot {job.slot}: the model has {self.slots}"}}
        if not body.get("cache_prompt", True) and job.slot is not None:
            job.cache_n = -1  # read afresh
        with self._wake:
            if self._closed:
                return {"error": {"message": "the model is closed"}}
            self._queue.append(job)
            self._wake.notify()
        job.done.wait()
        if job.error is not None:
            return {"error": {"message": job.error}}
        return {"choices": [{"message": {"role": "assistant", "content": "".join(job.text)}}], "timings": _timings(job)}

    def handle_metrics(self) -> str:
        """The counters, as llama.cpp's server writes them."""
        return "\n".join(f"llamacpp:{k} {v}" for k, v in self.counters.items())

    def prompt(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The model's prompt for ``messages``: ChatML (the shipped model's template, and
        llama.cpp's when a model has none) in Python; another model's template by
        llama.cpp, a call and a tool's result as the text ChatML would give them."""
        if self._template is None:
            return render(messages, add_generation_prompt=add_generation_prompt)
        return apply_template(self._lib, self._template, messages, add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        n = -self._C.llama_tokenize(self._model, data, len(data), None, 0, False, True)
        buf = (self._C.llama_token * n)()
        got = self._C.llama_tokenize(self._model, data, len(data), buf, n, False, True)
        return list(buf[:got])

    def close(self) -> None:
        """Stop the worker (requests in flight end with an error) and free the model."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()
        self._C.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._C.llama_free_model(self._model)

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

    def _startable(self) -> list[_Job]:
        """Queued requests whose slot is free (the first free one for a request with none)."""
        out, taken = [], set(self._active)
        for job in self._queue:
            if job.slot is None:
                free = [s for s in range(self.slots) if s not in taken]
                if free:
                    job.slot = min(free, key=lambda s: self._used[s])
            if job.slot is not None and job.slot not in taken:
                taken.add(job.slot)
                out.append(job)
        return out

    def _start(self, job: _Job) -> None:
        assert job.slot is not None
        cached = self._cached[job.slot]
        keep = 0 if job.cache_n < 0 else _common(cached, job.tokens)
        if keep == len(job.tokens) and job.max_tokens > 0:
            keep -= 1  # the last token is read again for its logits
        self._lib.llama_kv_cache_seq_rm(self._ctx, job.slot, keep, -1)
        del cached[keep:]
        job.cache_n, job.pending, job.began = keep, job.tokens[keep:], time.monotonic()
        if job.grammar:
            job.grammar_state = self._lib.llama_sampler_init_grammar(self._vocab, job.grammar.encode(), b"root")
            if not job.grammar_state:
                self._finish(job, "the grammar does not parse")
                return
        self._active[job.slot] = job
        self._used[job.slot] = time.monotonic()
        self.counters["requests_processing"] = len(self._active)

    def _step(self) -> None:
        """One decode: a token for each writer, then prompt tokens up to the chunk."""
        rows: list[tuple[_Job, int, bool]] = []  # (job, token, wants logits)
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
        self._use_threads(self.threads if sum(now - t < SHARED_S for t in self._used) <= 1 else 1)
        b = self._batch
        b.n_tokens = len(rows)
        for i, (job, token, logits) in enumerate(rows):
            assert job.slot is not None
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, len(self._cached[job.slot]), 1, logits
            b.seq_id[i][0] = job.slot
            self._cached[job.slot].append(token)
        if (ret := self._C.llama_decode(self._ctx, b)) != 0:
            for job in {id(j): j for j, _, _ in rows}.values():  # what it held is not in the cache
                assert job.slot is not None
                self._cached[job.slot].clear()
                self._lib.llama_kv_cache_seq_rm(self._ctx, job.slot, 0, -1)
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

    def _use_threads(self, n: int) -> None:
        """All of them while one conversation is talking; one thread while several are
        (requests in more than one slot within :data:`SHARED_S`): their recognisers and voices
        want the cores too, and two threads that wait for each other at every layer lost more
        than they won. Held out, the same hour: four conversations asking at once, first
        audio 1.43 / 2.73 s (p95 2.98) with two threads, 1.06 / 1.72 s (1.84) with one; one
        conversation 0.64 / 0.76 s with two, 0.80 / 0.97 s with one (docs/benchmarks-history.md,
        2026-12-06)."""
        if n != self._threads_now:
            self._lib.llama_set_n_threads(self._ctx, n, n)
            self._threads_now = n

    def _write(self, job: _Job, row: int) -> None:
        """Sample the job's next token from row ``row``'s logits and stream it."""
        if job.last < 0:
            job.prompt_ms = (time.monotonic() - job.began) * 1000
            if job.max_tokens <= 0:
                self._finish(job)
                return
        logits = np.ctypeslib.as_array(self._C.llama_get_logits_ith(self._ctx, row), (self.n_vocab,)).copy()
        if job.grammar_state:
            logits = self._constrain(job, logits)
        token = sample(logits, 0.0 if job.grammar_state else job.temperature, job.sampling, self._rng)
        chunk: Chunk = {}
        if job.top_logprobs and job.written == 0:
            chunk = {"logprobs": {"content": [logprobs(logits, token, job.top_logprobs, self._text)]}}
        if self._C.llama_token_is_eog(self._model, token):
            self._finish(job)
            return
        if job.grammar_state:
            self._lib.llama_grammar_accept_token(job.grammar_state, self._ctx, token)
        job.last, job.written = token, job.written + 1
        self.counters["tokens_predicted_total"] += 1
        piece = job.decoder.decode(self._piece(token))
        job.text.append(piece)
        if job.on_chunk is not None and job.on_chunk({"choices": [{"delta": {"content": piece}, **chunk}]}):
            job.stop.set()
        if job.written >= job.max_tokens:
            self._finish(job)  # (a forced call ends at its object's close: the grammar then allows only the end)

    def _constrain(self, job: _Job, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the tokens the grammar forbids at -inf: the likeliest
        :data:`GRAMMAR_FIRST` are judged first, the whole vocabulary only if none of them may follow."""
        first = np.argpartition(-logits, GRAMMAR_FIRST)[:GRAMMAR_FIRST]
        for ids in (first, np.arange(self.n_vocab)):
            data = np.zeros(ids.size, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
            data["id"], data["logit"] = ids, logits[ids]
            arr = self._C.llama_token_data_array(
                data.ctypes.data_as(ctypes.POINTER(self._C.llama_token_data)), ids.size, -1, False
            )
            self._lib.llama_grammar_sample(job.grammar_state, self._ctx, ctypes.byref(arr))
            kept = data[: int(arr.size)]
            kept = kept[np.isfinite(kept["logit"])]
            if kept.size:
                out = np.full(self.n_vocab, -np.inf, np.float32)
                out[kept["id"]] = kept["logit"]
                return out
        raise RuntimeError("the grammar allows no token")

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self._C.llama_token_to_piece(self._model, token, buf, 64, 0, False)
        return buf.raw[: max(n, 0)]

    def _text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", "replace")

    def _finish(self, job: _Job, error: str | None = None) -> None:
        job.error = job.error or error
        if job.slot is not None and self._active.get(job.slot) is job:
            del self._active[job.slot]  # (a prompt left half read: the cache holds what was read)
        if job.grammar_state:
            self._lib.llama_grammar_free(job.grammar_state)
            job.grammar_state = None
        self.counters["requests_processing"] = len(self._active)
        if job.on_chunk is not None and job.error is None:
            job.on_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": _timings(job)})
        job.done.set()


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0])


def _timings(job: _Job) -> dict[str, Any]:
    predicted_ms = (time.monotonic() - job.began) * 1000 - job.prompt_ms if job.began else 0.0
    return {
        "prompt_n": len(job.tokens) - max(job.cache_n, 0),
        "cache_n": max(job.cache_n, 0),
        "prompt_ms": round(job.prompt_ms, 1),
        "predicted_n": job.written,
        "predicted_ms": round(predicted_ms, 1),
    }
