"""Test helpers that wait on conditions, never on the clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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
        if t.get_name().startswith(("talker:", "vocoder:", "sink:")) and not t.done()
    ]
