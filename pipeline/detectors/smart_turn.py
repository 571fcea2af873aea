"""Smart Turn v3.2, Daily's audio end-of-turn model (BSD-2-Clause, 8.7 MB ONNX).

The weights ship in Duplex's own package data (``assets/models/smart_turn``, with
their license; taken unmodified from the ``pipecat-ai`` 1.14.0 wheel) and are
checked against the sha256 pinned here before use. It hears the last 8 s of a
turn as Whisper log-mel features (zero-padded on the left) and answers
P(complete) in ~50 ms on one thread; decisions run on a small thread pool
(onnxruntime releases the GIL).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import soxr

from duplex.pipeline.arena import shrinking
from duplex.pipeline.log_mel import HOP, RATE, log_mel
from duplex.pipeline.weights import AssetFile

WEIGHTS = AssetFile(
    "models/smart_turn/smart-turn-v3.2-cpu.onnx",
    "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
)
SECONDS = 8


class SmartTurn:
    """Smart Turn v3.2 on onnxruntime, shared by every session."""

    name = "smart-turn-v3.2"
    seconds = float(SECONDS)

    def __init__(self, *, workers: int = 2) -> None:
        self.workers = workers
        self.concurrency = workers
        self._session: Any = None
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="smart-turn")

    def load(self) -> None:
        """Check the file against its sha256 and build the session (blocking)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        # Exact int8 sums: onnxruntime's u8s8 kernel saturates on x86 CPUs without VNNI, so
        # the same audio got another P on another CPU (a lone "okay": 0.54 here, 0.47 exact),
        # and a turn decision with it. Exact on every CPU, for ~50 ms more a decision.
        options.add_session_config_entry("session.x64quantprecision", "1")
        self._session = ort.InferenceSession(WEIGHTS.read(), options, providers=["CPUExecutionProvider"])

    async def start(self) -> None:
        await asyncio.to_thread(self.load)
        await self.complete(np.zeros(RATE // 2, np.int16), RATE)  # the first run pays for set-up

    def complete_blocking(self, pcm: np.ndarray, rate: int) -> float:
        """P(complete) for the speech ending ``pcm``; blocks the calling thread."""
        if self._session is None:
            self.load()
        x = pcm.astype(np.float32) / 32768.0
        if rate != RATE:
            x = soxr.resample(x, rate, RATE)
        n = SECONDS * RATE
        x = x[-n:] if x.size >= n else np.pad(x, (n - x.size, 0))
        features = log_mel(x, n // HOP, normalize=True)[None]
        out = self._session.run(None, {"input_features": features})
        return float(np.asarray(out[0]).reshape(-1)[0])

    def shrink(self) -> None:
        """Give back the arena's unused memory (one run on silence)."""
        if self._session is not None:
            n = SECONDS * RATE
            features = log_mel(np.zeros(n, np.float32), n // HOP, normalize=True)[None]
            self._session.run(None, {"input_features": features}, shrinking())

    async def complete(self, pcm: np.ndarray, rate: int) -> float:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.complete_blocking, pcm, rate)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
