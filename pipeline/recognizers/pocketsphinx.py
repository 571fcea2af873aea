"""pocketsphinx: offline speech recognition with a model shipped in its package.

pocketsphinx 5 ships a US English acoustic model, language model and dictionary
(no download). A decoder costs ~90 MB and ~0.4 s to build and decodes at ~0.15x
real time here. Its ``process_raw`` holds the GIL for the whole decode (measured:
a Python thread runs at 2% of its speed meanwhile), so decoding on a thread would
stall the event loop for the length of a decode; each utterance is decoded in one
of a few worker processes instead, at a lower OS priority, each holding one decoder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import numpy as np
import soxr

ASR_RATE = 16000
DITHER_RMS = 30.0
"""pocketsphinx does badly on digital silence (its cepstral normalisation sees no
energy): measured on eSpeak speech here, word error fell from 69% to 17% with
this much dither. Seeded, so the same audio always gives the same words."""


def new_decoder() -> Any:
    """One pocketsphinx decoder on the shipped en-US model."""
    from pocketsphinx import Decoder

    # Batch normalisation over each utterance: a decoder's answer must not depend on
    # what it heard before, or replays would not repeat. The search keeps its default
    # beams: pruning harder (maxhmmpf 3000, maxwpf 10) saved 28% of the CPU on 64
    # padded eSpeak turns but raised the word error rate from 47.6% to 49.7%.
    return Decoder(samprate=ASR_RATE, loglevel="FATAL", cmn="batch")


def decode_utterance(decoder: Any, pcm: np.ndarray, rate: int) -> str:
    """Decode one utterance (PCM16 at ``rate``) with ``decoder``; blocks, holding the GIL."""
    if pcm.size == 0:
        return ""
    x = pcm if rate == ASR_RATE else soxr.resample(pcm, rate, ASR_RATE)
    x = x.astype(np.float64) + np.random.default_rng(0).normal(0.0, DITHER_RMS, x.size)
    data = np.clip(np.rint(x), -32768, 32767).astype("<i2").tobytes()
    decoder.start_utt()
    decoder.process_raw(data, False, True)
    decoder.end_utt()
    hyp = decoder.hyp()
    text = hyp.hypstr if hyp is not None else ""
    return " ".join(w for w in text.split() if not w.startswith(("<", "[", "++")))


class _Worker:
    """One ``python -m duplex.pipeline.recognizers.pocketsphinx`` child holding a decoder;
    length-prefixed frames on its pipes."""

    def __init__(self, nice: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, "--worker", str(nice)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.call(b"", ASR_RATE)  # answers once its decoder is built

    def call(self, pcm: bytes, rate: int) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(_HEADER.pack(rate, len(pcm)) + pcm)
        self.proc.stdin.flush()
        size = _read_exactly(self.proc.stdout, 4)
        return _read_exactly(self.proc.stdout, int.from_bytes(size, "little")).decode()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


_HEADER = struct.Struct("<II")  # sample rate, byte count


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise RuntimeError("recognition worker exited")
    return data


class PocketsphinxRecognizer:
    """pocketsphinx's shipped en-US model in a few worker processes, one decoder each.

    Workers are started on demand up to ``workers`` (or all at once by ``prewarm``);
    an utterance waits for an idle one. A worker that dies is replaced; the
    utterance it held fails (the session hears nothing, and goes on).
    """

    name = "pocketsphinx"
    partials = False  # a decode costs ~0.15x real time: too slow to re-decode a growing turn

    def __init__(self, workers: int = 2, *, nice: int = 10) -> None:
        self.workers = workers
        self.nice = nice
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        # Threads only wait on pipes (no GIL held): the decoding is in the workers.
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="asr")

    def prewarm(self) -> None:
        """Start every worker and build its decoder now (~0.5 s each, in parallel).

        The server's memory is then what it will be under load, and the first turns do not wait.
        """
        for worker in list(self._threads.map(lambda _: self._start(), range(self.workers - len(self._all)))):
            self._idle.put(worker)

    def pids(self) -> list[int]:
        """The worker processes' ids (for memory and CPU accounting)."""
        with self._lock:
            return [w.proc.pid for w in self._all]

    def _start(self) -> _Worker:
        worker = _Worker(self.nice)
        with self._lock:
            self._all.append(worker)
        return worker

    def _borrow(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                grow = len(self._all) < self.workers
            return self._start() if grow else self._idle.get()

    def transcribe_blocking(self, pcm: np.ndarray, rate: int) -> str:
        """Decode one utterance (PCM16 at ``rate``) in a worker; blocks the calling thread."""
        worker = self._borrow()
        try:
            text = worker.call(pcm.astype("<i2").tobytes(), rate)
        except (OSError, RuntimeError):
            with self._lock:
                if worker in self._all:  # not if close() took it already
                    self._all.remove(worker)
            worker.close()
            raise
        self._idle.put(worker)
        return text

    @property
    def concurrency(self) -> int:
        return self.workers

    async def start(self) -> None:
        await asyncio.to_thread(self.prewarm)

    async def transcribe(
        self, pcm: np.ndarray, rate: int, *, partial: bool = False, go_on: Callable[[], None] | None = None
    ) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self.transcribe_blocking, pcm, rate)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers now: queued utterances are dropped, decodes under way end
        with their worker (a long decode must not hold a shutdown)."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.close()


def _serve(nice: int) -> None:
    """A worker's loop: frames in on stdin, text out on stdout, until stdin closes."""
    # Ctrl-C in a terminal reaches the whole process group: the server shuts its
    # workers down itself, and a worker gone early would fail a turn in progress.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(nice)  # when the CPU is short, the server's event loop (VAD, barge-in, pacing) goes first
    # The frames get their own copy of stdout; anything a library prints goes to stderr.
    stdin, stdout = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    decoder = new_decoder()
    while header := stdin.read(_HEADER.size):
        rate, size = _HEADER.unpack(header)
        pcm = np.frombuffer(stdin.read(size), dtype="<i2")
        text = decode_utterance(decoder, pcm, rate).encode()
        stdout.write(len(text).to_bytes(4, "little") + text)
        stdout.flush()


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _serve(int(sys.argv[2]))
