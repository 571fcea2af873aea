"""Servers for tests and benchmarks: in this process, or ``duplex serve`` in its own.

A benchmark's clients must not share the server's GIL, so benchmarks and the load
test spawn ``duplex serve`` (:class:`ServerProcess`); tests that look inside the
server run it in process (:func:`serving`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any

from duplex.app.edge.config import ServerConfig
from duplex.app.edge.server import DuplexServer
from duplex.pipeline.backends import Backends
from lab.net import free_port


@asynccontextmanager
async def serving(backends: Backends, config: ServerConfig | None = None) -> AsyncIterator[DuplexServer]:
    """A real DuplexServer on a free loopback port (or ``config``'s), closed on exit."""
    srv = DuplexServer(backends, config or ServerConfig(host="127.0.0.1", port=0))
    await srv.start()
    try:
        yield srv
    finally:
        srv.close()
        await srv.wait_closed()


class ServerProcess:
    """``duplex serve`` in a child process on a free port; started by :meth:`running`."""

    def __init__(self, *flags: str, log: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.flags = flags
        self.log = log
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def http(self, path: str) -> bytes:
        """GET ``path`` from the server."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            body: bytes = r.read()
            return body

    def start(self, timeout: float = 120.0) -> None:
        """Start it and wait until ``/healthz`` answers (a slow model may take a while)."""
        out: IO[Any] | int = open(self.log, "w") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "duplex.app",
                "serve",
                "--port",
                str(self.port),
                "--log-level",
                "WARNING",
                *self.flags,
            ],
            stdout=out,
            stderr=out,
            env=self.env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"duplex serve {' '.join(self.flags)} exited with {self.proc.returncode}")
            try:
                self.http("/healthz")
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"duplex serve did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @contextmanager
    def running(self) -> Iterator[ServerProcess]:
        self.start()
        try:
            yield self
        finally:
            self.stop()
