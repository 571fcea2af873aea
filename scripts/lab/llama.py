"""llama.cpp's own server (``xllamacpp``, the ``baseline`` extra) in a child process on a
free loopback port: the "remote" chat endpoint a benchmark points ``--thinker openai`` at,
running the same weights the local thinker runs in process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.net import free_port

_SERVE = """
import json, signal, sys, threading
import xllamacpp
cfg = json.loads(sys.argv[1])
p = xllamacpp.CommonParams()
p.model.path = cfg["model"]
p.model_alias = {cfg["alias"]}
p.n_parallel = cfg["slots"]
p.n_ctx = cfg["context"] * cfg["slots"]
p.cpuparams.n_threads = cfg["threads"]
p.cpuparams_batch.n_threads = cfg["threads"]
p.hostnames = ["127.0.0.1"]
p.port = cfg["port"]
p.ui = False
p.verbosity = 0
server = xllamacpp.Server(p)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
done.wait()
"""


class LlamaServer:
    """llama.cpp's OpenAI-compatible server for ``model`` (a GGUF file), started by :meth:`running`."""

    def __init__(
        self, model: Path, *, alias: str = "local", slots: int = 4, threads: int = 2, context: int = 4096
    ) -> None:
        self.port = free_port()
        self.alias = alias
        self.config = {
            "model": str(model),
            "alias": alias,
            "slots": slots,
            "threads": threads,
            "context": context,
            "port": self.port,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until ``/health`` answers (the model is loaded)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, json.dumps(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the llama.cpp server did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @contextmanager
    def running(self) -> Iterator[LlamaServer]:
        self.start()
        try:
            yield self
        finally:
            self.stop()
