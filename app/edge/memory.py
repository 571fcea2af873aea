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

import ctypes
import ctypes.util
import gc
import os

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
