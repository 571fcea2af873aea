"""Test helpers that wait on conditions, never on the clock."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from app.config import ServerConfig
from app.server import DuplexServer


async def until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Yield to the loop until ``predicate()`` holds; fail after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)
    assert predicate(), what


def stage_tasks() -> list[asyncio.Task]:
    """Engine stage tasks still alive in this loop."""
    return [
        t for t in asyncio.all_tasks()
        if t.get_name().startswith(("thinker:", "talker:", "vocoder:", "writer:", "sink:")) and not t.done()
    ]


def need(ok: bool, reason: str) -> None:
    """Skip (saying why) when an optional part is missing; fail instead where CI
    sets DUPLEX_REQUIRE_ALL=1, so CI never passes by skipping."""
    if ok:
        return
    if os.environ.get("DUPLEX_REQUIRE_ALL") == "1":
        pytest.fail(f"required for this run: {reason}")
    pytest.skip(reason)


@asynccontextmanager
async def serving(talker, vocoder, *, config: ServerConfig | None = None, **kw) -> AsyncIterator[DuplexServer]:
    """A real DuplexServer on a free loopback port (or ``config``), closed on exit."""
    srv = DuplexServer(talker, vocoder, config or ServerConfig(host="127.0.0.1", port=0), **kw)
    await srv.start()
    try:
        yield srv
    finally:
        srv.close()
        await srv.wait_closed()
