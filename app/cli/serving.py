"""``duplex serve``'s server process: the backends built, the server started, drained on a signal."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable

from duplex.app.cli.backends import BackendChoice, BackendError, build
from duplex.app.edge.capacity import Capacity
from duplex.app.edge.config import ServerConfig


async def serve(
    config: ServerConfig,
    choice: BackendChoice,
    *,
    capacity: Capacity | None = None,
    listening: Callable[[], None] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or ``POST /admin/drain``), then drain: new sessions are
    refused, each open one is closed once its reply in progress is done (1001)."""
    from duplex.app.edge.memory import fix_mmap_threshold
    from duplex.app.edge.server import DuplexServer

    fix_mmap_threshold()  # this process is the server: large buffers go back when freed
    backends = await build(choice)
    # What the models left lives as long as the process: a full collection walked it in
    # 50 ms (the default backends), stopping every session's loop; frozen, it takes 0.
    gc.collect()
    gc.freeze()
    try:
        try:
            backends.talker.check_voice(config.voice)
        except ValueError as exc:
            raise BackendError(f"--voice: {exc}") from None
        server = DuplexServer(backends, config, capacity=capacity)
        await server.start()
        if listening is not None:
            listening()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second one cuts the drain short
            loop.add_signal_handler(sig, server.begin_drain, sig.name)
        await server.draining.begun.wait()
        await server.drain()
        server.close()
        await server.wait_closed()
    finally:
        await backends.aclose()
