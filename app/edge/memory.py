"""Give memory back to the operating system when the server goes idle.

After a burst of sessions, finished sessions can still sit in reference cycles
(a cancelled task's traceback holds its frames) until the collector's oldest
generation runs, which can take many minutes; and glibc keeps freed memory in its
arenas (one per thread that allocated), so RSS stays at the peak although nothing
is in use. Measured after rounds of 50 sessions here: RSS grew ~10 MiB a round
without this, and returns to within a few MiB of the baseline with it.

And glibc raises its mmap threshold each time a large block is freed, so the big
buffers of a long turn (a 28 s segment's features, a whole turn's copies) come from
the heap afterwards and stay there: a pause storm left RSS +147 MiB after the session
had gone, trimmed or not. A fixed threshold of 1 MiB gives every large block back when
it is freed: +33 MiB once, then +2 to +5 a storm. (glibc's starting 128 KiB did the same
but cost 20 busy sessions half their speed: every audio slice was an mmap and its page
faults; speech end -> first audio 3.4 s median at 1 MiB, 6.3-6.7 s at 128 KiB.)
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Awaitable, Callable, Sized

log = logging.getLogger("duplex.server")

TRIM_AFTER_S = 0.5
"""How long after the last session ends its memory is handed back."""
MMAP_THRESHOLD = 1024 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Serve blocks over ``threshold`` bytes by mmap from now on, and keep it fixed
    (glibc only; False where unavailable)."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # musl, macOS
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def release_free_heap() -> bool:
    """Return free heap pages to the OS (glibc only); False where unavailable."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:  # musl, macOS
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))


def rss_bytes() -> int:
    """This process's resident memory (Linux; 0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_idle_memory() -> None:
    """Collect reference cycles, then trim the heap (a few ms; call when nothing is running)."""
    gc.collect()
    release_free_heap()


class IdleMemory:
    """What the server holds with nobody connected, given back each time the last
    session leaves; the memory budget counts what sessions add on top of it."""

    def __init__(self, sessions: Sized, shrink: Callable[[], Awaitable[None]]) -> None:
        self.sessions, self.shrink = sessions, shrink
        self.base = self.start = rss_bytes()
        """RSS with no session: at start, then after each time the last session left."""
        self.trims = 0
        """Times the server went idle and gave memory back."""
        self.trimmed = True
        """No session has opened since memory was last given back (nor since the start)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def added_mb(self) -> int:
        """What the sessions hold now, over the baseline."""
        return (rss_bytes() - self.base) // (1024 * 1024)

    def opened(self) -> None:
        self.trimmed = False

    def left(self) -> None:
        """A session ended; if it was the last one, its memory goes back soon, once the
        WebSocket layer has let go of its connection too (not while it still holds it)."""
        if not self.sessions:
            asyncio.get_running_loop().call_later(TRIM_AFTER_S, self._soon)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _soon(self) -> None:
        if not self.sessions and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._trim(), name="idle-trim")

    async def _trim(self) -> None:
        """With nobody connected: the models' arenas shrunk, reference cycles collected,
        the heap trimmed, and what is left taken as the server's own."""
        try:
            await self.shrink()
        except Exception:  # a model that cannot shrink keeps its memory; nothing else changes
            log.exception("shrinking the models' memory failed")
        if self.sessions:
            return  # someone came meanwhile: what they hold is theirs, measured from the last baseline
        release_idle_memory()
        # What is still held with nobody connected is the server's (the allocator's
        # high-water marks, kept to be used again), not any session's.
        idle = rss_bytes()
        if idle > self.base:
            log.info("memory held with no session: %d MiB over the start", (idle - self.start) >> 20)
        self.base = idle
        self.trims += 1
        self.trimmed = not self.sessions
