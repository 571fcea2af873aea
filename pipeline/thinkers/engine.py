"""The chat model's engine: ik_llama.cpp's C API in this process, driven from Python.

The weights are loaded once; the conversations' *slots* are spread over *lanes*
(:mod:`~duplex.pipeline.thinkers.lane`), each a context of its own with its own worker
thread, so two lanes decode at once on two cores without waiting for each other. Slot
``s`` is in lane ``s % lanes`` (which slot a conversation gets:
:class:`~duplex.pipeline.thinkers.slots.Slots`). A request whose prompt begins as another
slot's cache does (the system prompt and tools every session of an application shares)
starts from a copy of those cells, from whichever lane holds them. Requests and streamed
chunks are llama.cpp server's OpenAI-style shapes (``handle_chat_completions``, and
vLLM's ``min_tokens``), so the thinker reads them as it read llama.cpp's own server.

Why ik_llama.cpp and not llama.cpp's own server (``xllamacpp``, the engine before): on
this project's 2-core AVX2 CPUs its kernels, the weights repacked at load, read a prompt
twice as fast (8 tokens after a cached prefix 199 -> 85 ms, 164 tokens cold 2.38 -> 1.25 s)
and write a token ~8% faster; the prompt still to read when a turn is confirmed is what
stands between the turn and the reply's first token. The parts of a server this needs
are small: the chat template (:mod:`~duplex.pipeline.thinkers.chatml`), sampling
(numpy, llama.cpp server's defaults), a GBNF grammar for a forced call.
"""

from __future__ import annotations

import threading
from typing import Any

from duplex.pipeline.thinkers.chatml import render
from duplex.pipeline.thinkers.job import Job, OnChunk, timings
from duplex.pipeline.thinkers.lane import Lane, Shared
from duplex.pipeline.thinkers.llama_api import QUIET, api, apply_template
from duplex.pipeline.thinkers.sampling import MIN_P, TOP_K, TOP_P


def lane_count(threads: int, slots: int) -> int:
    """Lanes for ``threads`` and ``slots``: one a thread, at most one a slot."""
    return max(1, min(threads, slots))


class Engine:
    """A GGUF chat model with ``slots`` cached sequences of ``context`` tokens each, on
    ``lanes`` contexts (default: one a thread, at most one a slot)."""

    def __init__(self, path: str, *, slots: int, context: int, threads: int, lanes: int | None = None) -> None:
        C, lib = api()
        lib.llama_log_set(QUIET, None)
        C.llama_backend_init()
        mp = C.llama_model_default_params()
        mp.use_mmap = False  # the weights are repacked for the CPU's kernels: a mapping would stay resident too
        mp.repack_tensors = True
        model = C.llama_model_load_from_file(path.encode(), mp)
        if not model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        n = lane_count(lanes or threads, slots)
        vocab = C.llama_model_get_vocab(model)
        self._m = Shared(C, lib, model, vocab, C.llama_vocab_n_tokens(vocab), threads, n, [0.0] * slots)
        self.slots, self.context, self.threads = slots, context, threads
        self.n_vocab, self._lib = self._m.n_vocab, lib
        template = lib.llama_model_chat_template(model, None)
        self._template: bytes | None = None if template is None or b"<|im_start|>" in template else template
        """A template other than ChatML (llama.cpp's own renderer knows the common ones)."""
        self.lanes: list[Lane] = []
        try:
            for i in range(n):
                self.lanes.append(Lane(self._m, i, list(range(i, slots, n)), context))
            self._m.lanes_made[:] = self.lanes
        except Exception:
            self.close()
            raise

    @property
    def used(self) -> list[float]:
        """When each slot last had a request (``time.monotonic``): who shares the cores."""
        return self._m.used

    # -- the server's surface -------------------------------------------------

    def handle_chat_completions(
        self, body: dict[str, Any], on_chunk: OnChunk | None = None, stop: threading.Event | None = None
    ) -> dict[str, Any]:
        """A chat completion (llama.cpp server's fields); with ``on_chunk`` streamed to it.
        Blocks until the request ends (or ``stop`` is set: at the next step, a prompt being
        read included); returns the whole answer (or ``{"error": ...}``)."""
        prompt = self.prompt(body["messages"], add_generation_prompt=body.get("add_generation_prompt", True))
        slot = body.get("id_slot")
        if slot is not None and not 0 <= slot < self.slots:
            return {"error": {"message": f"no slot {slot}: the model has {self.slots}"}}
        n = len(self.lanes)
        lane = self.lanes[slot % n] if slot is not None else min(self.lanes, key=lambda la: la.load)
        job = Job(
            slot=None if slot is None else slot // n,
            tokens=self.tokenize(prompt),
            max_tokens=int(body.get("max_tokens", body.get("n_predict", 256)) or 0),
            temperature=float(body.get("temperature", 0.8)),
            sampling=(int(body.get("top_k", TOP_K)), float(body.get("top_p", TOP_P)), float(body.get("min_p", MIN_P))),
            top_logprobs=int(body.get("top_logprobs", 0)) if body.get("logprobs") else 0,
            grammar=body.get("grammar"),
            on_chunk=on_chunk if body.get("stream") else None,
            stop=stop or threading.Event(),
            min_tokens=int(body.get("min_tokens", 0) or 0),
        )
        if not body.get("cache_prompt", True) and job.slot is not None:
            job.cache_n = -1  # read afresh
        if not lane.submit(job):
            return {"error": {"message": "the model is closed"}}
        job.done.wait()
        if job.error is not None:
            return {"error": {"message": job.error}}
        return {"choices": [{"message": {"role": "assistant", "content": "".join(job.text)}}], "timings": timings(job)}

    def handle_metrics(self) -> str:
        """The counters, as llama.cpp's server writes them (summed over the lanes)."""
        counters = {"prompt_tokens_total": 0.0, "tokens_predicted_total": 0.0}
        for lane in self.lanes:
            for k in counters:
                counters[k] += lane.counters[k]
        counters["requests_processing"] = float(sum(lane.running for lane in self.lanes))
        return "\n".join(f"llamacpp:{k} {v}" for k, v in counters.items())

    def prompt(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The model's prompt for ``messages``: ChatML (the shipped model's template, and
        llama.cpp's when a model has none) in Python; another model's template by
        llama.cpp, a call and a tool's result as the text ChatML would give them."""
        if self._template is None:
            return render(messages, add_generation_prompt=add_generation_prompt)
        return apply_template(self._lib, self._template, messages, add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        C, model = self._m.C, self._m.model
        n = -C.llama_tokenize(model, data, len(data), None, 0, False, True)
        buf = (C.llama_token * n)()
        got = C.llama_tokenize(model, data, len(data), buf, n, False, True)
        return list(buf[:got])

    def close(self) -> None:
        """Stop the lanes (requests in flight end with an error) and free the model."""
        lanes, self.lanes = self.lanes, []
        for lane in lanes:
            lane.close()
        if self._m.model:
            self._m.C.llama_free_model(self._m.model)
            self._m.model = None
